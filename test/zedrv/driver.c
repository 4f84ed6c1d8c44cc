/* SPDX-License-Identifier: MIT */
/*
 * zedrv: configuration, logging, zeInit and the driver, device and context
 * objects. There is one driver with one GPU device. Contexts come from a
 * fixed pool and carry a magic number that each entry point checks; a
 * destroyed context's slot is reused by the next zeContextCreate (last
 * destroyed first), as a real driver's freed heap object would be
 * (compute-runtime's Context::destroy is `delete this`).
 */
#include "test/zedrv/zedrv.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>

#ifndef PR_SET_PTRACER
#define PR_SET_PTRACER 0x59616d61
#endif
#ifndef PR_SET_PTRACER_ANY
#define PR_SET_PTRACER_ANY ((unsigned long)-1)
#endif

pthread_mutex_t zedrv_lock = PTHREAD_MUTEX_INITIALIZER;

struct _ze_driver_handle_t zedrv_driver = {.magic = ZEDRV_MAGIC_DRIVER};
struct _ze_device_handle_t zedrv_device = {.magic = ZEDRV_MAGIC_DEVICE,
                                           .driver = &zedrv_driver};

static struct zedrv_config config;
static pthread_once_t config_once = PTHREAD_ONCE_INIT;

static bool env_flag(const char *name, bool dflt)
{
    const char *v = getenv(name);

    if (v == NULL || *v == '\0')
        return dflt;
    return strcmp(v, "0") != 0 && strcasecmp(v, "no") != 0 &&
           strcasecmp(v, "off") != 0 && strcasecmp(v, "n") != 0;
}

static void config_load(void)
{
    const char *layout = getenv("ZEDRV_IPC_LAYOUT");
    const char *ids = getenv("ZEDRV_ALLOC_ID");
    const char *destroy = getenv("ZEDRV_CONTEXT_DESTROY");

    config.id_address = ids != NULL && strcmp(ids, "address") == 0;
    if (ids != NULL && *ids != '\0' && strcmp(ids, "address") != 0 && strcmp(ids, "counter") != 0)
        fprintf(stderr, "[zedrv %d] unknown ZEDRV_ALLOC_ID=%s, using counter\n", (int)getpid(),
                ids);
    config.ctx_destroy = ZEDRV_CTX_DESTROY_IPC;
    if (destroy != NULL && strcmp(destroy, "all") == 0)
        config.ctx_destroy = ZEDRV_CTX_DESTROY_ALL;
    else if (destroy != NULL && strcmp(destroy, "keep") == 0)
        config.ctx_destroy = ZEDRV_CTX_DESTROY_KEEP;
    else if (destroy != NULL && *destroy != '\0' && strcmp(destroy, "ipc") != 0)
        fprintf(stderr, "[zedrv %d] unknown ZEDRV_CONTEXT_DESTROY=%s, using ipc\n",
                (int)getpid(), destroy);
    /* compute-runtime's debug keys: -1 default (on), 0 off, N on. */
    config.pool_device = env_flag("EnableDeviceUsmAllocationPool", true);
    config.pool_host = env_flag("EnableHostUsmAllocationPool", true);
    config.debug = env_flag("ZEDRV_DEBUG", false);
    config.fd_spread = env_flag("ZEDRV_FD_SPREAD", true);
    config.layout = ZEDRV_LAYOUT_CLASSIC;
    if (layout != NULL && strcmp(layout, "opaque") == 0)
        config.layout = ZEDRV_LAYOUT_OPAQUE;
    else if (layout != NULL && *layout != '\0' && strcmp(layout, "classic") != 0)
        /* A typo must not silently test the other layout. */
        fprintf(stderr, "[zedrv %d] unknown ZEDRV_IPC_LAYOUT=%s, using classic\n",
                (int)getpid(), layout);
}

const struct zedrv_config *zedrv_config(void)
{
    pthread_once(&config_once, config_load);
    return &config;
}

void zedrv_log(const char *fmt, ...)
{
    char line[512];
    va_list ap;
    int saved = errno;

    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    fprintf(stderr, "[zedrv %d] %s\n", (int)getpid(), line);
    errno = saved;
}

bool zedrv_device_ok(ze_device_handle_t device)
{
    return device != NULL && device->magic == ZEDRV_MAGIC_DEVICE;
}

#define ZEDRV_CONTEXTS 64
static struct _ze_context_handle_t contexts[ZEDRV_CONTEXTS];
static int ctx_free[ZEDRV_CONTEXTS];
static int ctx_nfree, ctx_used;

