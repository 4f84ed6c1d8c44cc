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
 *
 * Measured on an H100 with driver 580.159.04: a second open of a handle
 * while it is open returns the same pointer; cuIpcCloseMemHandle of a
 * pointer that is no open mapping (a cuMemAlloc pointer, an interior
 * pointer of a mapping, a mapping already closed) is CUDA_ERROR_INVALID_VALUE
 * and changes nothing; the importer's mapping keeps the exporter's memory
 * allocated after the exporter's cuMemFree (its cuMemGetInfo recovered the
 * 1 GiB only at the importer's close). The handle bytes follow that
 * driver's layout where it matters: the exporter's pid at bytes 8-11
 * (little endian), the allocation size at 16-23, a per-process value at
 * 0-7, a per-allocation counter at 40-47; the same allocation gives the
 * same 64 bytes every time.
 */
#include "cudadrv.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <stddef.h>
#include <sys/random.h>

/* Constant bytes 32-39 (driver 580 has constant bytes there too). */
#define IPC_MAGIC 0x0000ff0031647063ull

struct legacy_wire {
    uint64_t process;  /* @0 per-process value (the real driver's: a host pointer) */
    uint32_t pid;      /* @8 the exporter's pid, little endian, as driver 580 */
    int32_t fd;        /* @12 the exporter's memfd */
    uint64_t size;     /* @16 allocation size, as driver 580 */
    uint64_t map_len;  /* @24 */
    uint64_t magic;    /* @32 */
    uint64_t serial;   /* @40 exporter's BUFFER_ID of the allocation */
    uint64_t ino;      /* @48 the memfd's inode */
    uint32_t device;   /* @56 */
    uint32_t zero;
};

_Static_assert(sizeof(struct legacy_wire) == CU_IPC_HANDLE_SIZE, "legacy handle is 64 bytes");
_Static_assert(offsetof(struct legacy_wire, pid) == 8, "pid at bytes 8-11, as driver 580");

static uint64_t process_value;
static uint64_t dead_ctx_closes; /* cudadrvIpcStats */
static pthread_once_t process_once = PTHREAD_ONCE_INIT;

static void process_value_init(void)
{
    if (getrandom(&process_value, sizeof(process_value), 0) != (ssize_t)sizeof(process_value))
        process_value = (uint64_t)getpid() * 0x9e3779b97f4a7c15ull;
    process_value &= 0x00007ffffffffff0ull; /* looks like a heap pointer */
}

CUresult CUDAAPI cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
    CUresult rc = cudadrv_check_init();
    struct legacy_wire w;
    struct cudadrv_region *r;
    struct stat st;

    if (rc != CUDA_SUCCESS)
        return rc;
    rc = cudadrv_need_ctx();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!pHandle)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_once(&process_once, process_value_init);
    memset(&w, 0, sizeof(w));
    pthread_mutex_lock(&cudadrv_lock);
    /* VMM mappings and imported IPC memory are not legacy-IPC capable. */
    r = cudadrv_region_find((uintptr_t)dptr, CUDADRV_LEGACY);
    if (!r || fstat(r->fd, &st) < 0) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        w.process = process_value;
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
 * handle names. Returns an fd or -1 (cause traced); tag gets the ledger
 * tag from the memfd's name. */
static int open_exporter_fd(const struct legacy_wire *w, char *tag, size_t tag_len)
{
    char path[64], link[160], want[96];
    const char *t;
    size_t n_tag;
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
    snprintf(want, sizeof(want), "/memfd:" CUDADRV_LEGACY_NAME "%llu:",
             (unsigned long long)w->serial);
    if (fstat(fd, &st) < 0 || (uint64_t)st.st_ino != w->ino ||
        (uint64_t)st.st_size < w->map_len || strncmp(link, want, strlen(want)) != 0) {
        cudadrv_trace("ipc open: pid %u fd %d is '%s', not allocation %llu",
                      w->pid, w->fd, link, (unsigned long long)w->serial);
        close(fd);
        return -1;
    }
    t = link + strlen(want);
    n_tag = strcspn(t, " ");
    snprintf(tag, tag_len, "%.*s", (int)(n_tag < tag_len ? n_tag : tag_len - 1), t);
    return fd;
}

static CUresult ipc_open(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int flags)
{
    CUresult rc = cudadrv_need_ctx();
    CUcontext ctx = cudadrv_ctx_current();
    struct cudadrv_region *r = NULL;
    char tag[DEVMEM_TAG_LEN] = "";
    struct legacy_wire w;
    void *p;
    int fd;

    if (rc != CUDA_SUCCESS)
        return rc;
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
        unsigned refs = ++r->refs; /* r may go once unlocked */

        *pdptr = (CUdeviceptr)r->base;
        pthread_mutex_unlock(&cudadrv_lock);
        cudadrv_trace("cuIpcOpenMemHandle: pid %u alloc %llu again at 0x%llx (refs %u)",
                      w.pid, (unsigned long long)w.serial,
                      (unsigned long long)*pdptr, refs);
        return CUDA_SUCCESS;
    }
    fd = open_exporter_fd(&w, tag, sizeof(tag));
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
    /* The mapping holds the exporter's memory, whatever the exporter does. */
    devmem_acquire(tag, (int)w.device, w.map_len, &r->mem);
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
    rc = cudadrv_need_ctx();
    if (rc == CUDA_ERROR_CONTEXT_IS_DESTROYED) /* counted for the tests */
        __atomic_add_fetch(&dead_ctx_closes, 1, __ATOMIC_RELAXED);
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&cudadrv_lock);
    r = cudadrv_region_find((uintptr_t)dptr, CUDADRV_IPC);
    if (!r || r->base != (uintptr_t)dptr) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else if ((left = --r->refs) == 0) {
        munmap((void *)r->base, r->map_len);
        devmem_release(&r->mem, 0);
        cudadrv_region_del(r);
    }
    pthread_mutex_unlock(&cudadrv_lock);
    cudadrv_trace("cuIpcCloseMemHandle(0x%llx) = %d, refs left %u",
                  (unsigned long long)dptr, (int)rc, left);
    return rc;
}

/*
 * Test-only: IPC imports this process holds now (legacy mappings and
 * imported VMM allocations), and cuIpcCloseMemHandle calls made with a
 * destroyed context current, since the process started.
 */
CUresult cudadrvIpcStats(uint64_t *live_p, uint64_t *dead_ctx_closes_p)
{
    uint64_t n = 0;

    pthread_mutex_lock(&cudadrv_lock);
    for (size_t i = 0; i < cudadrv_region_count(); i++)
        n += cudadrv_region_get(i)->kind == CUDADRV_IPC;
    n += cudadrv_alloc_imports();
    pthread_mutex_unlock(&cudadrv_lock);
    if (live_p)
        *live_p = n;
    if (dead_ctx_closes_p)
        *dead_ctx_closes_p = __atomic_load_n(&dead_ctx_closes, __ATOMIC_RELAXED);
    return CUDA_SUCCESS;
}
