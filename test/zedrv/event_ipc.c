/* SPDX-License-Identifier: MIT */
/*
 * zedrv: event-pool IPC handles, as compute-runtime writes them
 * (level_zero/core/source/event/event.h).
 *
 * classic IpcEventPoolData (natural alignment, 40 bytes, written whole by
 * `poolData = {}`; the layout up to commit 2538e5bd07, Nov 2025):
 *   @0 uint64 handle (fd)  @8 size_t numEvents  @16 uint32 rootDeviceIndex
 *   @20 uint32 maxEventPackets  @24 uint32 numDevices
 *   @28..32 bools isDeviceEventPoolAllocation, isHostVisibleEventPoolAllocation,
 *   isImplicitScalingCapable, isEventPoolKernelMappedTsFlagSet, isEventPoolTsFlagSet
 * opaque IpcOpaqueEventPoolData (packed, 62 bytes):
 *   @0 uint64 handle  @8 uint64 opaqueHandle  @16 uint32 numEvents
 *   @20 uint32 processId  @24 uint16 rootDeviceIndex  @26 uint8 maxEventPackets
 *   @27 uint8 numDevices  @28 the five flags as bits 0-4  @29 uint8 IpcHandleType
 *   @30 reservedHandleData[32]
 * A handle whose fd is not a live pool memfd fails with
 * ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY (createGraphicsAllocationFromSharedHandle
 * returned nothing), a failed pidfd_getfd with ZE_RESULT_ERROR_INVALID_ARGUMENT.
 */
#include "test/zedrv/zedrv.h"

#include <limits.h>
#include <string.h>
#include <sys/mman.h>

#define CLASSIC_SIZE 40
#define OPAQUE_SIZE 62
/* ZE_EVENT_POOL_FLAG_KERNEL_MAPPED_TIMESTAMP, spec 1.6: not in 1.8.12's headers. */
#define POOL_FLAG_KERNEL_MAPPED_TIMESTAMP (1u << 3)

struct pool_fields {
    uint64_t fd;
    uint32_t count;
    uint32_t max_packets;
    bool host_visible;
    bool kernel_ts;
    bool kernel_mapped_ts;
    bool opaque; /* opaque layout and handle == opaqueHandle */
    pid_t pid;
};

static void pool_write(ze_ipc_event_pool_handle_t *h, ze_event_pool_handle_t pool)
{
    uint8_t *d = (uint8_t *)h->data;
    bool host = pool->flags & ZE_EVENT_POOL_FLAG_HOST_VISIBLE;
    bool mapped_ts = pool->flags & POOL_FLAG_KERNEL_MAPPED_TIMESTAMP;
    bool ts = pool->flags & ZE_EVENT_POOL_FLAG_KERNEL_TIMESTAMP;
    uint64_t fd = (uint64_t)pool->export_fd;

    if (zedrv_config()->layout == ZEDRV_LAYOUT_CLASSIC) {
        uint64_t count = pool->count;
        uint32_t root = 0, packets = ZEDRV_EVENT_MAX_PACKETS, devices = 1;

        memset(d, 0, CLASSIC_SIZE);
        memcpy(d + 0, &fd, sizeof(fd));
        memcpy(d + 8, &count, sizeof(count));
        memcpy(d + 16, &root, sizeof(root));
        memcpy(d + 20, &packets, sizeof(packets));
        memcpy(d + 24, &devices, sizeof(devices));
        d[28] = !host; /* isDeviceEventPoolAllocation */
        d[29] = host;
        d[30] = 0; /* isImplicitScalingCapable */
        d[31] = mapped_ts;
        d[32] = ts;
    } else {
        uint32_t count = pool->count, pid = (uint32_t)getpid();
        uint16_t root = 0;

        memset(d, 0, OPAQUE_SIZE);
        memcpy(d + 0, &fd, sizeof(fd));
        memcpy(d + 8, &fd, sizeof(fd));
        memcpy(d + 16, &count, sizeof(count));
        memcpy(d + 20, &pid, sizeof(pid));
        memcpy(d + 24, &root, sizeof(root));
        d[26] = ZEDRV_EVENT_MAX_PACKETS;
        d[27] = 1;
        d[28] = (uint8_t)((!host) | host << 1 | mapped_ts << 3 | ts << 4);
        d[29] = ZEDRV_IPC_HANDLE_FD;
    }
}

static void pool_read(const ze_ipc_event_pool_handle_t *h, struct pool_fields *f)
{
    const uint8_t *d = (const uint8_t *)h->data;

    memcpy(&f->fd, d + 0, sizeof(f->fd));
    if (zedrv_config()->layout == ZEDRV_LAYOUT_CLASSIC) {
        uint64_t count;

        memcpy(&count, d + 8, sizeof(count));
        memcpy(&f->max_packets, d + 20, sizeof(f->max_packets));
        f->count = count > UINT32_MAX ? 0 : (uint32_t)count;
        f->host_visible = d[29];
        f->kernel_mapped_ts = d[31];
        f->kernel_ts = d[32];
        f->opaque = false;
        f->pid = 0;
    } else {
        uint64_t copy;
        uint32_t pid;

        memcpy(&copy, d + 8, sizeof(copy));
        memcpy(&f->count, d + 16, sizeof(f->count));
        memcpy(&pid, d + 20, sizeof(pid));
        f->max_packets = d[26];
        f->host_visible = d[28] & 2;
        f->kernel_mapped_ts = d[28] & 8;
        f->kernel_ts = d[28] & 16;
        f->pid = (pid_t)pid;
        f->opaque = f->fd == copy;
    }
}

