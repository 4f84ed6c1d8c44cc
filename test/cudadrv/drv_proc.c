/* SPDX-License-Identifier: MIT */
/*
 * cudadrv: cuGetProcAddress (CUDA 11.3 API, 4 arguments) and
 * cuGetProcAddress_v2 (CUDA 12.0, 5 arguments), as libcudart uses them.
 *
 * A symbol is a base name; the driver returns the newest variant whose
 * "introduced in" version is <= the requested version. The versions below
 * are those of the PFN_<name>_v<version> typedefs in CUDA 13's
 * cudaTypedefs.h. Notable consequences:
 *   "cuIpcOpenMemHandle" <  11000 -> cuIpcOpenMemHandle, >= 11000 -> _v2
 *   "cuGetProcAddress"   11030..11999 -> the 4-argument cuGetProcAddress,
 *                        >= 12000 -> cuGetProcAddress_v2 (itself)
 *   "cuCtxGetDevice", "cuCtxSynchronize" >= 13000 -> the _v2 variants that
 *                        take a CUcontext argument
 *   "cuMemFree", "cuMemAlloc", "cuMemGetInfo", "cuMemcpyHtoD", ... >= 3020
 *                        -> the _v2 ones
 *   "cuDevicePrimaryCtxRelease", "...Reset", "...SetFlags" 7000..10999 ->
 *                        the plain ones, >= 11000 -> _v2 (same effect here,
 *                        except SetFlags: the plain one refuses an active
 *                        context, as before CUDA 11)
 * The double leaves out the 32-bit (pre-3.2) entry points: asking for them
 * gets VERSION_NOT_SUFFICIENT. With CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_
 * STREAM the _ptds variants are returned where they exist.
 *
 * Not found / version too low: *pfn = NULL, CUDA_SUCCESS and the status
 * set, as cuda.h documents. CUDADRV_PROCADDR_NOTFOUND=error makes it
 * return CUDA_ERROR_NOT_FOUND instead, so a caller can be tested against
 * both behaviours.
 */
#include "cudadrv.h"

#include <stdlib.h>
#include <string.h>

struct proc_entry {
    const char *name;
    int version;
    void *fn;
    void *ptds;
};

#define P(name, ver, fn) { name, ver, (void *)(fn), NULL }
#define PT(name, ver, fn, ptds) { name, ver, (void *)(fn), (void *)(ptds) }

