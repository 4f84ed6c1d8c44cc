/* SPDX-License-Identifier: MIT */
/*
 * cudadrv: the address-range registry and legacy allocations (cuMemAlloc).
 * Device memory is host-mapped; the copy calls (drv_copy.c) check that the
 * device side is memory the current device may touch: a wrong
 * cuMemSetAccess in the shim shows up as CUDA_ERROR_INVALID_VALUE instead
 * of silently working.
 *
 * Device memory is accounted in the ledger (test/devmem): cuMemGetInfo
 * counts what every process of the ledger holds, including memory whose
 * allocating process freed it while an importer still maps it, and
 * cuMemAlloc fails with CUDA_ERROR_OUT_OF_MEMORY beyond CUDADRV_TOTAL_MEM.
 * Memory of a destroyed context becomes a DEAD range: inaccessible, kept
 * reserved, and CUDA_ERROR_ILLEGAL_ADDRESS for the copy calls.
 */
#include "cudadrv.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

static struct cudadrv_region **regions;
static size_t nregions, cap_regions;
static uint64_t last_buffer_id, last_block_id;
static uint64_t dead_seq;
static size_t ndead;

struct cudadrv_region *cudadrv_region_new(enum cudadrv_kind kind)
{
    struct cudadrv_region *r;

    if (nregions == cap_regions) {
        size_t cap = cap_regions ? cap_regions * 2 : 64;
        struct cudadrv_region **n = realloc(regions, cap * sizeof(*n));

        if (!n)
            return NULL;
        regions = n;
        cap_regions = cap;
    }
    r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    r->kind = kind;
    r->fd = -1;
    r->mem.slot = DEVMEM_NONE;
    regions[nregions++] = r;
    return r;
}

void cudadrv_region_del(struct cudadrv_region *r)
{
    if (r->kind == CUDADRV_DEAD)
        ndead--;
    for (size_t i = 0; i < nregions; i++) {
        if (regions[i] == r) {
            regions[i] = regions[--nregions];
            break;
        }
    }
    free(r);
}

struct cudadrv_region *cudadrv_region_find(uintptr_t addr, unsigned mask)
{
    for (size_t i = 0; i < nregions; i++) {
        struct cudadrv_region *r = regions[i];

        if ((r->kind & mask) && addr >= r->base && addr - r->base < r->size)
            return r;
    }
    return NULL;
}

size_t cudadrv_region_count(void)
{
    return nregions;
}

struct cudadrv_region *cudadrv_region_get(size_t i)
{
    return i < nregions ? regions[i] : NULL;
}

uint64_t cudadrv_next_buffer_id(void)
{
    return ++last_buffer_id;
}

uint64_t cudadrv_next_block_id(void)
{
    return ++last_block_id;
}

unsigned cudadrv_map_access(const struct cudadrv_region *r)
{
    unsigned acc = 0;

    for (int d = 0; d < cudadrv_device_count(); d++)
        acc |= r->access[d];
    return acc;
}

/* Access is checked for the current context's device: that is the device
 * whose copy engine would touch the memory on real hardware. */
static int range_ok(uintptr_t p, size_t n, int write, int dev)
{
    uintptr_t cur = p, end = p + n;

    if (end < p)
        return 0;
    while (cur < end) {
        struct cudadrv_region *r =
            cudadrv_region_find(cur, CUDADRV_LEGACY | CUDADRV_IPC | CUDADRV_MAP);

        if (!r)
            return 0;
        if (r->kind == CUDADRV_MAP) {
            unsigned acc = r->access[dev];

            if (!(acc & CU_MEM_ACCESS_FLAGS_PROT_READ) ||
                (write && acc != CU_MEM_ACCESS_FLAGS_PROT_READWRITE))
                return 0;
        }
        cur = r->base + r->size;
    }
    return 1;
}

int cudadrv_dev_range_ok(uintptr_t p, size_t n, int write)
{
    int dev;

    if (cudadrv_current_device(&dev) != CUDA_SUCCESS)
        return 0;
    return range_ok(p, n, write, dev);
}

