/* SPDX-License-Identifier: MIT */
/*
 * zeldr: a stand-in for a Level Zero loader of spec 1.15, for the routes
 * into entry points that Debian's loader (1.8.12, spec 1.4) has neither
 * as symbols nor in its tables. Built as libze_loader.so.1 in its own
 * folder; a test puts that folder first in LD_LIBRARY_PATH. It behaves as
 * the real loader does with one driver and no layers (level-zero's shared
 * build, source/lib/ze_libddi.cpp and source/loader/ze_ldrddi.cpp, read at
 * version 1.32):
 *  - the driver is the first entry of ZE_ENABLE_ALT_DRIVERS; its tables are
 *    asked for with dlsym on its own handle, at version 1.15;
 *  - zeInit fills the loader's dispatch table by calling the loader's own
 *    exported zeGet*ProcAddrTable through the PLT, so a preloaded library
 *    that interposes them sees (and may wrap) every entry;
 *  - the exported API functions jump through that dispatch table;
 *  - zeGet*ProcAddrTable hand out the driver's entries (passthrough), as
 *    far as the caller's version has slots.
 * Only what the test programs call is there. Not a loader for anything
 * else: no validation, no intercept mode, one driver.
 */
#include <level_zero/ze_api.h>
#include <level_zero/ze_ddi.h>

#include <dlfcn.h>
#include <stddef.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))
#define V1_6 ZE_MAKE_VERSION(1, 6)
#define V1_9 ZE_MAKE_VERSION(1, 9)
#define V1_15 ZE_MAKE_VERSION(1, 15)
#define SLOTS 32

/* Tables as arrays of slots: the 1.15 layouts extend the 1.4 ones. */
enum { T_GLOBAL, T_DRIVER, T_DEVICE, T_CONTEXT, T_LIST, T_MEM, T_MEM_EXP, T_POOL, T_EVENT, T_N };
static const char *const getter_name[T_N] = {
    "zeGetGlobalProcAddrTable",  "zeGetDriverProcAddrTable",      "zeGetDeviceProcAddrTable",
    "zeGetContextProcAddrTable", "zeGetCommandListProcAddrTable", "zeGetMemProcAddrTable",
    "zeGetMemExpProcAddrTable",  "zeGetEventPoolProcAddrTable",   "zeGetEventProcAddrTable",
};

static void *drv_table[T_N][SLOTS]; /* the driver's, as it filled them */
static void *dispatch[T_N][SLOTS];  /* ours, filled through our own getters */
static int ready;

/* How many slots a table has at version v (the 1.4 headers' count, plus
 * the slots of later versions this stand-in knows). */
static size_t slots_at(int t, ze_api_version_t v)
{
    switch (t) {
    case T_MEM: /* 1.4: 10; 1.6 pfnPutIpcHandle; 1.9 pitch; 1.15 with properties */
        return v >= V1_15 ? 13 : v >= V1_9 ? 12 : v >= V1_6 ? 11 : 10;
    case T_POOL:
        return v >= V1_6 ? 6 : 5;
    case T_MEM_EXP:
        return 4;
    case T_GLOBAL: return sizeof(ze_global_dditable_t) / sizeof(void *);
    case T_DRIVER: return sizeof(ze_driver_dditable_t) / sizeof(void *);
    case T_DEVICE: return sizeof(ze_device_dditable_t) / sizeof(void *);
    case T_CONTEXT: return sizeof(ze_context_dditable_t) / sizeof(void *);
    case T_LIST: return sizeof(ze_command_list_dditable_t) / sizeof(void *);
    case T_EVENT: return sizeof(ze_event_dditable_t) / sizeof(void *);
    }
    return 0;
}

static ze_result_t get_table(int t, ze_api_version_t version, void *table)
{
    if (!table)
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    if (!ready)
        return ZE_RESULT_ERROR_UNINITIALIZED;
    if (version > V1_15)
        return ZE_RESULT_ERROR_UNSUPPORTED_VERSION;
    memcpy(table, drv_table[t], slots_at(t, version) * sizeof(void *));
    return ZE_RESULT_SUCCESS;
}

#define GETTER(fn, type, t)                                                               \
    EXPORT ze_result_t fn(ze_api_version_t version, type *table);                        \
    ze_result_t fn(ze_api_version_t version, type *table)                                \
    {                                                                                     \
        return get_table(t, version, table);                                              \
    }
