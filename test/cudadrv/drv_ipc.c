/* SPDX-License-Identifier: MIT */
/*
 * cudadrv: legacy CUDA IPC (cuIpcGetMemHandle / cuIpcOpenMemHandle /
 * cuIpcCloseMemHandle) for cuMemAlloc memory.
 *
 * Like the real driver's, the 64-byte handle is copy-by-value: it names
 * the exporter's memfd as /proc/<pid>/fd/<n> and carries the memfd's inode
 * and the allocation's buffer id (also in the memfd's name), so a handle
 * whose allocation was freed, or whose fd number was reused, is refused.
 * Facts reproduced: the same allocation gives the same bytes however often
 * and through whichever interior pointer it is asked; VMM memory is
 * refused with CUDA_ERROR_INVALID_VALUE; a second open of a handle while
 * it is open returns the same pointer and counts a reference; open returns
 * the allocation's base; open in the exporting process, and get, open or
 * close without a current context, fail with CUDA_ERROR_INVALID_CONTEXT
 * (UCX reports this of the real driver for open and close); a handle whose allocation is gone is
 * CUDA_ERROR_INVALID_VALUE ("invalid argument", as NCCL users report).
 */
#include "cudadrv.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define IPC_MAGIC 0x31647063u /* "cpd1" */

struct legacy_wire {
    uint32_t magic;
    uint32_t pid;
    int32_t fd;
    uint32_t device;
    uint64_t ino;
    uint64_t serial;   /* exporter's BUFFER_ID of the allocation */
    uint64_t size;
    uint64_t map_len;
    uint8_t zero[16];
};

_Static_assert(sizeof(struct legacy_wire) == CU_IPC_HANDLE_SIZE, "legacy handle is 64 bytes");

CUresult CUDAAPI cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
    CUresult rc = cudadrv_check_init();
    struct legacy_wire w;
    struct cudadrv_region *r;
    struct stat st;

    if (rc != CUDA_SUCCESS)
        return rc;
    if (!cudadrv_ctx_current())
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!pHandle)
        return CUDA_ERROR_INVALID_VALUE;
    memset(&w, 0, sizeof(w));
    pthread_mutex_lock(&cudadrv_lock);
    /* VMM mappings and imported IPC memory are not legacy-IPC capable. */
    r = cudadrv_region_find((uintptr_t)dptr, CUDADRV_LEGACY);
    if (!r || fstat(r->fd, &st) < 0) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        w.magic = IPC_MAGIC;
        w.pid = (uint32_t)getpid();
        w.fd = r->fd;
        w.device = (uint32_t)r->device;
        w.ino = (uint64_t)st.st_ino;
        w.serial = r->buffer_id;
        w.size = r->size;
        w.map_len = r->map_len;
    }
    pthread_mutex_unlock(&cudadrv_lock);
    cudadrv_trace("cuIpcGetMemHandle(0x%llx) = %s", (unsigned long long)dptr,
                  rc == CUDA_SUCCESS ? "ok" : "CUDA_ERROR_INVALID_VALUE");
    if (rc == CUDA_SUCCESS)
        memcpy(pHandle->reserved, &w, sizeof(w));
    return rc;
}

/* Opens the exporter's memfd and checks it is still the allocation the
 * handle names. Returns an fd or -1 (cause traced). */
static int open_exporter_fd(const struct legacy_wire *w)
{
    char path[64], link[128], want[96];
    struct stat st;
    ssize_t n;
    int fd;

    snprintf(path, sizeof(path), "/proc/%u/fd/%d", w->pid, w->fd);
    fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        cudadrv_trace("ipc open: open(%s) failed: %s", path, strerror(errno));
        return -1;
    }
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    n = readlink(path, link, sizeof(link) - 1);
    link[n < 0 ? 0 : n] = '\0';
    snprintf(want, sizeof(want), "/memfd:" CUDADRV_LEGACY_NAME "%llu ",
             (unsigned long long)w->serial);
    if (fstat(fd, &st) < 0 || (uint64_t)st.st_ino != w->ino ||
        (uint64_t)st.st_size < w->map_len || strncmp(link, want, strlen(want)) != 0) {
        cudadrv_trace("ipc open: pid %u fd %d is '%s', not allocation %llu",
                      w->pid, w->fd, link, (unsigned long long)w->serial);
        close(fd);
        return -1;
    }
    return fd;
}