void cudadrv_region_kill(struct cudadrv_region *r)
{
    struct cudadrv_region *oldest = NULL;

    /* Same address, no access, no memory: a stale pointer faults. */
    mmap((void *)r->base, r->map_len, PROT_NONE,
         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    if (r->fd >= 0)
        close(r->fd);
    r->fd = -1;
    r->kind = CUDADRV_DEAD;
    r->size = r->map_len;
    r->ctx = NULL;
    r->dead_seq = ++dead_seq;
    if (++ndead <= CUDADRV_DEAD_MAX)
        return;
    for (size_t i = 0; i < nregions; i++)
        if (regions[i]->kind == CUDADRV_DEAD &&
            (!oldest || regions[i]->dead_seq < oldest->dead_seq))
            oldest = regions[i];
    munmap((void *)oldest->base, oldest->map_len);
    cudadrv_region_del(oldest);
}

void cudadrv_ctx_release_state(CUcontext ctx)
{
    size_t i = 0;

    while (i < nregions) {
        struct cudadrv_region *r = regions[i];

        if (r->ctx != ctx || !(r->kind & (CUDADRV_LEGACY | CUDADRV_IPC))) {
            i++;
            continue;
        }
        cudadrv_trace("context %p destroyed: %s 0x%llx (%zu bytes) is gone", (void *)ctx,
                      r->kind == CUDADRV_LEGACY ? "allocation" : "IPC mapping",
                      (unsigned long long)r->base, r->size);
        /* The exporter's memory stays held while an importer maps it. */
        devmem_release(&r->mem, r->kind == CUDADRV_LEGACY);
        cudadrv_region_kill(r); /* may delete another DEAD region: rescan */
        i = 0;
    }
}

CUresult cudadrv_dead_check(uintptr_t p, size_t n)
{
    for (size_t i = 0; i < nregions; i++) {
        const struct cudadrv_region *r = regions[i];

        if (r->kind == CUDADRV_DEAD && p < r->base + r->map_len && r->base < p + n)
            return CUDA_ERROR_ILLEGAL_ADDRESS;
    }
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    CUresult rc = cudadrv_need_ctx();
    long page = sysconf(_SC_PAGESIZE);
    struct cudadrv_region *r;
    char name[128], tag[DEVMEM_TAG_LEN];
    struct devmem_ref mem;
    size_t len;
    void *p;
    int fd, dev;

    if (rc != CUDA_SUCCESS)
        return rc;
    if (!dptr || bytesize == 0)
        return CUDA_ERROR_INVALID_VALUE;
    len = (bytesize + (size_t)page - 1) & ~((size_t)page - 1);
    dev = cudadrv_ctx_device(cudadrv_ctx_current());
    if (dev < 0 || devmem_alloc(dev, len, &mem) != 0) {
        cudadrv_trace("cuMemAlloc(%zu) = CUDA_ERROR_OUT_OF_MEMORY (device %d full)", bytesize,
                      dev);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    devmem_tag(&mem, tag, sizeof(tag));
    pthread_mutex_lock(&cudadrv_lock);
    r = cudadrv_region_new(CUDADRV_LEGACY);
    if (!r) {
        pthread_mutex_unlock(&cudadrv_lock);
        devmem_release(&mem, 1);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    r->buffer_id = cudadrv_next_buffer_id();
    r->block_id = cudadrv_next_block_id();
    /* The name carries the buffer id so an importer can check that the
     * fd it reached through /proc is still this allocation, and the
     * ledger tag so that it holds the same memory. */
    snprintf(name, sizeof(name), CUDADRV_LEGACY_NAME "%llu:%s",
             (unsigned long long)r->buffer_id, tag);
    fd = memfd_create(name, MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)len) < 0 ||
        (p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
        if (fd >= 0)
            close(fd);
        cudadrv_region_del(r);
        pthread_mutex_unlock(&cudadrv_lock);
        devmem_release(&mem, 1);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    r->base = (uintptr_t)p;
    r->size = bytesize;
    r->map_len = len;
    r->fd = fd;
    r->ctx = cudadrv_ctx_current();
    r->device = dev;
    r->mem = mem;
    *dptr = (CUdeviceptr)r->base;
    pthread_mutex_unlock(&cudadrv_lock);
    cudadrv_trace("cuMemAlloc(%zu) = 0x%llx fd %d", bytesize, (unsigned long long)*dptr, fd);
    return CUDA_SUCCESS;
}

/* Device-wide, as the real driver: what every process of the ledger
 * holds on the current context's device. */
CUresult CUDAAPI cuMemGetInfo_v2(size_t *free_p, size_t *total_p)
{
    CUresult rc = cudadrv_need_ctx();
    struct devmem_stats st;
    int dev = 0;

    if (rc != CUDA_SUCCESS)
        return rc;
    if (!free_p || !total_p)
        return CUDA_ERROR_INVALID_VALUE;
    rc = cudadrv_current_device(&dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    devmem_stats(dev, &st);
    *total_p = (size_t)st.total;
    *free_p = (size_t)(st.used < st.total ? st.total - st.used : 0);
    cudadrv_trace("cuMemGetInfo: device %d free %zu total %zu (freed but imported %llu)", dev,
                  *free_p, *total_p, (unsigned long long)st.freed_held);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr)
{
    CUresult rc = cudadrv_check_init();
    struct cudadrv_region *r;

    if (rc != CUDA_SUCCESS)
        return rc;
    cudadrv_trace("cuMemFree(0x%llx)", (unsigned long long)dptr);
    pthread_mutex_lock(&cudadrv_lock);
    r = cudadrv_region_find((uintptr_t)dptr, CUDADRV_LEGACY);
    /* Only the base of a cuMemAlloc allocation may be freed. */
    if (!r || r->base != (uintptr_t)dptr) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        munmap((void *)r->base, r->map_len);
        close(r->fd);
        /* Importers that still map it keep it allocated. */
        devmem_release(&r->mem, 1);
        cudadrv_region_del(r);
    }
    pthread_mutex_unlock(&cudadrv_lock);
    return rc;
}

/* For VMM memory this is the cuMemMap mapping containing dptr, not the
 * reservation (the RANGE_* pointer attributes give that). Non-device
 * pointers: CUDA_ERROR_NOT_FOUND, which NCCL tests for. */
CUresult CUDAAPI cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    CUresult rc = cudadrv_need_ctx();
    struct cudadrv_region *r;

    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&cudadrv_lock);
    r = cudadrv_region_find((uintptr_t)dptr, CUDADRV_LEGACY | CUDADRV_IPC | CUDADRV_MAP);
    if (!r) {
        rc = CUDA_ERROR_NOT_FOUND;
    } else {
        if (pbase)
            *pbase = (CUdeviceptr)r->base;
        if (psize)
            *psize = r->size;
    }
    pthread_mutex_unlock(&cudadrv_lock);
    return rc;
}
