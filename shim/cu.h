/* SPDX-License-Identifier: MIT */
/*
 * cu.h - internal interface of the CUDA part of the shim.
 *
 * cu_entry.c   exported wrappers, cuGetProcAddress / cudaGetDriverEntryPoint,
 *              the real libcuda entry points, context ends
 * cu_export.c  by-value export: VMM memory (pools of chunks, extents), legacy
 * cu_import.c  the VMM and legacy import backends, cuIpcOpen/CloseMemHandle
 */
#ifndef BYVAL_SHIM_CU_H
#define BYVAL_SHIM_CU_H

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "handles/registry.h"

/* The header maps these names to their newest versions; we wrap every
 * version under its exported name. */
#undef cuIpcOpenMemHandle
#undef cuMemFree
#undef cuGetProcAddress
#undef cuMemGetAddressRange
#undef cuCtxDestroy
#undef cuDevicePrimaryCtxRelease
#undef cuDevicePrimaryCtxReset

/* The older entry points we export beside the newest (cuda.h declares
 * only the newest under the plain names). */
CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags);
CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle h, unsigned int flags);
CUresult cuMemFree(unsigned int ptr);
CUresult cuCtxDestroy(CUcontext ctx);
CUresult cuDevicePrimaryCtxRelease(CUdevice dev);
CUresult cuDevicePrimaryCtxReset(CUdevice dev);

typedef CUresult (*byval_cu_get_fn)(CUipcMemHandle *, CUdeviceptr);
typedef CUresult (*byval_cu_open_fn)(CUdeviceptr *, CUipcMemHandle, unsigned int);
typedef CUresult (*byval_cu_close_fn)(CUdeviceptr);

/* The libcuda functions ipcbyval itself calls. */
typedef struct byval_cu_real {
    CUresult (*pointer_get_attribute)(void *, CUpointer_attribute, CUdeviceptr);
    CUresult (*mem_get_address_range)(CUdeviceptr *, size_t *, CUdeviceptr);
    CUresult (*retain_allocation_handle)(CUmemGenericAllocationHandle *, void *);
    CUresult (*get_allocation_properties)(CUmemAllocationProp *, CUmemGenericAllocationHandle);
    CUresult (*export_shareable)(void *, CUmemGenericAllocationHandle, CUmemAllocationHandleType,
                                 unsigned long long);
    CUresult (*import_shareable)(CUmemGenericAllocationHandle *, void *, CUmemAllocationHandleType);
    CUresult (*address_reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
    CUresult (*address_free)(CUdeviceptr, size_t);
    CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
    CUresult (*set_access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
    CUresult (*ctx_get_current)(CUcontext *);
    CUresult (*ctx_set_current)(CUcontext);
    CUresult (*ctx_get_device)(CUdevice *);
    CUresult (*ctx_get_id)(CUcontext, unsigned long long *); /* CUDA 12.0+ */
    CUresult (*get_error_name)(CUresult, const char **);
    byval_cu_get_fn ipc_get;
    byval_cu_open_fn ipc_open_v2;
    byval_cu_open_fn ipc_open;
    byval_cu_close_fn ipc_close;
    CUresult (*mem_free_v2)(CUdeviceptr);
    CUresult (*mem_free)(unsigned int);
    CUresult (*mem_release)(CUmemGenericAllocationHandle);
    CUresult (*mem_unmap)(CUdeviceptr, size_t);
    CUresult (*ctx_destroy_v2)(CUcontext);
    CUresult (*ctx_destroy)(CUcontext);
    CUresult (*primary_retain)(CUcontext *, CUdevice);
    CUresult (*primary_release_v2)(CUdevice);
    CUresult (*primary_release)(CUdevice);
    CUresult (*primary_reset_v2)(CUdevice);
    CUresult (*primary_reset)(CUdevice);
    CUresult (*primary_get_state)(CUdevice, unsigned int *, int *);
    void *get_proc_address;    /* cuGetProcAddress (v1) */
    void *get_proc_address_v2; /* cuGetProcAddress_v2 */
} byval_cu_real_t;

/* Resolved once from the loaded libcuda; NULL when libcuda is not loaded
 * (then every wrapper reports CUDA_ERROR_NOT_INITIALIZED). */
const byval_cu_real_t *byval_cu_real(void);

/* "CUDA_ERROR_INVALID_VALUE" etc. for logs. */
const char *byval_cu_err(CUresult r);

/* Offsets of the CUDA handle: bytes 0-7 carry the offset of the pointer's
 * chunk in the exporter's reservation, 8-15 the exporter's pool id (the
 * mirror an importer maps it into); the record sits where
 * Level Zero's does. */
#define BYVAL_CU_OFF_CHUNK 0
#define BYVAL_CU_OFF_POOL 8
#define BYVAL_CU_RECORD_OFF 17

/* The registry entry of an exporter's pool, live while no chunk of it was
 * unmapped since it was made: what importers' mirrors watch. Not a record
 * kind: its own key space. */
#define BYVAL_CU_POOL_KEY(pool_id) BYVAL_REG_KEY(0x40, (pool_id))
#define BYVAL_CU_POOL_INO 1u

CUresult byval_cu_ipc_get(byval_cu_get_fn next, CUipcMemHandle *h, CUdeviceptr ptr);
CUresult byval_cu_ipc_open(byval_cu_open_fn next, CUdeviceptr *pdptr, CUipcMemHandle h,
                           unsigned int flags);
CUresult byval_cu_ipc_close(byval_cu_close_fn next, CUdeviceptr ptr);

/* arr (n elements used of *cap_p, elem bytes each) with room for one
 * more, doubling from 16: arr itself, moved or not; NULL on ENOMEM (arr
 * and *cap_p unchanged). */
static inline void *byval_cu_room(void *arr, size_t *cap_p, size_t n, size_t elem)
{
    if (n < *cap_p)
        return arr;
    size_t cap = *cap_p ? *cap_p * 2 : 16;
    void *a = realloc(arr, cap * elem);
    if (a)
        *cap_p = cap;
    return a;
}

/* Index of the first of n chunks ending after off: chunks sorted by
 * offset, stride bytes apart, each starting with its uint64_t offset and
 * size. */
static inline size_t byval_cu_chunk_at(const void *chunks, size_t n, size_t stride, uint64_t off)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const uint64_t *c = (const uint64_t *)((const char *)chunks + mid * stride);
        if (c[0] + c[1] <= off)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* A pointer attribute read into a zeroed 8-byte slot (some are 4 bytes). */
int byval_cu_attr_u64(const byval_cu_real_t *rl, CUpointer_attribute a, CUdeviceptr p,
                      uint64_t *out);

/* Exporter side: chunks in [ptr, ptr + size) are unmapped (cuMemUnmap,
 * cuMemFree), or allocation gh (!= 0) is released (cuMemRelease): the
 * exports naming them end. A chunk was mapped (cuMemMap): remembered
 * handles are checked again. */
void byval_cu_export_forget(CUdeviceptr ptr, size_t size, CUmemGenericAllocationHandle gh);
void byval_cu_export_mapped(void);

/* Legacy exports (cu_export.c): ptr is being freed. */
void byval_cu_legacy_freed(CUdeviceptr ptr);
/* ctx's memory goes with it: end its legacy exports. Returns how many. */
size_t byval_cu_legacy_ctx_gone(CUcontext ctx);

/* Make ctx current around a driver call from a cache callback, inside
 * byval_enter() .. byval_leave(). */
CUcontext byval_cu_ctx_push(CUcontext ctx);
void byval_cu_ctx_pop(CUcontext saved);

#endif
