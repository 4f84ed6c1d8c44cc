/* SPDX-License-Identifier: MIT */
/*
 * zedrv: the DDI table getters the loader looks up with dlsym on this
 * library before it calls pfnInit. Loader 1.8.12 asks for every ze, zet and
 * zes table of its headers; 46 must exist and succeed or zeInit fails with
 * ZE_RESULT_ERROR_UNINITIALIZED. All 52 are exported here; an entry we do
 * not implement stays NULL, which the loader accepts.
 *
 * One X-macro list of (slot, implementation) per table: the assignment
 * `table->slot = impl` makes the compiler check each prototype against the
 * loader's ze_pfn*_t type.
 */
#include "test/zedrv/zedrv.h"

#include <string.h>

#define ZEDRV_SET(slot, impl) table->slot = impl;
#define ZEDRV_NO_FIELDS(X)
#define ZEDRV_NO_EXTRA(version, table) ((void)0)

/*
 * Getter for table <prefix>_<lower>_dditable_t. Versions older than the
 * installed headers' may pass a shorter struct: only clear it whole when the
 * caller's version is at least ours (every slot we set exists since 1.0).
 */
#define ZEDRV_TABLE(prefix, Name, lower, FIELDS, EXTRA)                                  \
    ze_result_t ZE_APICALL prefix##Get##Name##ProcAddrTable(                             \
        ze_api_version_t version, prefix##_##lower##_dditable_t *table)                  \
    {                                                                                    \
        if (table == NULL)                                                               \
            return ZE_RESULT_ERROR_INVALID_NULL_POINTER;                                 \
        if (ZE_MAJOR_VERSION(version) != ZE_MAJOR_VERSION(ZE_API_VERSION_CURRENT))       \
            return ZE_RESULT_ERROR_UNSUPPORTED_VERSION;                                  \
        if (version >= ZE_API_VERSION_CURRENT)                                           \
            memset(table, 0, sizeof(*table));                                            \
        FIELDS(ZEDRV_SET)                                                                \
        EXTRA(version, table);                                                           \
        ZEDRV_LOG("%s(version %u.%u)", __func__, ZE_MAJOR_VERSION(version),              \
                  ZE_MINOR_VERSION(version));                                            \
        return ZE_RESULT_SUCCESS;                                                        \
    }

/* 1.6 put entry points: absent from the 1.8.12 headers, declared here. */
typedef ze_result_t(ZE_APICALL *zedrv_pfn_mem_put_t)(ze_context_handle_t, ze_ipc_mem_handle_t);
typedef ze_result_t(ZE_APICALL *zedrv_pfn_pool_put_t)(ze_context_handle_t,
                                                      ze_ipc_event_pool_handle_t);

/* The 1.6 tables are the 1.4 ones with pfnPutIpcHandle appended. */
struct mem_table_1_6 {
    ze_mem_dditable_t v1_4;
    zedrv_pfn_mem_put_t pfnPutIpcHandle;
};
struct pool_table_1_6 {
    ze_event_pool_dditable_t v1_4;
    zedrv_pfn_pool_put_t pfnPutIpcHandle;
};

#define ZEDRV_API_VERSION_1_6 ZE_MAKE_VERSION(1, 6)
#define ZEDRV_API_VERSION_1_15 ZE_MAKE_VERSION(1, 15)

/* The 1.15 Mem table: 1.6, then pfnGetPitchFor2dImage (1.9, not
 * implemented) and pfnGetIpcHandleWithProperties. */
typedef ze_result_t(ZE_APICALL *zedrv_pfn_with_props_t)(ze_context_handle_t, const void *,
                                                        void *, ze_ipc_mem_handle_t *);
struct mem_table_1_15 {
    struct mem_table_1_6 v1_6;
    void *pfnGetPitchFor2dImage;
    zedrv_pfn_with_props_t pfnGetIpcHandleWithProperties;
};

static void mem_put_slot(ze_api_version_t version, ze_mem_dditable_t *table)
{
    if (version >= ZEDRV_API_VERSION_1_6)
        ((struct mem_table_1_6 *)table)->pfnPutIpcHandle = zedrv_mem_put_ipc_handle;
    if (version >= ZEDRV_API_VERSION_1_15) {
        struct mem_table_1_15 *t = (struct mem_table_1_15 *)table;
        t->pfnGetPitchFor2dImage = NULL;
        t->pfnGetIpcHandleWithProperties = zedrv_mem_get_ipc_handle_with_properties;
    }
}

