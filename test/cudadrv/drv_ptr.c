/* SPDX-License-Identifier: MIT */
/*
 * cudadrv: cuPointerGetAttribute / cuPointerGetAttributes.
 *
 * Facts reproduced (cuda.h documentation unless noted): BUFFER_ID is a
 * per-process id never reused, so it changes when an address is reused;
 * IS_LEGACY_CUDA_IPC_CAPABLE is 1 for cuMemAlloc memory and 0 for VMM;
 * RANGE_START_ADDR/RANGE_SIZE give the reservation for VMM memory (the
 * mapping is cuMemGetAddressRange's and MAPPING_BASE_ADDR/SIZE's); on a
 * reserved but unmapped address only the RANGE_* attributes and MAPPED (0)
 * answer; cuPointerGetAttributes does not fail on a non-CUDA pointer but
 * writes default NULL values.
 *
 * Widths written: booleans and MEMORY_TYPE, ALLOWED_HANDLE_TYPES and
 * ACCESS_FLAGS as unsigned int (cuPointerSetAttribute documents SYNC_MEMOPS
 * as an unsigned int); DEVICE_ORDINAL as int; ids as unsigned long long;
 * addresses as CUdeviceptr; sizes as size_t. Callers should zero-initialise
 * the variables they pass.
 */
#include "cudadrv.h"

#include <string.h>

static size_t attr_size(CUpointer_attribute a)
{
    switch (a) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: return sizeof(CUcontext);
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR: return sizeof(CUdeviceptr);
    case CU_POINTER_ATTRIBUTE_HOST_POINTER: return sizeof(void *);
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: return sizeof(CUmemoryPool);
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID: return sizeof(unsigned long long);
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE: return sizeof(size_t);
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: return sizeof(int);
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
    case CU_POINTER_ATTRIBUTE_MAPPED:
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE: return sizeof(unsigned int);
    default: return 0;
    }
}

static void put_uint(void *data, unsigned v)
{
    memcpy(data, &v, sizeof(v));
}

static void put_u64(void *data, unsigned long long v)
{
    memcpy(data, &v, sizeof(v));
}

static void put_ptr(void *data, uintptr_t v)
{
    CUdeviceptr d = (CUdeviceptr)v;

    memcpy(data, &d, sizeof(d));
}

static void put_size(void *data, size_t v)
{
    memcpy(data, &v, sizeof(v));
}

/* Caller holds cudadrv_lock. */
static CUresult attr_get(void *data, CUpointer_attribute a, uintptr_t p)
{
    struct cudadrv_region *r =
        cudadrv_region_find(p, CUDADRV_LEGACY | CUDADRV_IPC | CUDADRV_MAP);
    struct cudadrv_region *res = r ? r->reserve : cudadrv_region_find(p, CUDADRV_RESERVE);
    struct cudadrv_region *range = res ? res : r;
    int dev;

    if (attr_size(a) == 0)
        return a == CU_POINTER_ATTRIBUTE_P2P_TOKENS ? CUDA_ERROR_NOT_SUPPORTED
                                                    : CUDA_ERROR_INVALID_VALUE;
    if (!range)
        return CUDA_ERROR_INVALID_VALUE;
    switch (a) {
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        put_ptr(data, range->base);
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        put_size(data, range->size);
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPED:
        put_uint(data, r != NULL);
        return CUDA_SUCCESS;
    default:
        break;
    }
    if (!r)
        return CUDA_ERROR_INVALID_VALUE;
    switch (a) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: {
        /* VMM memory belongs to no context. */
        CUcontext c = r->ctx;

        memcpy(data, &c, sizeof(c));
        return CUDA_SUCCESS;
    }
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        put_uint(data, CU_MEMORYTYPE_DEVICE);
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
        if (!cudadrv_ctx_current())
            return CUDA_ERROR_INVALID_CONTEXT;
        put_ptr(data, p);
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        return CUDA_ERROR_INVALID_VALUE;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
        put_u64(data, r->buffer_id);
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
        put_u64(data, r->block_id);
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        memcpy(data, &r->device, sizeof(int));
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
        put_uint(data, r->kind == CUDADRV_LEGACY);
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
        put_uint(data, r->kind == CUDADRV_MAP ? (unsigned)r->alloc->prop.requestedHandleTypes : 0);
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
        put_uint(data, 1);
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
        if (r->kind != CUDADRV_MAP)
            put_uint(data, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
        else
            put_uint(data, cudadrv_current_device(&dev) == CUDA_SUCCESS ? r->access[dev] : 0);
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
        put_ptr(data, r->base);
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
        put_size(data, r->size);
        return CUDA_SUCCESS;
    default:
        /* SYNC_MEMOPS, IS_MANAGED, IS_HW_DECOMPRESS_CAPABLE, MEMPOOL_HANDLE */
        memset(data, 0, attr_size(a));
        return CUDA_SUCCESS;
    }
}

CUresult CUDAAPI cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
    CUresult rc = cudadrv_check_init();

    if (rc != CUDA_SUCCESS)
        return rc;
    if (!data)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&cudadrv_lock);
    rc = attr_get(data, attribute, (uintptr_t)ptr);
    pthread_mutex_unlock(&cudadrv_lock);
    return rc;
}

CUresult CUDAAPI cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute *attributes,
                                        void **data, CUdeviceptr ptr)
{
    CUresult rc = cudadrv_check_init();

    if (rc != CUDA_SUCCESS)
        return rc;
    if (numAttributes == 0 || !attributes || !data)
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < numAttributes; i++)
        if (attr_size(attributes[i]) == 0 || !data[i])
            return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&cudadrv_lock);
    for (unsigned i = 0; i < numAttributes; i++)
        if (attr_get(data[i], attributes[i], (uintptr_t)ptr) != CUDA_SUCCESS)
            memset(data[i], 0, attr_size(attributes[i]));
    pthread_mutex_unlock(&cudadrv_lock);
    return CUDA_SUCCESS;
}
