/* SPDX-License-Identifier: MIT */
/*
 * zeapp: shared Level Zero plumbing of the test programs (see zeapp.h).
 * Build with -DZEAPP_LINKED and -lze_loader to offer the symbol route;
 * without it the binary never links the loader and reaches it only through
 * dlopen(RTLD_LOCAL), as oneCCL and libfabric do.
 */
#include "test/mpi/zeapp.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

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

static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

uint64_t zeapp_seed(int rank, int alloc, int iter)
{
    return mix64(((uint64_t)(uint32_t)rank << 40) ^ ((uint64_t)(uint32_t)alloc << 20) ^
                 (uint64_t)(uint32_t)iter);
}

static unsigned pattern_byte(uint64_t seed, size_t j)
{
    return (unsigned)(mix64(seed ^ (uint64_t)(j / 8)) >> (8 * (j % 8))) & 0xffu;
}

void zeapp_pattern(void *buf, size_t offset, size_t len, uint64_t seed)
{
    unsigned char *p = buf;
    size_t j = offset, end = offset + len;

    /* Whole words where aligned: 1 MiB buffers are filled every iteration. */
    while (j < end && j % 8 != 0) {
        *p++ = (unsigned char)pattern_byte(seed, j);
        j++;
    }
    for (; j + 8 <= end; j += 8, p += 8) {
        uint64_t w = mix64(seed ^ (uint64_t)(j / 8));

        for (int b = 0; b < 8; b++)
            p[b] = (unsigned char)(w >> (8 * b));
    }
    for (; j < end; j++)
        *p++ = (unsigned char)pattern_byte(seed, j);
}

long zeapp_pattern_check(const void *buf, size_t offset, size_t len, uint64_t seed,
                         unsigned *got_p, unsigned *want_p)
{
    const unsigned char *p = buf;
    uint64_t word = 0, word_index = UINT64_MAX;

    for (size_t i = 0; i < len; i++) {
        size_t j = offset + i;
        unsigned want;

        if (j / 8 != word_index) {
            word_index = j / 8;
            word = mix64(seed ^ word_index);
        }
        want = (unsigned)(word >> (8 * (j % 8))) & 0xffu;
        if (p[i] != want) {
            *got_p = p[i];
            *want_p = want;
            return (long)i;
        }
    }
    return -1;
}

unsigned long zeapp_parse_ulong(const char *opt, const char *val)
{
    unsigned long v;
    char *end;

    if (val == NULL) {
        fprintf(stderr, "option %s needs a value\n", opt);
        exit(2);
    }
    errno = 0;
    v = strtoul(val, &end, 0);
    if (errno != 0 || end == val || *end != '\0' || val[0] == '-') {
        fprintf(stderr, "option %s: bad value '%s'\n", opt, val);
        exit(2);
    }
    return v;
}

double zeapp_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

void zeapp_exit(int code)
{
    exit(code);
}

int zeapp_send_fd(int sock, const void *msg, size_t len, int fd)
{
    char cbuf[CMSG_SPACE(sizeof(int))] = {0};
    struct iovec iov = {.iov_base = (void *)msg, .iov_len = len};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    if (fd >= 0) {
        mh.msg_control = cbuf;
        mh.msg_controllen = sizeof(cbuf);
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &fd, sizeof(int));
    }
    return sendmsg(sock, &mh, MSG_NOSIGNAL) == (ssize_t)len ? 0 : -1;
}

int zeapp_recv_fd(int sock, void *msg, size_t len, int *fd_p)
{
    char cbuf[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {.iov_base = msg, .iov_len = len};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
                        .msg_controllen = sizeof(cbuf)};
    *fd_p = -1;
    if (recvmsg(sock, &mh, MSG_CMSG_CLOEXEC) != (ssize_t)len)
        return -1;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
            memcpy(fd_p, CMSG_DATA(c), sizeof(int));
    return 0;
}