GETTER(zeGetGlobalProcAddrTable, ze_global_dditable_t, T_GLOBAL)
GETTER(zeGetDriverProcAddrTable, ze_driver_dditable_t, T_DRIVER)
GETTER(zeGetDeviceProcAddrTable, ze_device_dditable_t, T_DEVICE)
GETTER(zeGetContextProcAddrTable, ze_context_dditable_t, T_CONTEXT)
GETTER(zeGetCommandListProcAddrTable, ze_command_list_dditable_t, T_LIST)
GETTER(zeGetMemProcAddrTable, ze_mem_dditable_t, T_MEM)
GETTER(zeGetMemExpProcAddrTable, void, T_MEM_EXP) /* not in the 1.4 headers */
GETTER(zeGetEventPoolProcAddrTable, ze_event_pool_dditable_t, T_POOL)
GETTER(zeGetEventProcAddrTable, ze_event_dditable_t, T_EVENT)

/* The exported functions: (name, table, slot index in the 1.15 layout:
 * the 1.4 headers' field where it has one). */
#define IX(type, field) (offsetof(type, field) / sizeof(void *))
#define API(X)                                                                            \
    X(zeDriverGet, T_DRIVER, IX(ze_driver_dditable_t, pfnGet))                            \
    X(zeDriverGetExtensionFunctionAddress, T_DRIVER,                                      \
      IX(ze_driver_dditable_t, pfnGetExtensionFunctionAddress))                           \
    X(zeDeviceGet, T_DEVICE, IX(ze_device_dditable_t, pfnGet))                            \
    X(zeContextCreate, T_CONTEXT, IX(ze_context_dditable_t, pfnCreate))                   \
    X(zeContextDestroy, T_CONTEXT, IX(ze_context_dditable_t, pfnDestroy))                 \
    X(zeCommandListAppendMemoryCopy, T_LIST,                                              \
      IX(ze_command_list_dditable_t, pfnAppendMemoryCopy))                                \
    X(zeCommandListCreateImmediate, T_LIST,                                               \
      IX(ze_command_list_dditable_t, pfnCreateImmediate))                                 \
    X(zeCommandListDestroy, T_LIST, IX(ze_command_list_dditable_t, pfnDestroy))           \
    X(zeMemAllocDevice, T_MEM, IX(ze_mem_dditable_t, pfnAllocDevice))                     \
    X(zeMemAllocHost, T_MEM, IX(ze_mem_dditable_t, pfnAllocHost))                         \
    X(zeMemFree, T_MEM, IX(ze_mem_dditable_t, pfnFree))                                   \
    X(zeMemGetAllocProperties, T_MEM, IX(ze_mem_dditable_t, pfnGetAllocProperties))       \
    X(zeMemGetAddressRange, T_MEM, IX(ze_mem_dditable_t, pfnGetAddressRange))             \
    X(zeMemGetIpcHandle, T_MEM, IX(ze_mem_dditable_t, pfnGetIpcHandle))                   \
    X(zeMemOpenIpcHandle, T_MEM, IX(ze_mem_dditable_t, pfnOpenIpcHandle))                 \
    X(zeMemCloseIpcHandle, T_MEM, IX(ze_mem_dditable_t, pfnCloseIpcHandle))               \
    X(zeMemFreeExt, T_MEM, IX(ze_mem_dditable_t, pfnFreeExt))                             \
    X(zeMemPutIpcHandle, T_MEM, 10)                                                       \
    X(zeMemGetIpcHandleWithProperties, T_MEM, 12)                                         \
    X(zeMemGetIpcHandleFromFileDescriptorExp, T_MEM_EXP, 0)                               \
    X(zeMemGetFileDescriptorFromIpcHandleExp, T_MEM_EXP, 1)                               \
    X(zeEventPoolCreate, T_POOL, IX(ze_event_pool_dditable_t, pfnCreate))                 \
    X(zeEventPoolDestroy, T_POOL, IX(ze_event_pool_dditable_t, pfnDestroy))               \
    X(zeEventPoolGetIpcHandle, T_POOL, IX(ze_event_pool_dditable_t, pfnGetIpcHandle))     \
    X(zeEventPoolOpenIpcHandle, T_POOL, IX(ze_event_pool_dditable_t, pfnOpenIpcHandle))   \
    X(zeEventPoolCloseIpcHandle, T_POOL, IX(ze_event_pool_dditable_t, pfnCloseIpcHandle)) \
    X(zeEventPoolPutIpcHandle, T_POOL, 5)                                                 \
    X(zeEventCreate, T_EVENT, IX(ze_event_dditable_t, pfnCreate))                         \
    X(zeEventDestroy, T_EVENT, IX(ze_event_dditable_t, pfnDestroy))                       \
    X(zeEventHostSignal, T_EVENT, IX(ze_event_dditable_t, pfnHostSignal))                 \
    X(zeEventHostSynchronize, T_EVENT, IX(ze_event_dditable_t, pfnHostSynchronize))       \
    X(zeEventQueryStatus, T_EVENT, IX(ze_event_dditable_t, pfnQueryStatus))               \
    X(zeEventHostReset, T_EVENT, IX(ze_event_dditable_t, pfnHostReset))