bool zedrv_context_ok(ze_context_handle_t context)
{
    /* By address first: a stale or random handle is never dereferenced. */
    return context >= &contexts[0] && context < &contexts[ZEDRV_CONTEXTS] &&
           __atomic_load_n(&context->magic, __ATOMIC_ACQUIRE) == ZEDRV_MAGIC_CONTEXT;
}

static bool driver_ok(ze_driver_handle_t driver)
{
    return driver != NULL && driver->magic == ZEDRV_MAGIC_DRIVER;
}

/*
 * Fork. A fork that lands while another thread holds zedrv_lock (inside
 * any entry point) leaves the child's copy locked by a thread that does
 * not exist there: the child's first call into the driver hangs. The fault
 * suite forks while 16 threads open handles and opens one in the child,
 * to test ipcbyval's own fork handlers; so fork takes the lock first and
 * both sides release it. Registered at zeInit, as a real driver would:
 * after ipcbyval's handler (installed at load), so this prepare runs
 * first, and ipcbyval's, which waits for its releases in flight in here,
 * bounds that wait (cache/locks.h: BYVAL_GATE_FORK_MS).
 */
static void fork_prepare(void)
{
    pthread_mutex_lock(&zedrv_lock);
}

static void fork_release(void)
{
    pthread_mutex_unlock(&zedrv_lock);
}

static void fork_register(void)
{
    pthread_atfork(fork_prepare, fork_release, fork_release);
}

ze_result_t zedrv_init(ze_init_flags_t flags)
{
    static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

    pthread_once(&fork_once, fork_register);
    /* The loader calls this twice per application zeInit: stay idempotent. */
    ZEDRV_LOG("zeInit(flags 0x%x), ipc layout %s", (unsigned)flags,
              zedrv_config()->layout == ZEDRV_LAYOUT_OPAQUE ? "opaque" : "classic");
    zedrv_devmem_setup();
    if (flags != 0 && !(flags & ZE_INIT_FLAG_GPU_ONLY))
        return ZE_RESULT_ERROR_UNINITIALIZED; /* VPU only: no such device */
    return ZE_RESULT_SUCCESS;
}

ze_result_t zedrv_driver_get(uint32_t *count, ze_driver_handle_t *drivers)
{
    if (count == NULL)
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    if (*count == 0 || drivers == NULL) {
        *count = 1;
        return ZE_RESULT_SUCCESS;
    }
    *count = 1;
    drivers[0] = &zedrv_driver;
    return ZE_RESULT_SUCCESS;
}

ze_result_t zedrv_driver_get_api_version(ze_driver_handle_t driver, ze_api_version_t *version)
{
    if (!driver_ok(driver))
        return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    if (version == NULL)
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    /* The tables we fill are the 1.4 ones of the installed headers. */
    *version = ZE_API_VERSION_CURRENT;
    return ZE_RESULT_SUCCESS;
}

ze_result_t zedrv_driver_get_properties(ze_driver_handle_t driver,
                                        ze_driver_properties_t *props)
{
    static const char uuid[ZE_MAX_DRIVER_UUID_SIZE] = "zedrv-byvaltest";

    if (!driver_ok(driver))
        return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    if (props == NULL)
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    memcpy(props->uuid.id, uuid, sizeof(props->uuid.id));
    props->driverVersion = 1;
    return ZE_RESULT_SUCCESS;
}

ze_result_t zedrv_driver_get_ipc_properties(ze_driver_handle_t driver,
                                            ze_driver_ipc_properties_t *props)
{
    if (!driver_ok(driver))
        return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    if (props == NULL)
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    props->flags = ZE_IPC_PROPERTY_FLAG_MEMORY | ZE_IPC_PROPERTY_FLAG_EVENT_POOL;
    return ZE_RESULT_SUCCESS;
}

/* Name and version as in compute-runtime's driver_experimental/zex_memory.h. */
#define ZEDRV_ZEX_MEM_IPC_HANDLES_NAME "ZEX_mem_ipc_handles"

ze_result_t zedrv_driver_get_extension_properties(ze_driver_handle_t driver, uint32_t *count,
                                                  ze_driver_extension_properties_t *props)
{
    if (!driver_ok(driver))
        return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    if (count == NULL)
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    if (props == NULL || *count == 0) {
        *count = 1;
        return ZE_RESULT_SUCCESS;
    }
    *count = 1;
    memset(props[0].name, 0, sizeof(props[0].name));
    strncpy(props[0].name, ZEDRV_ZEX_MEM_IPC_HANDLES_NAME, sizeof(props[0].name) - 1);
    props[0].version = ZE_MAKE_VERSION(1, 0);
    return ZE_RESULT_SUCCESS;
}

