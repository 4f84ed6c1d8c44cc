/* SPDX-License-Identifier: MIT */
/*
 * zeapp: shared Level Zero plumbing of the test programs (see zeapp.h;
 * the rest they share is zeapp_data.c's).
 * Build with -DZEAPP_LINKED and -lze_loader to offer the symbol route;
 * without it the binary never links the loader and reaches it only through
 * dlopen(RTLD_LOCAL), as oneCCL and libfabric do.
 */
#include "test/mpi/zeapp.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ZEAPP_LOADER_SONAME "libze_loader.so.1"

static const char *const route_names[] = {
    [ZEAPP_ROUTE_SYMBOL] = "symbol",
    [ZEAPP_ROUTE_DLSYM] = "dlsym",
    [ZEAPP_ROUTE_DDI] = "ddi",
    [ZEAPP_ROUTE_ZEX] = "zex",
};

int zeapp_route_parse(const char *name)
{
    for (size_t i = 0; i < sizeof(route_names) / sizeof(route_names[0]); i++) {
        if (strcmp(name, route_names[i]) != 0)
            continue;
        if (!zeapp_route_available((enum zeapp_route)i)) {
            fprintf(stderr, "--route %s needs the binary linked with -lze_loader "
                            "(this one reaches the loader by dlopen only)\n", name);
            return -1;
        }
        return (int)i;
    }
    return -1;
}

const char *zeapp_route_name(enum zeapp_route route)
{
    return route_names[route];
}

#define ZEAPP_RESULTS(X)                                                                 \
    X(ZE_RESULT_SUCCESS)                                                                 \
    X(ZE_RESULT_NOT_READY)                                                               \
    X(ZE_RESULT_ERROR_DEVICE_LOST)                                                       \
    X(ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY)                                                \
    X(ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY)                                              \
    X(ZE_RESULT_ERROR_MODULE_BUILD_FAILURE)                                              \
    X(ZE_RESULT_ERROR_INSUFFICIENT_PERMISSIONS)                                          \
    X(ZE_RESULT_ERROR_NOT_AVAILABLE)                                                     \
    X(ZE_RESULT_ERROR_DEPENDENCY_UNAVAILABLE)                                            \
    X(ZE_RESULT_ERROR_UNINITIALIZED)                                                     \
    X(ZE_RESULT_ERROR_UNSUPPORTED_VERSION)                                               \
    X(ZE_RESULT_ERROR_UNSUPPORTED_FEATURE)                                               \
    X(ZE_RESULT_ERROR_INVALID_ARGUMENT)                                                  \
    X(ZE_RESULT_ERROR_INVALID_NULL_HANDLE)                                               \
    X(ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE)                                              \
    X(ZE_RESULT_ERROR_INVALID_NULL_POINTER)                                              \
    X(ZE_RESULT_ERROR_INVALID_SIZE)                                                      \
    X(ZE_RESULT_ERROR_UNSUPPORTED_SIZE)                                                  \
    X(ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT)                                             \
    X(ZE_RESULT_ERROR_INVALID_SYNCHRONIZATION_OBJECT)                                    \
    X(ZE_RESULT_ERROR_INVALID_ENUMERATION)                                               \
    X(ZE_RESULT_ERROR_UNSUPPORTED_ENUMERATION)                                           \
    X(ZE_RESULT_ERROR_UNKNOWN)

const char *zeapp_result_name(ze_result_t r)
{
#define ZEAPP_CASE(name)                                                                 \
    case name:                                                                           \
        return #name;
    switch (r) {
        ZEAPP_RESULTS(ZEAPP_CASE)
    default:
        return "unknown ze_result_t";
    }
#undef ZEAPP_CASE
}