/* The MemExp table (spec 1.6; loader 1.8.12 never asks for it, newer
 * loaders do): the fd <-> IPC handle conversions, atomics not implemented. */
typedef struct zedrv_mem_exp_dditable {
    ze_result_t(ZE_APICALL *pfnGetIpcHandleFromFileDescriptorExp)(ze_context_handle_t, uint64_t,
                                                                  ze_ipc_mem_handle_t *);
    ze_result_t(ZE_APICALL *pfnGetFileDescriptorFromIpcHandleExp)(ze_context_handle_t,
                                                                  ze_ipc_mem_handle_t,
                                                                  uint64_t *);
    void *pfnSetAtomicAccessAttributeExp;
    void *pfnGetAtomicAccessAttributeExp;
} zedrv_mem_exp_dditable_t;

ZEDRV_EXPORT ze_result_t ZE_APICALL zeGetMemExpProcAddrTable(ze_api_version_t version,
                                                             zedrv_mem_exp_dditable_t *table);

ze_result_t ZE_APICALL zeGetMemExpProcAddrTable(ze_api_version_t version,
                                                zedrv_mem_exp_dditable_t *table)
{
    if (table == NULL)
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    if (ZE_MAJOR_VERSION(version) != ZE_MAJOR_VERSION(ZE_API_VERSION_CURRENT))
        return ZE_RESULT_ERROR_UNSUPPORTED_VERSION;
    memset(table, 0, sizeof(*table));
    table->pfnGetIpcHandleFromFileDescriptorExp = zedrv_mem_get_ipc_handle_from_fd;
    table->pfnGetFileDescriptorFromIpcHandleExp = zedrv_mem_get_fd_from_ipc_handle;
    return ZE_RESULT_SUCCESS;
}

static void pool_put_slot(ze_api_version_t version, ze_event_pool_dditable_t *table)
{
    if (version >= ZEDRV_API_VERSION_1_6)
        ((struct pool_table_1_6 *)table)->pfnPutIpcHandle = zedrv_event_pool_put_ipc_handle;
}

#define GLOBAL_FIELDS(X) X(pfnInit, zedrv_init)

#define DRIVER_FIELDS(X)                                                                 \
    X(pfnGet, zedrv_driver_get)                                                          \
    X(pfnGetApiVersion, zedrv_driver_get_api_version)                                    \
    X(pfnGetProperties, zedrv_driver_get_properties)                                     \
    X(pfnGetIpcProperties, zedrv_driver_get_ipc_properties)                              \
    X(pfnGetExtensionProperties, zedrv_driver_get_extension_properties)                  \
    X(pfnGetExtensionFunctionAddress, zedrv_driver_get_extension_function_address)

#define DEVICE_FIELDS(X)                                                                 \
    X(pfnGet, zedrv_device_get)                                                          \
    X(pfnGetProperties, zedrv_device_get_properties)                                     \
    X(pfnGetCommandQueueGroupProperties, zedrv_device_get_queue_groups)                  \
    X(pfnGetMemoryProperties, zedrv_device_get_memory_properties)

#define CONTEXT_FIELDS(X)                                                                \
    X(pfnCreate, zedrv_context_create)                                                   \
    X(pfnDestroy, zedrv_context_destroy)                                                 \
    X(pfnGetStatus, zedrv_context_get_status)

#define QUEUE_FIELDS(X)                                                                  \
    X(pfnCreate, zedrv_queue_create)                                                     \
    X(pfnDestroy, zedrv_queue_destroy)                                                   \
    X(pfnExecuteCommandLists, zedrv_queue_execute)                                       \
    X(pfnSynchronize, zedrv_queue_synchronize)

#define LIST_FIELDS(X)                                                                   \
    X(pfnCreate, zedrv_list_create)                                                      \
    X(pfnCreateImmediate, zedrv_list_create_immediate)                                   \
    X(pfnDestroy, zedrv_list_destroy)                                                    \
    X(pfnClose, zedrv_list_close)                                                        \
    X(pfnReset, zedrv_list_reset)                                                        \
    X(pfnAppendBarrier, zedrv_list_append_barrier)                                       \
    X(pfnAppendMemoryCopy, zedrv_list_append_memory_copy)                                \
    X(pfnAppendMemoryFill, zedrv_list_append_memory_fill)                                \
    X(pfnAppendSignalEvent, zedrv_list_append_signal_event)                              \
    X(pfnAppendWaitOnEvents, zedrv_list_append_wait_on_events)

