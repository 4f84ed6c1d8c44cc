/* SPDX-License-Identifier: MIT */
/*
 * zedrv: memory IPC handles, byte-for-byte as Intel's compute-runtime
 * writes them (level_zero/core/source/context/context.h):
 *
 * classic IpcMemoryData, packed, 17 bytes; bytes 17-63 are not written:
 *   @0  uint64 handle (the dma-buf fd)   @8 uint64 poolOffset   @16 uint8 type
 * opaque IpcOpaqueMemoryData, packed, 63 bytes (byte 63 not written):
 *   @0 fd (int in a uint64 union)  @8 uint64 poolOffset  @16 uint32 processId
 *   @20 uint8 IpcHandleType  @21 uint8 memoryType  @22 fd copy (int in uint64)
 *   @30 reservedHandleData[32]  @62 bool compressedMemory
 *
 * An importer whose fd number does not name a live zedrv memfd fails with
 * ZE_RESULT_ERROR_INVALID_ARGUMENT, as Context::openIpcMemHandle does when
 * importFdHandle returns nothing.
 */
#include "test/zedrv/zedrv.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif

#define OFF_HANDLE 0
#define OFF_POOL_OFFSET 8
#define OFF_CLASSIC_TYPE 16
#define CLASSIC_SIZE 17
#define OFF_PID 16
#define OFF_HANDLE_TYPE 20
#define OFF_MEMORY_TYPE 21
#define OFF_OPAQUE_HANDLE 22
#define OFF_RESERVED 30
#define OFF_COMPRESSED 62
#define OPAQUE_SIZE 63

int zedrv_fd_export(int memfd)
{
    struct rlimit rl;
    int base = 0;
    int fd;

    if (zedrv_config()->fd_spread && getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        /* 50 windows of 16 fds from 100 up: neighbouring pids differ. */
        base = 100 + (int)(getpid() % 50) * 16;
        if (rl.rlim_cur != RLIM_INFINITY && (rlim_t)base + 64 > rl.rlim_cur)
            base = 0;
    }
    fd = fcntl(memfd, F_DUPFD_CLOEXEC, base);
    if (fd < 0)
        fd = fcntl(memfd, F_DUPFD_CLOEXEC, 0);
    return fd;
}

bool zedrv_fd_importable(int fd, const char *name)
{
    char path[64], target[128], want[96];
    ssize_t n;

    if (fd < 0 || fcntl(fd, F_GETFD) < 0)
        return false;
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    n = readlink(path, target, sizeof(target) - 1);
    if (n < 0)
        return false;
    target[n] = '\0';
    /* "/memfd:NAME (deleted)", or "/memfd:NAME:TAG (deleted)" (a ledger tag) */
    snprintf(want, sizeof(want), "/memfd:%s", name);
    if (strncmp(target, want, strlen(want)) != 0 ||
        (target[strlen(want)] != ' ' && target[strlen(want)] != ':'))
        return false;
    /* Our own backing memfds are not dma-bufs: the real driver keeps GEM
     * handles there, so their fd numbers mean nothing to an import. */
    return !zedrv_fd_is_internal(fd) && !zedrv_pool_fd_is_internal(fd);
}

int zedrv_fd_from_pid(pid_t pid, int fd)
{
    int pidfd, newfd;

    pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (pidfd < 0) {
        ZEDRV_LOG("pidfd_open(%d) failed: %m", (int)pid);
        return -2; /* the caller falls back to the legacy path */
    }
    newfd = (int)syscall(SYS_pidfd_getfd, pidfd, fd, 0);
    if (newfd < 0)
        ZEDRV_LOG("pidfd_getfd(pid %d, fd %d) failed: %m", (int)pid, fd);
    close(pidfd);
    return newfd < 0 ? -1 : newfd;
}

