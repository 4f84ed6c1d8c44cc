/* SPDX-License-Identifier: MIT */
/*
 * cudadrv: VMM virtual address ranges: cuMemAddressReserve/Free,
 * cuMemMap/Unmap, cuMemSetAccess/GetAccess.
 *
 * A reservation is a PROT_NONE anonymous mapping; cuMemMap places the
 * allocation's memfd over part of it with MAP_FIXED, still PROT_NONE:
 * as on a GPU, memory is unusable until cuMemSetAccess grants a device
 * access (the CPU protection is the union over devices; the copy calls
 * check the current device). Unmap and set-access take whole mappings
 * only, possibly several adjacent ones.
 */
#include "cudadrv.h"

#include <sys/mman.h>
#include <unistd.h>

#define RESERVE_FLAGS (MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE)

static int aligned(uintptr_t v, size_t a)
{
    return (v & (a - 1)) == 0;
}

CUresult CUDAAPI cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
                                     CUdeviceptr addr, unsigned long long flags)
{
    CUresult rc = cudadrv_check_init();
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    struct cudadrv_region *r;
    uintptr_t base = 0;
    void *p;

    if (rc != CUDA_SUCCESS)
        return rc;
    if (!ptr || size == 0 || size % page || flags != 0 ||
        (alignment & (alignment - 1)) || !aligned((uintptr_t)addr, page))
        return CUDA_ERROR_INVALID_VALUE;
    if (alignment == 0)
        alignment = CUDADRV_GRANULARITY;
    if (alignment < page)
        alignment = page;
    /* addr is a hint: honoured when free and aligned, else ignored. */
    if (addr && aligned((uintptr_t)addr, alignment)) {
        p = mmap((void *)(uintptr_t)addr, size, PROT_NONE,
                 RESERVE_FLAGS | MAP_FIXED_NOREPLACE, -1, 0);
        if (p != MAP_FAILED && (uintptr_t)p == (uintptr_t)addr)
            base = (uintptr_t)p;
        else if (p != MAP_FAILED)
            munmap(p, size);
    }
    if (!base) {
        size_t over = size + alignment;
        uintptr_t start;

        p = mmap(NULL, over, PROT_NONE, RESERVE_FLAGS, -1, 0);
        if (p == MAP_FAILED)
            return CUDA_ERROR_OUT_OF_MEMORY;
        start = (uintptr_t)p;
        base = (start + alignment - 1) & ~(uintptr_t)(alignment - 1);
        if (base > start)
            munmap(p, base - start);
        if (start + over > base + size)
            munmap((void *)(base + size), start + over - (base + size));
    }
    pthread_mutex_lock(&cudadrv_lock);
    r = cudadrv_region_new(CUDADRV_RESERVE);
    if (r) {
        r->base = base;
        r->size = size;
        r->map_len = size;
        r->device = -1;
    }
    pthread_mutex_unlock(&cudadrv_lock);
    if (!r) {
        munmap((void *)base, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *ptr = (CUdeviceptr)base;
    return CUDA_SUCCESS;
}

/* A reservation that still has mappings is refused: callers must unmap
 * first (the real driver's behaviour here is not documented). */
CUresult CUDAAPI cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    CUresult rc = cudadrv_check_init();
    struct cudadrv_region *r;

    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&cudadrv_lock);
    r = cudadrv_region_find((uintptr_t)ptr, CUDADRV_RESERVE);
    if (!r || r->base != (uintptr_t)ptr || r->size != size) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        for (size_t i = 0; i < cudadrv_region_count(); i++)
            if (cudadrv_region_get(i)->reserve == r)
                rc = CUDA_ERROR_INVALID_VALUE;
    }
    if (rc == CUDA_SUCCESS) {
        munmap((void *)r->base, r->size);
        cudadrv_region_del(r);
    }
    pthread_mutex_unlock(&cudadrv_lock);
    return rc;
}

CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                          CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    CUresult rc = cudadrv_check_init();
    uintptr_t p = (uintptr_t)ptr;
    struct cudadrv_region *res, *r;
    struct cudadrv_alloc *a;

    if (rc != CUDA_SUCCESS)
        return rc;
    if (flags != 0 || size == 0 || !aligned(p, CUDADRV_GRANULARITY) ||
        size % CUDADRV_GRANULARITY || offset % CUDADRV_GRANULARITY)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&cudadrv_lock);
    a = cudadrv_alloc_lookup(handle);
    res = cudadrv_region_find(p, CUDADRV_RESERVE);
    if (!a || offset > a->size || size > a->size - offset || !res ||
        p + size > res->base + res->size) {
        pthread_mutex_unlock(&cudadrv_lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    for (size_t i = 0; i < cudadrv_region_count(); i++) {
        struct cudadrv_region *o = cudadrv_region_get(i);

        if (o->kind == CUDADRV_MAP && o->base < p + size && p < o->base + o->size) {
            pthread_mutex_unlock(&cudadrv_lock);
            return CUDA_ERROR_INVALID_VALUE;
        }
    }
    r = cudadrv_region_new(CUDADRV_MAP);
    if (!r || mmap((void *)p, size, PROT_NONE, MAP_SHARED | MAP_FIXED, a->fd,
                   (off_t)offset) == MAP_FAILED) {
        if (r)
            cudadrv_region_del(r);
        pthread_mutex_unlock(&cudadrv_lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    r->base = p;
    r->size = size;
    r->map_len = size;
    r->alloc = a;
    r->offset = offset;
    r->reserve = res;
    r->device = a->prop.location.id;
    r->buffer_id = cudadrv_next_buffer_id();
    r->block_id = a->block_id;
    a->maps++;
    pthread_mutex_unlock(&cudadrv_lock);
    cudadrv_trace("cuMemMap(0x%llx, %zu, off %zu, 0x%llx)", (unsigned long long)ptr, size,
                  offset, (unsigned long long)handle);
    return CUDA_SUCCESS;
}

/* 1 when [p, p+n) is exactly a run of adjacent whole mappings. */
static int whole_mappings(uintptr_t p, size_t n)
{
    uintptr_t cur = p, end = p + n;

    if (n == 0 || end < p)
        return 0;
    while (cur < end) {
        struct cudadrv_region *r = cudadrv_region_find(cur, CUDADRV_MAP);

        if (!r || r->base != cur || r->size > end - cur)
            return 0;
        cur += r->size;
    }
    return 1;
}

CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    CUresult rc = cudadrv_check_init();
    uintptr_t cur = (uintptr_t)ptr, end = (uintptr_t)ptr + size;

    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&cudadrv_lock);
    if (!whole_mappings(cur, size)) {
        pthread_mutex_unlock(&cudadrv_lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    while (cur < end) {
        struct cudadrv_region *r = cudadrv_region_find(cur, CUDADRV_MAP);
        struct cudadrv_alloc *a = r->alloc;

        /* Back to a plain reservation: the address stays reserved. */
        mmap((void *)r->base, r->size, PROT_NONE, RESERVE_FLAGS | MAP_FIXED, -1, 0);
        cur += r->size;
        cudadrv_region_del(r);
        cudadrv_alloc_unmapped(a);
    }
    pthread_mutex_unlock(&cudadrv_lock);
    cudadrv_trace("cuMemUnmap(0x%llx, %zu)", (unsigned long long)ptr, size);
    return CUDA_SUCCESS;
}

static int prot_of(unsigned acc)
{
    if (acc == CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
        return PROT_READ | PROT_WRITE;
    return acc == CU_MEM_ACCESS_FLAGS_PROT_READ ? PROT_READ : PROT_NONE;
}

CUresult CUDAAPI cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                                size_t count)
{
    CUresult rc = cudadrv_check_init();
    uintptr_t cur = (uintptr_t)ptr, end = (uintptr_t)ptr + size;

    if (rc != CUDA_SUCCESS)
        return rc;
    if (!desc || count == 0)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < count; i++) {
        unsigned f = (unsigned)desc[i].flags;

        if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
            (f != CU_MEM_ACCESS_FLAGS_PROT_NONE && f != CU_MEM_ACCESS_FLAGS_PROT_READ &&
             f != CU_MEM_ACCESS_FLAGS_PROT_READWRITE))
            return CUDA_ERROR_INVALID_VALUE;
        if (desc[i].location.id < 0 || desc[i].location.id >= cudadrv_device_count())
            return CUDA_ERROR_INVALID_DEVICE;
    }
    pthread_mutex_lock(&cudadrv_lock);
    if (!whole_mappings(cur, size)) {
        pthread_mutex_unlock(&cudadrv_lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    while (cur < end) {
        struct cudadrv_region *r = cudadrv_region_find(cur, CUDADRV_MAP);

        for (size_t i = 0; i < count; i++)
            r->access[desc[i].location.id] = (unsigned)desc[i].flags;
        mprotect((void *)r->base, r->size, prot_of(cudadrv_map_access(r)));
        cur += r->size;
    }
    pthread_mutex_unlock(&cudadrv_lock);
    cudadrv_trace("cuMemSetAccess(0x%llx, %zu, dev %d flags %d%s)", (unsigned long long)ptr,
                  size, desc[0].location.id, (int)desc[0].flags, count > 1 ? ", ..." : "");
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemGetAccess(unsigned long long *flags, const CUmemLocation *location,
                                CUdeviceptr ptr)
{
    CUresult rc = cudadrv_check_init();
    struct cudadrv_region *r;

    if (rc != CUDA_SUCCESS)
        return rc;
    if (!flags || !location || location->type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    if (location->id < 0 || location->id >= cudadrv_device_count())
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&cudadrv_lock);
    r = cudadrv_region_find((uintptr_t)ptr, CUDADRV_MAP);
    if (r)
        *flags = r->access[location->id];
    pthread_mutex_unlock(&cudadrv_lock);
    return r ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