#define EVENT_FIELDS(X)                                                                  \
    X(pfnCreate, zedrv_event_create)                                                     \
    X(pfnDestroy, zedrv_event_destroy)                                                   \
    X(pfnHostSignal, zedrv_event_host_signal)                                            \
    X(pfnHostSynchronize, zedrv_event_host_synchronize)                                  \
    X(pfnQueryStatus, zedrv_event_query_status)                                          \
    X(pfnHostReset, zedrv_event_host_reset)

#define POOL_FIELDS(X)                                                                   \
    X(pfnCreate, zedrv_event_pool_create)                                                \
    X(pfnDestroy, zedrv_event_pool_destroy)                                              \
    X(pfnGetIpcHandle, zedrv_event_pool_get_ipc_handle)                                  \
    X(pfnOpenIpcHandle, zedrv_event_pool_open_ipc_handle)                                \
    X(pfnCloseIpcHandle, zedrv_event_pool_close_ipc_handle)

#define MEM_FIELDS(X)                                                                    \
    X(pfnAllocShared, zedrv_mem_alloc_shared)                                            \
    X(pfnAllocDevice, zedrv_mem_alloc_device)                                            \
    X(pfnAllocHost, zedrv_mem_alloc_host)                                                \
    X(pfnFree, zedrv_mem_free)                                                           \
    X(pfnGetAllocProperties, zedrv_mem_get_alloc_properties)                             \
    X(pfnGetAddressRange, zedrv_mem_get_address_range)                                   \
    X(pfnGetIpcHandle, zedrv_mem_get_ipc_handle)                                         \
    X(pfnOpenIpcHandle, zedrv_mem_open_ipc_handle)                                       \
    X(pfnCloseIpcHandle, zedrv_mem_close_ipc_handle)

/* ze: 17 required tables and 6 optional Exp ones. */
ZEDRV_TABLE(ze, Global, global, GLOBAL_FIELDS, ZEDRV_NO_EXTRA)
ZEDRV_TABLE(ze, Driver, driver, DRIVER_FIELDS, ZEDRV_NO_EXTRA)
ZEDRV_TABLE(ze, Device, device, DEVICE_FIELDS, ZEDRV_NO_EXTRA)
ZEDRV_TABLE(ze, Context, context, CONTEXT_FIELDS, ZEDRV_NO_EXTRA)
ZEDRV_TABLE(ze, CommandQueue, command_queue, QUEUE_FIELDS, ZEDRV_NO_EXTRA)
ZEDRV_TABLE(ze, CommandList, command_list, LIST_FIELDS, ZEDRV_NO_EXTRA)
ZEDRV_TABLE(ze, Event, event, EVENT_FIELDS, ZEDRV_NO_EXTRA)
ZEDRV_TABLE(ze, EventPool, event_pool, POOL_FIELDS, pool_put_slot)
ZEDRV_TABLE(ze, Mem, mem, MEM_FIELDS, mem_put_slot)
ZEDRV_TABLE(ze, Fence, fence, ZEDRV_NO_FIELDS, ZEDRV_NO_EXTRA)
ZEDRV_TABLE(ze, Image, image, ZEDRV_NO_FIELDS, ZEDRV_NO_EXTRA)
ZEDRV_TABLE(ze, Kernel, kernel, ZEDRV_NO_FIELDS, ZEDRV_NO_EXTRA)
ZEDRV_TABLE(ze, Module, module, ZEDRV_NO_FIELDS, ZEDRV_NO_EXTRA)
ZEDRV_TABLE(ze, ModuleBuildLog, module_build_log, ZEDRV_NO_FIELDS, ZEDRV_NO_EXTRA)
ZEDRV_TABLE(ze, PhysicalMem, physical_mem, ZEDRV_NO_FIELDS, ZEDRV_NO_EXTRA)
ZEDRV_TABLE(ze, Sampler, sampler, ZEDRV_NO_FIELDS, ZEDRV_NO_EXTRA)
ZEDRV_TABLE(ze, VirtualMem, virtual_mem, ZEDRV_NO_FIELDS, ZEDRV_NO_EXTRA)
ZEDRV_TABLE(ze, DeviceExp, device_exp, ZEDRV_NO_FIELDS, ZEDRV_NO_EXTRA)
ZEDRV_TABLE(ze, EventExp, event_exp, ZEDRV_NO_FIELDS, ZEDRV_NO_EXTRA)
ZEDRV_TABLE(ze, ImageExp, image_exp, ZEDRV_NO_FIELDS, ZEDRV_NO_EXTRA)
ZEDRV_TABLE(ze, KernelExp, kernel_exp, ZEDRV_NO_FIELDS, ZEDRV_NO_EXTRA)
ZEDRV_TABLE(ze, FabricVertexExp, fabric_vertex_exp, ZEDRV_NO_FIELDS, ZEDRV_NO_EXTRA)
ZEDRV_TABLE(ze, FabricEdgeExp, fabric_edge_exp, ZEDRV_NO_FIELDS, ZEDRV_NO_EXTRA)