void zedrv_handle_write(ze_ipc_mem_handle_t *h, const struct zedrv_alloc *a,
                        uint64_t pool_offset)
{
    uint8_t ipc_type = a->type == ZE_MEMORY_TYPE_HOST ? ZEDRV_IPC_TYPE_HOST
                                                      : ZEDRV_IPC_TYPE_DEVICE;
    uint8_t *d = (uint8_t *)h->data;

    if (zedrv_config()->layout == ZEDRV_LAYOUT_CLASSIC) {
        uint64_t fd64 = (uint64_t)a->export_fd;

        memcpy(d + OFF_HANDLE, &fd64, sizeof(fd64));
        memcpy(d + OFF_POOL_OFFSET, &pool_offset, sizeof(pool_offset));
        d[OFF_CLASSIC_TYPE] = ipc_type;
    } else {
        uint32_t pid = (uint32_t)getpid();
        int fd = a->export_fd;

        memset(d, 0, OPAQUE_SIZE);
        memcpy(d + OFF_HANDLE, &fd, sizeof(fd));
        memcpy(d + OFF_POOL_OFFSET, &pool_offset, sizeof(pool_offset));
        memcpy(d + OFF_PID, &pid, sizeof(pid));
        d[OFF_HANDLE_TYPE] = ZEDRV_IPC_HANDLE_FD;
        d[OFF_MEMORY_TYPE] = ipc_type;
        memcpy(d + OFF_OPAQUE_HANDLE, &fd, sizeof(fd));
        d[OFF_COMPRESSED] = 0;
    }
}

ze_result_t zedrv_mem_get_ipc_handle(ze_context_handle_t context, const void *ptr,
                                     ze_ipc_mem_handle_t *handle)
{
    struct zedrv_alloc *a;
    uint64_t pool_offset;

    if (!zedrv_context_ok(context))
        return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    if (ptr == NULL || handle == NULL)
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    pthread_mutex_lock(&zedrv_lock);
    a = zedrv_alloc_find(ptr);
    /* A pointer in a USM pool that no allocation holds is refused too. */
    if (a == NULL || a->imported || (a->pool && zedrv_pool_chunk(a, ptr) == NULL)) {
        pthread_mutex_unlock(&zedrv_lock);
        return ZE_RESULT_ERROR_INVALID_ARGUMENT;
    }
    /* A pooled allocation's handle names the pool's buffer and where the
     * pointer lies in it (Context::setIPCHandleData); any other's, the
     * allocation, whatever the pointer inside it. */
    pool_offset = a->pool ? (uint64_t)((const char *)ptr - a->base) : 0;
    /* One fd per allocation (or pool) until put or free, however often asked. */
    if (a->export_fd < 0) {
        a->export_fd = zedrv_fd_export(a->memfd);
        if (a->export_fd < 0) {
            ZEDRV_LOG("dup of memfd %d failed: %m", a->memfd);
            pthread_mutex_unlock(&zedrv_lock);
            return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
        }
        a->export_offset = pool_offset;
    }
    a->export_refs++;
    zedrv_handle_write(handle, a, pool_offset);
    ZEDRV_LOG("zeMemGetIpcHandle(%p) = fd %d offset %llu (id %llu, refs %u)", ptr, a->export_fd,
              (unsigned long long)pool_offset, (unsigned long long)a->id, a->export_refs);
    pthread_mutex_unlock(&zedrv_lock);
    return ZE_RESULT_SUCCESS;
}


static uint64_t dead_ctx_closes; /* zedrvIpcStats */
/* Fields the open and put paths read, whichever the layout. */
struct handle_fields {
    uint64_t fd;
    uint64_t pool_offset;
    uint8_t type;
    bool opaque; /* opaque layout and fd @0 == fd @22 */
    pid_t pid;
};