ze_result_t zedrv_event_pool_get_ipc_handle(ze_event_pool_handle_t pool,
                                            ze_ipc_event_pool_handle_t *handle)
{
    if (pool == NULL || pool->magic != ZEDRV_MAGIC_POOL)
        return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    if (handle == NULL)
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    /* EventPool::getIpcHandle: only pools created with the IPC flag. */
    if (pool->imported || !(pool->flags & ZE_EVENT_POOL_FLAG_IPC))
        return ZE_RESULT_ERROR_UNSUPPORTED_FEATURE;
    pthread_mutex_lock(&zedrv_lock);
    /* peekInternalHandle: one fd for the pool's lifetime. */
    if (pool->export_fd < 0)
        pool->export_fd = zedrv_fd_export(pool->memfd);
    pthread_mutex_unlock(&zedrv_lock);
    if (pool->export_fd < 0)
        return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
    pool_write(handle, pool);
    ZEDRV_LOG("zeEventPoolGetIpcHandle(%p) = fd %d", (void *)pool, pool->export_fd);
    return ZE_RESULT_SUCCESS;
}

ze_result_t zedrv_event_pool_open_ipc_handle(ze_context_handle_t context,
                                             ze_ipc_event_pool_handle_t handle,
                                             ze_event_pool_handle_t *out)
{
    ze_event_pool_flags_t flags = ZE_EVENT_POOL_FLAG_IPC;
    ze_event_pool_handle_t pool = NULL;
    struct pool_fields f;
    size_t map_size = 0;
    void *base = NULL;
    int fd, got = -1;

    if (!zedrv_context_ok(context))
        return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    if (out == NULL)
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    pool_read(&handle, &f);
    if (f.max_packets != ZEDRV_EVENT_MAX_PACKETS || f.count == 0)
        return ZE_RESULT_ERROR_INVALID_ARGUMENT;
    if (f.fd > INT_MAX)
        return ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY;
    fd = (int)f.fd;
    if (f.opaque) {
        got = zedrv_fd_from_pid(f.pid, fd);
        if (got == -1)
            return ZE_RESULT_ERROR_INVALID_ARGUMENT;
        if (got >= 0)
            fd = got;
    }
    flags |= f.host_visible ? ZE_EVENT_POOL_FLAG_HOST_VISIBLE : 0;
    flags |= f.kernel_ts ? ZE_EVENT_POOL_FLAG_KERNEL_TIMESTAMP : 0;
    flags |= f.kernel_mapped_ts ? POOL_FLAG_KERNEL_MAPPED_TIMESTAMP : 0;
    pthread_mutex_lock(&zedrv_lock);
    if (zedrv_fd_importable(fd, ZEDRV_MEMFD_EVENT_POOL))
        base = zedrv_shm_map(fd, &map_size);
    else
        ZEDRV_LOG("event pool open: fd %d is not a zedrv event pool here", fd);
    if (base != NULL && map_size < (size_t)f.count * ZEDRV_EVENT_STRIDE) {
        munmap(base, map_size);
        base = NULL;
    }
    if (base != NULL)
        pool = zedrv_pool_add(context, flags, f.count, base, map_size, -1, true);
    pthread_mutex_unlock(&zedrv_lock);
    if (got >= 0)
        close(got);
    if (base == NULL)
        return ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY;
    if (pool == NULL) {
        munmap(base, map_size);
        return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
    }
    ZEDRV_LOG("zeEventPoolOpenIpcHandle(fd %d%s) = %p", (int)f.fd,
              got >= 0 ? " via pidfd" : "", (void *)pool);
    *out = pool;
    return ZE_RESULT_SUCCESS;
}

ze_result_t zedrv_event_pool_close_ipc_handle(ze_event_pool_handle_t pool)
{
    if (pool == NULL || pool->magic != ZEDRV_MAGIC_POOL)
        return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    /* EventPool::closeIpcHandle is destroy(). */
    zedrv_pool_release(pool);
    return ZE_RESULT_SUCCESS;
}

ze_result_t zedrv_event_pool_put_ipc_handle(ze_context_handle_t context,
                                            ze_ipc_event_pool_handle_t handle)
{
    if (!zedrv_context_ok(context))
        return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    /*
     * The pool's fd lives as long as the pool (peekInternalHandle), so a put
     * has nothing to release. The classic driver answered
     * ZE_RESULT_ERROR_UNSUPPORTED_FEATURE here; 26.x counts references.
     * Success is what callers of either can live with.
     */
    ZEDRV_LOG("zeEventPoolPutIpcHandle: nothing to release");
    return ZE_RESULT_SUCCESS;
}