/* zet: 12 required tables and MetricGroupExp, all empty. */
ZEDRV_TABLE(zet, Device, device, ZEDRV_NO_FIELDS, ZEDRV_NO_EXTRA)
ZEDRV_TABLE(zet, Context, context, ZEDRV_NO_FIELDS, ZEDRV_NO_EXTRA)
ZEDRV_TABLE(zet, CommandList, command_list, ZEDRV_NO_FIELDS, ZEDRV_NO_EXTRA)
ZEDRV_TABLE(zet, Kernel, kernel, ZEDRV_NO_FIELDS, ZEDRV_NO_EXTRA)
ZEDRV_TABLE(zet, Module, module, ZEDRV_NO_FIELDS, ZEDRV_NO_EXTRA)
ZEDRV_TABLE(zet, Debug, debug, ZEDRV_NO_FIELDS, ZEDRV_NO_EXTRA)
ZEDRV_TABLE(zet, Metric, metric, ZEDRV_NO_FIELDS, ZEDRV_NO_EXTRA)
ZEDRV_TABLE(zet, MetricGroup, metric_group, ZEDRV_NO_FIELDS, ZEDRV_NO_EXTRA)
ZEDRV_TABLE(zet, MetricGroupExp, metric_group_exp, ZEDRV_NO_FIELDS, ZEDRV_NO_EXTRA)
ZEDRV_TABLE(zet, MetricQuery, metric_query, ZEDRV_NO_FIELDS, ZEDRV_NO_EXTRA)
ZEDRV_TABLE(zet, MetricQueryPool, metric_query_pool, ZEDRV_NO_FIELDS, ZEDRV_NO_EXTRA)
ZEDRV_TABLE(zet, MetricStreamer, metric_streamer, ZEDRV_NO_FIELDS, ZEDRV_NO_EXTRA)
ZEDRV_TABLE(zet, TracerExp, tracer_exp, ZEDRV_NO_FIELDS, ZEDRV_NO_EXTRA)

/* zes: all 17 required, all empty. */
ZEDRV_TABLE(zes, Driver, driver, ZEDRV_NO_FIELDS, ZEDRV_NO_EXTRA)
ZEDRV_TABLE(zes, Device, device, ZEDRV_NO_FIELDS, ZEDRV_NO_EXTRA)
ZEDRV_TABLE(zes, Scheduler, scheduler, ZEDRV_NO_FIELDS, ZEDRV_NO_EXTRA)
ZEDRV_TABLE(zes, PerformanceFactor, performance_factor, ZEDRV_NO_FIELDS, ZEDRV_NO_EXTRA)
ZEDRV_TABLE(zes, Power, power, ZEDRV_NO_FIELDS, ZEDRV_NO_EXTRA)
ZEDRV_TABLE(zes, Frequency, frequency, ZEDRV_NO_FIELDS, ZEDRV_NO_EXTRA)
ZEDRV_TABLE(zes, Engine, engine, ZEDRV_NO_FIELDS, ZEDRV_NO_EXTRA)
ZEDRV_TABLE(zes, Standby, standby, ZEDRV_NO_FIELDS, ZEDRV_NO_EXTRA)
ZEDRV_TABLE(zes, Firmware, firmware, ZEDRV_NO_FIELDS, ZEDRV_NO_EXTRA)
ZEDRV_TABLE(zes, Memory, memory, ZEDRV_NO_FIELDS, ZEDRV_NO_EXTRA)
ZEDRV_TABLE(zes, FabricPort, fabric_port, ZEDRV_NO_FIELDS, ZEDRV_NO_EXTRA)
ZEDRV_TABLE(zes, Temperature, temperature, ZEDRV_NO_FIELDS, ZEDRV_NO_EXTRA)
ZEDRV_TABLE(zes, Psu, psu, ZEDRV_NO_FIELDS, ZEDRV_NO_EXTRA)
ZEDRV_TABLE(zes, Fan, fan, ZEDRV_NO_FIELDS, ZEDRV_NO_EXTRA)
ZEDRV_TABLE(zes, Led, led, ZEDRV_NO_FIELDS, ZEDRV_NO_EXTRA)
ZEDRV_TABLE(zes, Ras, ras, ZEDRV_NO_FIELDS, ZEDRV_NO_EXTRA)
ZEDRV_TABLE(zes, Diagnostics, diagnostics, ZEDRV_NO_FIELDS, ZEDRV_NO_EXTRA)