static CUresult ipc_open(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int flags)
{
    CUresult rc = cudadrv_check_init();
    CUcontext ctx = cudadrv_ctx_current();
    struct cudadrv_region *r = NULL;
    struct legacy_wire w;
    void *p;
    int fd;

    if (rc != CUDA_SUCCESS)
        return rc;
    if (!ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!pdptr || (flags & ~(unsigned)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS))
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(&w, handle.reserved, sizeof(w));
    if (w.magic != IPC_MAGIC || w.size == 0 || w.size > w.map_len ||
        (int)w.device >= cudadrv_device_count())
        return CUDA_ERROR_INVALID_VALUE;
    /* The real driver refuses to open a handle in its exporting process. */
    if (w.pid == (uint32_t)getpid())
        return CUDA_ERROR_INVALID_CONTEXT;

    pthread_mutex_lock(&cudadrv_lock);
    for (size_t i = 0; i < cudadrv_region_count(); i++) {
        struct cudadrv_region *o = cudadrv_region_get(i);

        if (o->kind == CUDADRV_IPC && o->peer_pid == (pid_t)w.pid &&
            o->peer_ino == w.ino && o->peer_serial == w.serial && o->ctx == ctx) {
            r = o;
            break;
        }
    }
    if (r) {
        r->refs++;
        *pdptr = (CUdeviceptr)r->base;
        pthread_mutex_unlock(&cudadrv_lock);
        cudadrv_trace("cuIpcOpenMemHandle: pid %u alloc %llu again at 0x%llx (refs %u)",
                      w.pid, (unsigned long long)w.serial,
                      (unsigned long long)*pdptr, r->refs);
        return CUDA_SUCCESS;
    }
    fd = open_exporter_fd(&w);
    if (fd < 0) {
        pthread_mutex_unlock(&cudadrv_lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    p = mmap(NULL, w.map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    r = p == MAP_FAILED ? NULL : cudadrv_region_new(CUDADRV_IPC);
    if (!r) {
        if (p != MAP_FAILED)
            munmap(p, w.map_len);
        pthread_mutex_unlock(&cudadrv_lock);
        return CUDA_ERROR_MAP_FAILED;
    }
    r->base = (uintptr_t)p;
    r->size = w.size;
    r->map_len = w.map_len;
    r->ctx = ctx;
    /* DEVICE_ORDINAL: where the memory lives, not the importing device. */
    r->device = (int)w.device;
    r->buffer_id = cudadrv_next_buffer_id();
    r->block_id = cudadrv_next_block_id();
    r->refs = 1;
    r->peer_pid = (pid_t)w.pid;
    r->peer_ino = w.ino;
    r->peer_serial = w.serial;
    *pdptr = (CUdeviceptr)r->base;
    pthread_mutex_unlock(&cudadrv_lock);
    cudadrv_trace("cuIpcOpenMemHandle: pid %u alloc %llu mapped at 0x%llx",
                  w.pid, (unsigned long long)w.serial, (unsigned long long)*pdptr);
    return CUDA_SUCCESS;
}

/* _v2 (CUDA 11.0 on) and the original entry point behave the same here. */
CUresult CUDAAPI cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle,
                                       unsigned int flags)
{
    return ipc_open(pdptr, handle, flags);
}

CUresult CUDAAPI cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle,
                                    unsigned int flags)
{
    return ipc_open(pdptr, handle, flags);
}

CUresult CUDAAPI cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    CUresult rc = cudadrv_check_init();
    struct cudadrv_region *r;
    unsigned left = 0;

    if (rc != CUDA_SUCCESS)
        return rc;
    /* UCX saw "invalid device context" closing without a current context. */
    if (!cudadrv_ctx_current())
        return CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_lock(&cudadrv_lock);
    r = cudadrv_region_find((uintptr_t)dptr, CUDADRV_IPC);
    if (!r || r->base != (uintptr_t)dptr) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else if ((left = --r->refs) == 0) {
        munmap((void *)r->base, r->map_len);
        cudadrv_region_del(r);
    }
    pthread_mutex_unlock(&cudadrv_lock);
    cudadrv_trace("cuIpcCloseMemHandle(0x%llx) = %d, refs left %u",
                  (unsigned long long)dptr, (int)rc, left);
    return rc;
}