static void handle_read(const ze_ipc_mem_handle_t *h, struct handle_fields *f)
{
    const uint8_t *d = (const uint8_t *)h->data;

    memcpy(&f->pool_offset, d + OFF_POOL_OFFSET, sizeof(f->pool_offset));
    f->opaque = false;
    f->pid = 0;
    if (zedrv_config()->layout == ZEDRV_LAYOUT_CLASSIC) {
        memcpy(&f->fd, d + OFF_HANDLE, sizeof(f->fd)); /* the whole uint64 */
        f->type = d[OFF_CLASSIC_TYPE];
    } else {
        int fd, copy;
        uint32_t pid;

        memcpy(&fd, d + OFF_HANDLE, sizeof(fd));
        memcpy(&copy, d + OFF_OPAQUE_HANDLE, sizeof(copy));
        memcpy(&pid, d + OFF_PID, sizeof(pid));
        f->fd = (uint64_t)(int64_t)fd;
        f->type = d[OFF_MEMORY_TYPE];
        f->pid = (pid_t)pid;
        /* getDataFromIpcHandle: a changed fd @0 means "handle modified by
         * the user", which takes the legacy path. */
        f->opaque = d[OFF_HANDLE_TYPE] == ZEDRV_IPC_HANDLE_FD && fd == copy;
        if (!f->opaque)
            ZEDRV_LOG("IPC handle %d does not match opaque handle %d: legacy path", fd,
                      copy);
    }
}

/* Import one handle: a new mapping of the memfd its fd names. */
static ze_result_t import_one(ze_context_handle_t context, ze_device_handle_t device,
                              const struct handle_fields *f, bool pidfd_import, void **ptr)
{
    ze_memory_type_t type;
    struct zedrv_alloc *a;
    size_t map_size = 0;
    int fd, got = -1;
    char *base;

    if (f->type == ZEDRV_IPC_TYPE_DEVICE)
        type = ZE_MEMORY_TYPE_DEVICE;
    else if (f->type == ZEDRV_IPC_TYPE_HOST)
        type = ZE_MEMORY_TYPE_HOST;
    else
        return ZE_RESULT_ERROR_INVALID_ARGUMENT;
    if (f->fd > INT_MAX)
        return ZE_RESULT_ERROR_INVALID_ARGUMENT;
    fd = (int)f->fd;
    if (pidfd_import) {
        got = zedrv_fd_from_pid(f->pid, fd);
        if (got == -1)
            return ZE_RESULT_ERROR_INVALID_ARGUMENT;
        if (got >= 0)
            fd = got; /* -2: pidfd_open failed, import the number as is */
    }
    pthread_mutex_lock(&zedrv_lock);
    if (!zedrv_fd_importable(fd, ZEDRV_MEMFD_ALLOC)) {
        ZEDRV_LOG("open: fd %d is not a zedrv buffer in this process", fd);
        base = NULL;
    } else {
        base = zedrv_shm_map(fd, &map_size);
    }
    if (base != NULL && f->pool_offset >= map_size) {
        munmap(base, map_size);
        base = NULL;
    }
    if (base == NULL) {
        pthread_mutex_unlock(&zedrv_lock);
        if (got >= 0)
            close(got);
        return ZE_RESULT_ERROR_INVALID_ARGUMENT;
    }
    a = zedrv_alloc_add_import(context, device, base, map_size, type, fd);
    pthread_mutex_unlock(&zedrv_lock);
    if (got >= 0)
        close(got); /* the mapping keeps the memory */
    if (a == NULL) {
        munmap(base, map_size);
        return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
    }
    *ptr = base + f->pool_offset;
    ZEDRV_LOG("open fd %d%s = %p (id %llu)", (int)f->fd, got >= 0 ? " via pidfd" : "", *ptr,
              (unsigned long long)a->id);
    return ZE_RESULT_SUCCESS;
}

ze_result_t zedrv_mem_open_ipc_handle(ze_context_handle_t context, ze_device_handle_t device,
                                      ze_ipc_mem_handle_t handle, ze_ipc_memory_flags_t flags,
                                      void **ptr)
{
    struct handle_fields f;

    if (!zedrv_context_ok(context) || !zedrv_device_ok(device))
        return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    if (ptr == NULL)
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    handle_read(&handle, &f);
    return import_one(context, device, &f, f.opaque, ptr);
}

/* Context::closeIpcMemHandle is Context::freeMem (see mem.c): a pointer
 * that no allocation or mapping contains is ZE_RESULT_ERROR_INVALID_ARGUMENT
 * and changes nothing; any other is released, whatever it is. */