ze_result_t zedrv_driver_get_extension_function_address(ze_driver_handle_t driver,
                                                        const char *name, void **fn)
{
    if (!driver_ok(driver))
        return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    if (name == NULL || fn == NULL)
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    if (strcmp(name, "zexMemGetIpcHandles") == 0)
        *fn = (void *)zedrv_zex_get_ipc_handles;
    else if (strcmp(name, "zexMemOpenIpcHandles") == 0)
        *fn = (void *)zedrv_zex_open_ipc_handles;
    else
        *fn = zedrv_newer_entry_point(name); /* not compute-runtime's: ipc_exp.c */
    ZEDRV_LOG("zeDriverGetExtensionFunctionAddress(%s) = %p", name, *fn);
    /* compute-runtime: DriverHandle::getExtensionFunctionAddress. */
    return *fn != NULL ? ZE_RESULT_SUCCESS : ZE_RESULT_ERROR_INVALID_ARGUMENT;
}

ze_result_t zedrv_device_get(ze_driver_handle_t driver, uint32_t *count,
                             ze_device_handle_t *devices)
{
    if (!driver_ok(driver))
        return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    if (count == NULL)
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    if (*count == 0 || devices == NULL) {
        *count = 1;
        return ZE_RESULT_SUCCESS;
    }
    *count = 1;
    devices[0] = &zedrv_device;
    return ZE_RESULT_SUCCESS;
}

ze_result_t zedrv_device_get_properties(ze_device_handle_t device,
                                        ze_device_properties_t *props)
{
    static const char uuid[ZE_MAX_DEVICE_UUID_SIZE] = "zedrv-device-0";

    if (!zedrv_device_ok(device))
        return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    if (props == NULL)
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    /* Leave stype/pNext alone: they belong to the caller. */
    props->type = ZE_DEVICE_TYPE_GPU;
    props->vendorId = 0x8086;
    props->deviceId = 0x0bd5; /* a Data Center GPU Max id; only a label here */
    props->flags = 0;
    props->subdeviceId = 0;
    props->coreClockRate = 1000;
    props->maxMemAllocSize = (uint64_t)1 << 32;
    props->maxHardwareContexts = 64;
    props->maxCommandQueuePriority = 0;
    props->numThreadsPerEU = 8;
    props->physicalEUSimdWidth = 16;
    props->numEUsPerSubslice = 8;
    props->numSubslicesPerSlice = 4;
    props->numSlices = 1;
    props->timerResolution = 1;
    props->timestampValidBits = 64;
    props->kernelTimestampValidBits = 32;
    memcpy(props->uuid.id, uuid, sizeof(props->uuid.id));
    memset(props->name, 0, sizeof(props->name));
    strncpy(props->name, "zedrv memfd test GPU", sizeof(props->name) - 1);
    return ZE_RESULT_SUCCESS;
}

ze_result_t zedrv_context_create(ze_driver_handle_t driver, const ze_context_desc_t *desc,
                                 ze_context_handle_t *context)
{
    struct _ze_context_handle_t *ctx;

    if (!driver_ok(driver))
        return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    if (desc == NULL || context == NULL)
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    /*
     * Like the real driver with opaque handles, allow any process to
     * pidfd_getfd from us (Yama ptrace_scope 1). Without Yama this fails
     * with EINVAL, which the real driver also ignores.
     */
    if (zedrv_config()->layout == ZEDRV_LAYOUT_OPAQUE &&
        prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0) != 0)
        ZEDRV_LOG("prctl(PR_SET_PTRACER, ANY) failed: %m");
    pthread_mutex_lock(&zedrv_lock);
    if (ctx_nfree > 0)
        ctx = &contexts[ctx_free[--ctx_nfree]];
    else if (ctx_used < ZEDRV_CONTEXTS)
        ctx = &contexts[ctx_used++];
    else
        ctx = NULL;
    if (ctx != NULL) {
        ctx->driver = driver;
        __atomic_store_n(&ctx->magic, ZEDRV_MAGIC_CONTEXT, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&zedrv_lock);
    if (ctx == NULL)
        return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
    *context = ctx;
    ZEDRV_LOG("zeContextCreate = %p", (void *)ctx);
    return ZE_RESULT_SUCCESS;
}

