/* SPDX-License-Identifier: MIT */
/*
 * cu_pair: the driver entry points it uses and how it reaches them
 * (cu_pair_drv.c); the two-process logic is in cu_pair.c.
 */
#ifndef CU_PAIR_H
#define CU_PAIR_H

#include <cuda.h>

/* field, symbol exported by libcuda, argument list; the cuGetProcAddress
 * base name is "cu" #field. */
#define DRV_FUNCS(X)                                                                  \
    X(Init, "cuInit", (unsigned int))                                                 \
    X(DeviceGet, "cuDeviceGet", (CUdevice *, int))                                    \
    X(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", (CUcontext *, CUdevice))    \
    X(DevicePrimaryCtxReset, "cuDevicePrimaryCtxReset_v2", (CUdevice))                \
    X(CtxSetCurrent, "cuCtxSetCurrent", (CUcontext))                                  \
    X(GetErrorName, "cuGetErrorName", (CUresult, const char **))                      \
    X(GetErrorString, "cuGetErrorString", (CUresult, const char **))                  \
    X(MemAlloc, "cuMemAlloc_v2", (CUdeviceptr *, size_t))                             \
    X(MemFree, "cuMemFree_v2", (CUdeviceptr))                                         \
    X(MemGetAddressRange, "cuMemGetAddressRange_v2", (CUdeviceptr *, size_t *, CUdeviceptr)) \
    X(MemcpyHtoD, "cuMemcpyHtoD_v2", (CUdeviceptr, const void *, size_t))             \
    X(MemcpyDtoH, "cuMemcpyDtoH_v2", (void *, CUdeviceptr, size_t))                   \
    X(IpcGetMemHandle, "cuIpcGetMemHandle", (CUipcMemHandle *, CUdeviceptr))          \
    X(IpcOpenMemHandle, "cuIpcOpenMemHandle_v2", (CUdeviceptr *, CUipcMemHandle, unsigned int)) \
    X(IpcCloseMemHandle, "cuIpcCloseMemHandle", (CUdeviceptr))                        \
    X(MemGetAllocationGranularity, "cuMemGetAllocationGranularity",                   \
      (size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags))      \
    X(MemCreate, "cuMemCreate",                                                       \
      (CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long)) \
    X(MemRelease, "cuMemRelease", (CUmemGenericAllocationHandle))                     \
    X(MemAddressReserve, "cuMemAddressReserve",                                       \
      (CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long))               \
    X(MemAddressFree, "cuMemAddressFree", (CUdeviceptr, size_t))                      \
    X(MemMap, "cuMemMap",                                                             \
      (CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long)) \
    X(MemUnmap, "cuMemUnmap", (CUdeviceptr, size_t))                                  \
    X(MemSetAccess, "cuMemSetAccess", (CUdeviceptr, size_t, const CUmemAccessDesc *, size_t)) \
    X(MemExportToShareableHandle, "cuMemExportToShareableHandle",                     \
      (void *, CUmemGenericAllocationHandle, CUmemAllocationHandleType, unsigned long long)) \
    X(MemImportFromShareableHandle, "cuMemImportFromShareableHandle",                 \
      (CUmemGenericAllocationHandle *, void *, CUmemAllocationHandleType))

struct drv {
#define X(field, sym, args) CUresult (*field) args;
    DRV_FUNCS(X)
#undef X
};

enum mem_kind { MEM_LEGACY, MEM_VMM, MEM_VMM_MULTI };
enum route { ROUTE_SYMBOL, ROUTE_PROCADDR, ROUTE_CUDART };

struct opts {
    enum mem_kind mem;
    enum route route;
    int iters, reopen, verbose, dev_exp, dev_imp, version, bench, churn, size_mib;
    const char *lib;
};

extern struct drv d;
/* "exporter" or "importer", for messages */
extern const char *role;

/** Prints "cu_pair: <role>: <call> failed: <NAME> (<text>)"; returns 1. */
int fail(const char *call, CUresult rc);

/* CU(MemAlloc, &p, n): call d.MemAlloc, on error name "cuMemAlloc". */
#define CU(field, ...)                               \
    do {                                             \
        CUresult rc_ = d.field(__VA_ARGS__);         \
        if (rc_ != CUDA_SUCCESS)                     \
            return fail("cu" #field, rc_);           \
    } while (0)

/** dlopens the driver, resolves d by o->route, inits, makes the primary
 * context of device dev_ordinal current. 0 on success. */
int setup(const struct opts *o, int dev_ordinal);

/** The properties of a VMM allocation on device dev that exports a POSIX
 * fd (what ipcbyval shares), for the programs that make one. */
CUmemAllocationProp vmm_prop(int dev);

/** Read-write access for device dev to [va, va + len). 0 on success. */
int vmm_access(CUdeviceptr va, size_t len, int dev);

#endif