/*
 * Entry points that no 1.8.12 table slot carries, exported by name so that
 * a caller (ipcbyval's lazy lookup, a test) can dlsym them from this
 * library. The loader 1.8.12 neither exports nor forwards them.
 */
ZEDRV_EXPORT ze_result_t ZE_APICALL zeMemPutIpcHandle(ze_context_handle_t context,
                                                      ze_ipc_mem_handle_t handle);
ZEDRV_EXPORT ze_result_t ZE_APICALL zeEventPoolPutIpcHandle(ze_context_handle_t context,
                                                            ze_ipc_event_pool_handle_t handle);
ZEDRV_EXPORT ze_result_t ZE_APICALL zeMemGetIpcHandleWithProperties(ze_context_handle_t context,
                                                                    const void *ptr, void *pNext,
                                                                    ze_ipc_mem_handle_t *handle);
ZEDRV_EXPORT ze_result_t ZE_APICALL zeMemGetFileDescriptorFromIpcHandleExp(
    ze_context_handle_t context, ze_ipc_mem_handle_t handle, uint64_t *fd);
ZEDRV_EXPORT ze_result_t ZE_APICALL zeMemGetIpcHandleFromFileDescriptorExp(
    ze_context_handle_t context, uint64_t fd, ze_ipc_mem_handle_t *handle);
ZEDRV_EXPORT ze_result_t ZE_APICALL zexMemGetIpcHandles(ze_context_handle_t context,
                                                        const void *ptr, uint32_t *count,
                                                        ze_ipc_mem_handle_t *handles);
ZEDRV_EXPORT ze_result_t ZE_APICALL zexMemOpenIpcHandles(ze_context_handle_t context,
                                                         ze_device_handle_t device,
                                                         uint32_t count,
                                                         ze_ipc_mem_handle_t *handles,
                                                         ze_ipc_memory_flags_t flags,
                                                         void **ptr);

ze_result_t ZE_APICALL zeMemPutIpcHandle(ze_context_handle_t context, ze_ipc_mem_handle_t handle)
{
    return zedrv_mem_put_ipc_handle(context, handle);
}

ze_result_t ZE_APICALL zeEventPoolPutIpcHandle(ze_context_handle_t context,
                                               ze_ipc_event_pool_handle_t handle)
{
    return zedrv_event_pool_put_ipc_handle(context, handle);
}

ze_result_t ZE_APICALL zeMemGetIpcHandleWithProperties(ze_context_handle_t context,
                                                       const void *ptr, void *pNext,
                                                       ze_ipc_mem_handle_t *handle)
{
    return zedrv_mem_get_ipc_handle_with_properties(context, ptr, pNext, handle);
}

ze_result_t ZE_APICALL zeMemGetFileDescriptorFromIpcHandleExp(ze_context_handle_t context,
                                                              ze_ipc_mem_handle_t handle,
                                                              uint64_t *fd)
{
    return zedrv_mem_get_fd_from_ipc_handle(context, handle, fd);
}

ze_result_t ZE_APICALL zeMemGetIpcHandleFromFileDescriptorExp(ze_context_handle_t context,
                                                              uint64_t fd,
                                                              ze_ipc_mem_handle_t *handle)
{
    return zedrv_mem_get_ipc_handle_from_fd(context, fd, handle);
}

ze_result_t ZE_APICALL zexMemGetIpcHandles(ze_context_handle_t context, const void *ptr,
                                           uint32_t *count, ze_ipc_mem_handle_t *handles)
{
    return zedrv_zex_get_ipc_handles(context, ptr, count, handles);
}

ze_result_t ZE_APICALL zexMemOpenIpcHandles(ze_context_handle_t context,
                                            ze_device_handle_t device, uint32_t count,
                                            ze_ipc_mem_handle_t *handles,
                                            ze_ipc_memory_flags_t flags, void **ptr)
{
    return zedrv_zex_open_ipc_handles(context, device, count, handles, flags, ptr);
}