/*
 * What a context takes with it depends on ZEDRV_CONTEXT_DESTROY. The spec
 * lets zeContextDestroy "immediately free all Host and Device allocations
 * associated with this context"; compute-runtime's Context::destroy only
 * deletes the context object (allocations belong to the driver handle's
 * SVM manager and stay usable through any other context). Default (ipc):
 * the context's IPC mappings are released, the importer-side case a cache
 * of mappings must survive; all: its allocations and its own event pools
 * are freed too; keep: as compute-runtime.
 */
ze_result_t zedrv_context_destroy(ze_context_handle_t context)
{
    if (!zedrv_context_ok(context))
        return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    ZEDRV_LOG("zeContextDestroy(%p)", (void *)context);
    zedrv_alloc_context_destroyed(context);
    zedrv_pools_context_destroyed(context);
    pthread_mutex_lock(&zedrv_lock);
    /* Poison the magic so a use after destroy is reported, not obeyed
     * (until a zeContextCreate reuses the slot). */
    if (__atomic_load_n(&context->magic, __ATOMIC_ACQUIRE) == ZEDRV_MAGIC_CONTEXT) {
        __atomic_store_n(&context->magic, 0, __ATOMIC_RELEASE);
        context->gen++;
        ctx_free[ctx_nfree++] = (int)(context - contexts);
    }
    pthread_mutex_unlock(&zedrv_lock);
    return ZE_RESULT_SUCCESS;
}

ze_result_t zedrv_context_get_status(ze_context_handle_t context)
{
    return zedrv_context_ok(context) ? ZE_RESULT_SUCCESS : ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
}

/*
 * As compute-runtime's Device::getCommandQueueGroupProperties for a GPU
 * with one render/compute engine group and one copy engine group: the
 * loader answers ZE_RESULT_ERROR_UNSUPPORTED_FEATURE for a NULL slot, and
 * IPC samples pick their queue ordinal from this.
 */
#define ZEDRV_QUEUE_GROUPS 2u

ze_result_t zedrv_device_get_queue_groups(ze_device_handle_t device, uint32_t *count,
                                          ze_command_queue_group_properties_t *props)
{
    if (!zedrv_device_ok(device))
        return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    if (count == NULL)
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    if (*count == 0 || props == NULL) {
        *count = ZEDRV_QUEUE_GROUPS;
        return ZE_RESULT_SUCCESS;
    }
    if (*count > ZEDRV_QUEUE_GROUPS)
        *count = ZEDRV_QUEUE_GROUPS;
    for (uint32_t i = 0; i < *count; i++) {
        /* Leave stype/pNext alone: they belong to the caller. */
        if (i == 0) {
            props[i].flags = ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COMPUTE |
                             ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COPY |
                             ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_METRICS |
                             ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COOPERATIVE_KERNELS;
            props[i].maxMemoryFillPatternSize = SIZE_MAX;
        } else {
            props[i].flags = ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COPY;
            props[i].maxMemoryFillPatternSize = 4; /* a blitter's */
        }
        props[i].numQueues = 1;
    }
    return ZE_RESULT_SUCCESS;
}

void zedrv_devmem_setup(void)
{
    devmem_setup("ZEDRV", ZEDRV_DEFAULT_TOTAL);
}

/* One memory module of ZEDRV_TOTAL_MEM bytes (the accounting's total). */
ze_result_t zedrv_device_get_memory_properties(ze_device_handle_t device, uint32_t *count,
                                               ze_device_memory_properties_t *props)
{
    struct devmem_stats st;

    if (!zedrv_device_ok(device))
        return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    if (count == NULL)
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    if (*count == 0 || props == NULL) {
        *count = 1;
        return ZE_RESULT_SUCCESS;
    }
    *count = 1;
    zedrv_devmem_setup();
    devmem_stats(0, &st);
    props[0].flags = 0;
    props[0].maxClockRate = 1600;
    props[0].maxBusWidth = 8192;
    props[0].totalSize = st.total;
    memset(props[0].name, 0, sizeof(props[0].name));
    strncpy(props[0].name, "HBM", sizeof(props[0].name) - 1);
    return ZE_RESULT_SUCCESS;
}

/*
 * Test-only, exported by name (dlsym it from this library): the device
 * memory statistics of the ledger (test/devmem/devmem.h), usable from any
 * process, without zeInit. 0 on success.
 */
ZEDRV_EXPORT int zedrvMemStats(struct devmem_stats *st);

int zedrvMemStats(struct devmem_stats *st)
{
    if (st == NULL)
        return -1;
    zedrv_devmem_setup();
    devmem_stats(0, st);
    return 0;
}