void zeapp_die(struct zeapp *app, const char *fmt, ...)
{
    char msg[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    /* One write, so that the line is not torn by other ranks' output. */
    fprintf(stderr, "%s: %s\n", app->who, msg);
    fflush(stderr);
    app->die(1);
    exit(1); /* die() should not return; never go on regardless */
}

void zeapp_fail(struct zeapp *app, const char *what, ze_result_t r)
{
    zeapp_die(app, "%s failed: 0x%08x (%s)", what, (unsigned)r, zeapp_result_name(r));
}

#define ZEAPP_CHECK(app, what, call)                                                     \
    do {                                                                                 \
        ze_result_t r_ = (call);                                                         \
        if (r_ != ZE_RESULT_SUCCESS)                                                     \
            zeapp_fail((app), (what), r_);                                               \
    } while (0)

bool zeapp_route_available(enum zeapp_route route)
{
#ifdef ZEAPP_LINKED
    return true;
#else
    return route != ZEAPP_ROUTE_SYMBOL;
#endif
}

static void resolve_symbols(struct zeapp *app)
{
#ifdef ZEAPP_LINKED
#define ZEAPP_SET(n) app->n = ze##n;
    ZEAPP_FUNCS(ZEAPP_SET)
#undef ZEAPP_SET
#else
    zeapp_die(app, "--route symbol needs the binary linked with -lze_loader "
                   "(this one reaches the loader with dlopen only)");
#endif
}

static void resolve_dlsym(struct zeapp *app)
{
    app->loader = dlopen(ZEAPP_LOADER_SONAME, RTLD_LOCAL | RTLD_NOW);
    if (app->loader == NULL)
        zeapp_die(app, "dlopen(%s) failed: %s", ZEAPP_LOADER_SONAME, dlerror());
#define ZEAPP_DLSYM(n)                                                                   \
    app->n = (ze_pfn##n##_t)dlsym(app->loader, "ze" #n);                                 \
    if (app->n == NULL)                                                                  \
        zeapp_die(app, "dlsym(%s) failed: %s", "ze" #n, dlerror());
    ZEAPP_FUNCS(ZEAPP_DLSYM)
#undef ZEAPP_DLSYM
}

/* What oneCCL and UMF do: take the tables and call through them. */
static void resolve_ddi(struct zeapp *app)
{
    ze_pfnGetMemProcAddrTable_t get_mem;
    ze_pfnGetEventPoolProcAddrTable_t get_pool;
    ze_event_pool_dditable_t pool = {0};
    ze_mem_dditable_t mem = {0};

    get_mem = (ze_pfnGetMemProcAddrTable_t)dlsym(app->loader, "zeGetMemProcAddrTable");
    get_pool =
        (ze_pfnGetEventPoolProcAddrTable_t)dlsym(app->loader, "zeGetEventPoolProcAddrTable");
    if (get_mem == NULL || get_pool == NULL)
        zeapp_die(app, "dlsym(zeGet*ProcAddrTable) failed: %s", dlerror());
    ZEAPP_CHECK(app, "zeGetMemProcAddrTable", get_mem(ZE_API_VERSION_CURRENT, &mem));
    ZEAPP_CHECK(app, "zeGetEventPoolProcAddrTable", get_pool(ZE_API_VERSION_CURRENT, &pool));
    if (mem.pfnGetIpcHandle == NULL || mem.pfnOpenIpcHandle == NULL ||
        mem.pfnCloseIpcHandle == NULL || pool.pfnGetIpcHandle == NULL ||
        pool.pfnOpenIpcHandle == NULL || pool.pfnCloseIpcHandle == NULL)
        zeapp_die(app, "the loader's Mem/EventPool tables lack IPC entries");
    app->MemGetIpcHandle = mem.pfnGetIpcHandle;
    app->MemOpenIpcHandle = mem.pfnOpenIpcHandle;
    app->MemCloseIpcHandle = mem.pfnCloseIpcHandle;
    app->EventPoolGetIpcHandle = pool.pfnGetIpcHandle;
    app->EventPoolOpenIpcHandle = pool.pfnOpenIpcHandle;
    app->EventPoolCloseIpcHandle = pool.pfnCloseIpcHandle;
}

static void resolve_zex(struct zeapp *app)
{
    void *get = NULL, *open = NULL;

    ZEAPP_CHECK(app, "zeDriverGetExtensionFunctionAddress(zexMemGetIpcHandles)",
                app->DriverGetExtensionFunctionAddress(app->driver, "zexMemGetIpcHandles",
                                                       &get));
    ZEAPP_CHECK(app, "zeDriverGetExtensionFunctionAddress(zexMemOpenIpcHandles)",
                app->DriverGetExtensionFunctionAddress(app->driver, "zexMemOpenIpcHandles",
                                                       &open));
    if (get == NULL || open == NULL)
        zeapp_die(app, "zeDriverGetExtensionFunctionAddress returned NULL");
    app->zex_get = (zeapp_pfn_zex_get_t)get;
    app->zex_open = (zeapp_pfn_zex_open_t)open;
}

void zeapp_init(struct zeapp *app, enum zeapp_route route, const char *who,
                void (*die)(int code))
{
    ze_command_queue_desc_t qdesc = {.stype = ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC,
                                     .mode = ZE_COMMAND_QUEUE_MODE_SYNCHRONOUS};
    ze_context_desc_t cdesc = {.stype = ZE_STRUCTURE_TYPE_CONTEXT_DESC};
    uint32_t n;

    memset(app, 0, sizeof(*app));
    snprintf(app->who, sizeof(app->who), "%s", who);
    app->die = die;
    app->route = route;
    if (route == ZEAPP_ROUTE_SYMBOL)
        resolve_symbols(app);
    else
        resolve_dlsym(app);
    ZEAPP_CHECK(app, "zeInit", app->Init(0));
    n = 1;
    ZEAPP_CHECK(app, "zeDriverGet", app->DriverGet(&n, &app->driver));
    if (n == 0)
        zeapp_die(app, "zeDriverGet found no driver (is ZE_ENABLE_ALT_DRIVERS set?)");
    n = 1;
    ZEAPP_CHECK(app, "zeDeviceGet", app->DeviceGet(app->driver, &n, &app->device));
    if (n == 0)
        zeapp_die(app, "zeDeviceGet found no device");
    ZEAPP_CHECK(app, "zeContextCreate", app->ContextCreate(app->driver, &cdesc, &app->context));
    ZEAPP_CHECK(app, "zeCommandListCreateImmediate",
                app->CommandListCreateImmediate(app->context, app->device, &qdesc, &app->list));
    if (route == ZEAPP_ROUTE_DDI)
        resolve_ddi(app);
    else if (route == ZEAPP_ROUTE_ZEX)
        resolve_zex(app);
}

void zeapp_fini(struct zeapp *app)
{
    ZEAPP_CHECK(app, "zeCommandListDestroy", app->CommandListDestroy(app->list));
    ZEAPP_CHECK(app, "zeContextDestroy", app->ContextDestroy(app->context));
    /* The loader stays loaded: its destructors run at exit, as in real apps. */
}

void *zeapp_alloc_device(struct zeapp *app, size_t size)
{
    ze_device_mem_alloc_desc_t desc = {.stype = ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC};
    void *ptr = NULL;

    ZEAPP_CHECK(app, "zeMemAllocDevice",
                app->MemAllocDevice(app->context, &desc, size, 64, app->device, &ptr));
    return ptr;
}

void *zeapp_alloc_host(struct zeapp *app, size_t size)
{
    ze_host_mem_alloc_desc_t desc = {.stype = ZE_STRUCTURE_TYPE_HOST_MEM_ALLOC_DESC};
    void *ptr = NULL;

    ZEAPP_CHECK(app, "zeMemAllocHost", app->MemAllocHost(app->context, &desc, size, 64, &ptr));
    return ptr;
}

void zeapp_free(struct zeapp *app, void *ptr)
{
    ZEAPP_CHECK(app, "zeMemFree", app->MemFree(app->context, ptr));
}

void zeapp_copy(struct zeapp *app, void *dst, const void *src, size_t size)
{
    ZEAPP_CHECK(app, "zeCommandListAppendMemoryCopy",
                app->CommandListAppendMemoryCopy(app->list, dst, src, size, NULL, 0, NULL));
}

ze_result_t zeapp_ipc_get(struct zeapp *app, void *ptr, ze_ipc_mem_handle_t *handle)
{
    uint32_t n = 1;

    if (app->route == ZEAPP_ROUTE_ZEX)
        return app->zex_get(app->context, ptr, &n, handle);
    return app->MemGetIpcHandle(app->context, ptr, handle);
}

ze_result_t zeapp_ipc_open(struct zeapp *app, const ze_ipc_mem_handle_t *handle, void **ptr)
{
    ze_ipc_mem_handle_t copy = *handle;

    if (app->route == ZEAPP_ROUTE_ZEX)
        return app->zex_open(app->context, app->device, 1, &copy, 0, ptr);
    return app->MemOpenIpcHandle(app->context, app->device, copy, 0, ptr);
}

ze_result_t zeapp_ipc_close(struct zeapp *app, void *ptr)
{
    return app->MemCloseIpcHandle(app->context, ptr);
}

const char *zeapp_ipc_get_name(const struct zeapp *app)
{
    return app->route == ZEAPP_ROUTE_ZEX ? "zexMemGetIpcHandles" : "zeMemGetIpcHandle";
}

const char *zeapp_ipc_open_name(const struct zeapp *app)
{
    return app->route == ZEAPP_ROUTE_ZEX ? "zexMemOpenIpcHandles" : "zeMemOpenIpcHandle";
}