/* Each is a jump through its dispatch slot: the arguments pass untouched
 * whatever the signature (x86-64). A slot the driver left empty jumps to
 * unsupported(), which answers ZE_RESULT_ERROR_UNSUPPORTED_FEATURE. */
#define SLOT_VAR(name, t, i) void *zeldr_slot_##name;
API(SLOT_VAR)

static ze_result_t unsupported(void)
{
    return ZE_RESULT_ERROR_UNSUPPORTED_FEATURE;
}

#define TRAMPOLINE(name, t, i)                                                            \
    __asm__(".globl " #name "\n.type " #name ",@function\n" #name ":\n"                  \
            "    jmp *zeldr_slot_" #name "(%rip)\n.size " #name ",.-" #name "\n");
API(TRAMPOLINE)

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static ze_result_t init_result = ZE_RESULT_ERROR_UNINITIALIZED;

static void load(void)
{
    const char *path = getenv("ZE_ENABLE_ALT_DRIVERS");
    char first[4096];
    if (!path || !*path)
        return;
    snprintf(first, sizeof(first), "%s", path);
    first[strcspn(first, ",")] = '\0';
    void *drv = dlopen(first, RTLD_NOW | RTLD_LOCAL);
    if (!drv)
        return;
    for (int t = 0; t < T_N; t++) {
        ze_result_t (*get)(ze_api_version_t, void *) =
            (ze_result_t(*)(ze_api_version_t, void *))dlsym(drv, getter_name[t]);
        if (get && get(V1_15, drv_table[t]) != ZE_RESULT_SUCCESS)
            memset(drv_table[t], 0, sizeof(drv_table[t]));
    }
    ready = 1;
    /* Our own getters, through the PLT: a preload may wrap the entries. */
    zeGetGlobalProcAddrTable(V1_15, (void *)dispatch[T_GLOBAL]);
    zeGetDriverProcAddrTable(V1_15, (void *)dispatch[T_DRIVER]);
    zeGetDeviceProcAddrTable(V1_15, (void *)dispatch[T_DEVICE]);
    zeGetContextProcAddrTable(V1_15, (void *)dispatch[T_CONTEXT]);
    zeGetCommandListProcAddrTable(V1_15, (void *)dispatch[T_LIST]);
    zeGetMemProcAddrTable(V1_15, (void *)dispatch[T_MEM]);
    zeGetMemExpProcAddrTable(V1_15, (void *)dispatch[T_MEM_EXP]);
    zeGetEventPoolProcAddrTable(V1_15, (void *)dispatch[T_POOL]);
    zeGetEventProcAddrTable(V1_15, (void *)dispatch[T_EVENT]);
#define FILL(name, t, i) zeldr_slot_##name = dispatch[t][i] ? dispatch[t][i] : (void *)unsupported;
    API(FILL)
    ze_result_t (*init)(ze_init_flags_t) = (ze_result_t(*)(ze_init_flags_t))dispatch[T_GLOBAL][0];
    init_result = init ? init(0) : ZE_RESULT_ERROR_UNINITIALIZED;
}

EXPORT ze_result_t zeInit(ze_init_flags_t flags);

ze_result_t zeInit(ze_init_flags_t flags)
{
    (void)flags;
    pthread_once(&init_once, load);
    return init_result;
}
