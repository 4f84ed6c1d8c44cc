/* SPDX-License-Identifier: MIT */
/*
 * cudadrv: the synchronous copy and set calls. Device memory is host-mapped
 * (drv_mem.c), so a copy is memcpy after checking that the device side is
 * memory the current device may touch and not a destroyed range.
 */
#include "cudadrv.h"

#include <string.h>

/* kind bits: 1 = dst is device memory, 2 = src is device memory. */
static CUresult copy(uintptr_t dst, uintptr_t src, size_t n, int kind)
{
    CUresult rc = cudadrv_need_ctx();

    if (rc != CUDA_SUCCESS)
        return rc;
    if (n == 0)
        return CUDA_SUCCESS;
    if (!dst || !src)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&cudadrv_lock);
    if (cudadrv_dead_check(dst, n) != CUDA_SUCCESS || cudadrv_dead_check(src, n) != CUDA_SUCCESS)
        rc = CUDA_ERROR_ILLEGAL_ADDRESS;
    else if (((kind & 1) && !cudadrv_dev_range_ok(dst, n, 1)) ||
             ((kind & 2) && !cudadrv_dev_range_ok(src, n, 0)))
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        memmove((void *)dst, (const void *)src, n);
    pthread_mutex_unlock(&cudadrv_lock);
    return rc;
}

CUresult CUDAAPI cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n)
{
    return copy((uintptr_t)dst, (uintptr_t)src, n, 1);
}

CUresult CUDAAPI cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n)
{
    return copy((uintptr_t)dst, (uintptr_t)src, n, 2);
}

CUresult CUDAAPI cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
    return copy((uintptr_t)dst, (uintptr_t)src, n, 3);
}

/* Unified addressing: a pointer inside any device range (reserved VA
 * included) is device memory and must be accessible; others are host. */
CUresult CUDAAPI cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
    int kind = 0;

    pthread_mutex_lock(&cudadrv_lock);
    if (cudadrv_region_find((uintptr_t)dst, CUDADRV_ANY))
        kind |= 1;
    if (cudadrv_region_find((uintptr_t)src, CUDADRV_ANY))
        kind |= 2;
    pthread_mutex_unlock(&cudadrv_lock);
    return copy((uintptr_t)dst, (uintptr_t)src, n, kind);
}

CUresult CUDAAPI cuMemsetD8_v2(CUdeviceptr dst, unsigned char uc, size_t n)
{
    CUresult rc = cudadrv_need_ctx();

    if (rc != CUDA_SUCCESS || n == 0)
        return rc;
    pthread_mutex_lock(&cudadrv_lock);
    if (cudadrv_dead_check((uintptr_t)dst, n) != CUDA_SUCCESS)
        rc = CUDA_ERROR_ILLEGAL_ADDRESS;
    else if (!cudadrv_dev_range_ok((uintptr_t)dst, n, 1))
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        memset((void *)(uintptr_t)dst, uc, n);
    pthread_mutex_unlock(&cudadrv_lock);
    return rc;
}

/* No streams in the double: the per-thread-default-stream entry points
 * are distinct symbols (so routing can be told apart) with equal effect. */
CUresult CUDAAPI cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
    return cuMemcpy(dst, src, n);
}

CUresult CUDAAPI cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void *src, size_t n)
{
    return cuMemcpyHtoD_v2(dst, src, n);
}

CUresult CUDAAPI cuMemcpyDtoH_v2_ptds(void *dst, CUdeviceptr src, size_t n)
{
    return cuMemcpyDtoH_v2(dst, src, n);
}

CUresult CUDAAPI cuMemcpyDtoD_v2_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
    return cuMemcpyDtoD_v2(dst, src, n);
}

CUresult CUDAAPI cuMemsetD8_v2_ptds(CUdeviceptr dst, unsigned char uc, size_t n)
{
    return cuMemsetD8_v2(dst, uc, n);
}