static const struct proc_entry table[] = {
    P("cuGetErrorString", 6000, cuGetErrorString),
    P("cuGetErrorName", 6000, cuGetErrorName),
    P("cuInit", 2000, cuInit),
    P("cuDriverGetVersion", 2020, cuDriverGetVersion),
    P("cuDeviceGet", 2000, cuDeviceGet),
    P("cuDeviceGetCount", 2000, cuDeviceGetCount),
    P("cuDeviceGetAttribute", 2000, cuDeviceGetAttribute),
    P("cuDevicePrimaryCtxRetain", 7000, cuDevicePrimaryCtxRetain),
    P("cuDevicePrimaryCtxRelease", 7000, cuDevicePrimaryCtxRelease),
    P("cuDevicePrimaryCtxRelease", 11000, cuDevicePrimaryCtxRelease_v2),
    P("cuDevicePrimaryCtxReset", 7000, cuDevicePrimaryCtxReset),
    P("cuDevicePrimaryCtxReset", 11000, cuDevicePrimaryCtxReset_v2),
    P("cuDevicePrimaryCtxGetState", 7000, cuDevicePrimaryCtxGetState),
    P("cuDevicePrimaryCtxSetFlags", 7000, cuDevicePrimaryCtxSetFlags),
    P("cuDevicePrimaryCtxSetFlags", 11000, cuDevicePrimaryCtxSetFlags_v2),
    P("cuCtxCreate", 2000, cuCtxCreate),
    P("cuCtxCreate", 3020, cuCtxCreate_v2),
    P("cuCtxCreate", 11040, cuCtxCreate_v3),
    P("cuCtxCreate", 12050, cuCtxCreate_v4),
    P("cuCtxDestroy", 2000, cuCtxDestroy),
    P("cuCtxDestroy", 4000, cuCtxDestroy_v2),
    P("cuCtxPushCurrent", 2000, cuCtxPushCurrent),
    P("cuCtxPushCurrent", 4000, cuCtxPushCurrent_v2),
    P("cuCtxPopCurrent", 2000, cuCtxPopCurrent),
    P("cuCtxPopCurrent", 4000, cuCtxPopCurrent_v2),
    P("cuCtxSetCurrent", 4000, cuCtxSetCurrent),
    P("cuCtxGetCurrent", 4000, cuCtxGetCurrent),
    P("cuCtxGetDevice", 2000, cuCtxGetDevice),
    P("cuCtxGetDevice", 13000, cuCtxGetDevice_v2),
    P("cuCtxGetId", 12000, cuCtxGetId),
    P("cuCtxSynchronize", 2000, cuCtxSynchronize),
    P("cuCtxSynchronize", 13000, cuCtxSynchronize_v2),
    P("cuMemAlloc", 3020, cuMemAlloc_v2),
    P("cuMemGetInfo", 3020, cuMemGetInfo_v2),
    P("cuMemFree", 3020, cuMemFree_v2),
    P("cuMemGetAddressRange", 3020, cuMemGetAddressRange_v2),
    PT("cuMemcpyHtoD", 3020, cuMemcpyHtoD_v2, cuMemcpyHtoD_v2_ptds),
    PT("cuMemcpyDtoH", 3020, cuMemcpyDtoH_v2, cuMemcpyDtoH_v2_ptds),
    PT("cuMemcpyDtoD", 3020, cuMemcpyDtoD_v2, cuMemcpyDtoD_v2_ptds),
    PT("cuMemcpy", 4000, cuMemcpy, cuMemcpy_ptds),
    PT("cuMemsetD8", 3020, cuMemsetD8_v2, cuMemsetD8_v2_ptds),
    P("cuIpcGetMemHandle", 4010, cuIpcGetMemHandle),
    P("cuIpcOpenMemHandle", 4010, cuIpcOpenMemHandle),
    P("cuIpcOpenMemHandle", 11000, cuIpcOpenMemHandle_v2),
    P("cuIpcCloseMemHandle", 4010, cuIpcCloseMemHandle),
    P("cuMemGetAllocationGranularity", 10020, cuMemGetAllocationGranularity),
    P("cuMemCreate", 10020, cuMemCreate),
    P("cuMemRelease", 10020, cuMemRelease),
    P("cuMemAddressReserve", 10020, cuMemAddressReserve),
    P("cuMemAddressFree", 10020, cuMemAddressFree),
    P("cuMemMap", 10020, cuMemMap),
    P("cuMemUnmap", 10020, cuMemUnmap),
    P("cuMemSetAccess", 10020, cuMemSetAccess),
    P("cuMemGetAccess", 10020, cuMemGetAccess),
    P("cuMemExportToShareableHandle", 10020, cuMemExportToShareableHandle),
    P("cuMemImportFromShareableHandle", 10020, cuMemImportFromShareableHandle),
    P("cuMemGetAllocationPropertiesFromHandle", 10020, cuMemGetAllocationPropertiesFromHandle),
    P("cuMemRetainAllocationHandle", 11000, cuMemRetainAllocationHandle),
    P("cuPointerGetAttribute", 4000, cuPointerGetAttribute),
    P("cuPointerGetAttributes", 7000, cuPointerGetAttributes),
    P("cuGetProcAddress", 11030, cuGetProcAddress),
    P("cuGetProcAddress", 12000, cuGetProcAddress_v2),
};

#undef P
#undef PT

/* First version that has a _ptds variant of the copy/set calls. */
#define PTDS_VERSION 7000

static CUresult lookup(const char *symbol, void **pfn, int version, cuuint64_t flags,
                       CUdriverProcAddressQueryResult *status)
{
    const struct proc_entry *best = NULL;
    int known = 0;
    const char *mode = getenv("CUDADRV_PROCADDR_NOTFOUND");
    CUresult miss = mode && strcmp(mode, "error") == 0 ? CUDA_ERROR_NOT_FOUND : CUDA_SUCCESS;

    if (!symbol || !pfn || version <= 0 ||
        (flags & ~(cuuint64_t)(CU_GET_PROC_ADDRESS_LEGACY_STREAM |
                               CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)))
        return CUDA_ERROR_INVALID_VALUE;
    /* Documented: a version newer than the driver is an error. */
    if (version > CUDADRV_DRIVER_VERSION)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
        if (strcmp(table[i].name, symbol) != 0)
            continue;
        known = 1;
        if (table[i].version <= version && (!best || table[i].version > best->version))
            best = &table[i];
    }
    cudadrv_trace("cuGetProcAddress(\"%s\", %d, %llu) -> %s", symbol, version,
                  (unsigned long long)flags, best ? "found" : known ? "version" : "none");
    if (!best) {
        *pfn = NULL;
        if (status)
            *status = known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                            : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        return miss;
    }
    if ((flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) && best->ptds &&
        version >= PTDS_VERSION)
        *pfn = best->ptds;
    else
        *pfn = best->fn;
    if (status)
        *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
}

/* Works before cuInit: libcudart resolves cuInit itself through it. */
CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                     cuuint64_t flags, CUdriverProcAddressQueryResult *symbolStatus)
{
    return lookup(symbol, pfn, cudaVersion, flags, symbolStatus);
}

CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                  cuuint64_t flags)
{
    return lookup(symbol, pfn, cudaVersion, flags, NULL);
}