ze_result_t zedrv_mem_close_ipc_handle(ze_context_handle_t context, const void *ptr)
{
    struct zedrv_alloc *a;

    if (!zedrv_context_ok(context)) {
        /* On a real driver a use after free: counted for the tests. */
        __atomic_add_fetch(&dead_ctx_closes, 1, __ATOMIC_RELAXED);
        return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    }
    if (ptr == NULL)
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    pthread_mutex_lock(&zedrv_lock);
    a = zedrv_alloc_find(ptr);
    /* A mapping of an earlier incarnation of this context's slot: the
     * caller holds a handle value that a new context reused. */
    if (a != NULL && a->imported && a->context == context && a->ctx_gen != context->gen)
        __atomic_add_fetch(&dead_ctx_closes, 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&zedrv_lock);
    return zedrv_free_any(ptr, "zeMemCloseIpcHandle");
}

/*
 * Test-only, exported by name: IPC mappings this process holds now, and
 * zeMemCloseIpcHandle calls made on a destroyed context (its handle
 * invalid, or reused by a newer context) since the process started.
 */
ZEDRV_EXPORT int zedrvIpcStats(uint64_t *live_p, uint64_t *dead_ctx_closes_p);

int zedrvIpcStats(uint64_t *live_p, uint64_t *dead_ctx_closes_p)
{
    if (live_p != NULL)
        *live_p = zedrv_alloc_count_imports();
    if (dead_ctx_closes_p != NULL)
        *dead_ctx_closes_p = __atomic_load_n(&dead_ctx_closes, __ATOMIC_RELAXED);
    return 0;
}

ze_result_t zedrv_mem_put_ipc_handle(ze_context_handle_t context, ze_ipc_mem_handle_t handle)
{
    struct handle_fields f;
    struct zedrv_alloc *a;

    if (!zedrv_context_ok(context))
        return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    handle_read(&handle, &f);
    pthread_mutex_lock(&zedrv_lock);
    a = f.fd <= INT_MAX ? zedrv_alloc_find_export((int)f.fd) : NULL;
    /* Context::putIpcMemHandle: one reference per get; the fd closes with
     * the last; an unknown handle is not an error. */
    if (a != NULL && a->export_refs > 0 && --a->export_refs == 0) {
        ZEDRV_LOG("zeMemPutIpcHandle: closing exported fd %d (id %llu)", a->export_fd,
                  (unsigned long long)a->id);
        close(a->export_fd);
        a->export_fd = -1;
    }
    pthread_mutex_unlock(&zedrv_lock);
    return ZE_RESULT_SUCCESS;
}

/*
 * zexMemGetIpcHandles / zexMemOpenIpcHandles (compute-runtime
 * include/level_zero/driver_experimental/zex_memory.h). One allocation is
 * one handle here (no multi-tile chunks). Like Context::openIpcMemHandles,
 * the open imports the fd numbers as they are, without the pidfd import.
 */
ze_result_t zedrv_zex_get_ipc_handles(ze_context_handle_t context, const void *ptr,
                                      uint32_t *count, ze_ipc_mem_handle_t *handles)
{
    if (count == NULL)
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    if (*count == 0 || *count > 1)
        *count = 1;
    if (handles == NULL)
        return zedrv_context_ok(context) ? ZE_RESULT_SUCCESS
                                         : ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    return zedrv_mem_get_ipc_handle(context, ptr, &handles[0]);
}

ze_result_t zedrv_zex_open_ipc_handles(ze_context_handle_t context, ze_device_handle_t device,
                                       uint32_t count, ze_ipc_mem_handle_t *handles,
                                       ze_ipc_memory_flags_t flags, void **ptr)
{
    struct handle_fields f;

    if (!zedrv_context_ok(context) || !zedrv_device_ok(device))
        return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    if (handles == NULL || ptr == NULL)
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    if (count != 1)
        return ZE_RESULT_ERROR_INVALID_ARGUMENT;
    handle_read(&handles[0], &f);
    /* openIpcMemHandles accepts device memory only. */
    if (f.type != ZEDRV_IPC_TYPE_DEVICE)
        return ZE_RESULT_ERROR_INVALID_ARGUMENT;
    return import_one(context, device, &f, false, ptr);
}
