/* SPDX-License-Identifier: MIT */
/*
 * cu_entry.c - every route into the CUDA IPC calls.
 *
 * Symbol calls land on the exported wrappers below. libcudart (static or
 * shared: PyTorch, CuPy, every nvcc program) never calls by symbol: it
 * does dlsym(libcuda, "cuGetProcAddress_v2") - our dlsym hands out our
 * wrapper - then asks it for "cuGetProcAddress" and uses what it returns
 * for every other entry point. Our cuGetProcAddress answers its own name
 * with itself and the IPC/free names with our wrappers, respecting the
 * version asked for (cuIpcOpenMemHandle before 11.0 is the legacy entry).
 */
#include <dlfcn.h>
#include <string.h>

#include "shim/config.h"
#include "shim/cu.h"
#include "shim/init.h"
#include "shim/log.h"
#include "shim/symbols.h"
#include "cache/transport.h"

#define CU_EXPORT __attribute__((visibility("default")))

#define REAL_OR_FAIL(field)                      \
    const byval_cu_real_t *rl = byval_cu_real(); \
    if (!rl || !rl->field)                       \
    return CUDA_ERROR_NOT_INITIALIZED

CU_EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr ptr)
{
    REAL_OR_FAIL(ipc_get);
    return byval_cu_ipc_get(rl->ipc_get, h, ptr);
}

CU_EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle h, unsigned int flags)
{
    REAL_OR_FAIL(ipc_open_v2);
    return byval_cu_ipc_open(rl->ipc_open_v2, pdptr, h, flags);
}

CU_EXPORT CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle h, unsigned int flags)
{
    REAL_OR_FAIL(ipc_open);
    return byval_cu_ipc_open(rl->ipc_open, pdptr, h, flags);
}

CU_EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr ptr)
{
    REAL_OR_FAIL(ipc_close);
    return byval_cu_ipc_close(rl->ipc_close, ptr);
}

CU_EXPORT CUresult cuMemFree_v2(CUdeviceptr ptr)
{
    REAL_OR_FAIL(mem_free_v2);
    if (byval_init() && byval_cfg.cuda) {
        byval_cu_export_forget_range(ptr, 1);
        byval_cu_legacy_freed(ptr);
    }
    return rl->mem_free_v2(ptr);
}

/* The 32-bit-pointer entry of CUDA < 3.2, still exported by libcuda. */
CU_EXPORT CUresult cuMemFree(unsigned int ptr)
{
    REAL_OR_FAIL(mem_free);
    if (byval_init() && byval_cfg.cuda) {
        byval_cu_export_forget_range(ptr, 1);
        byval_cu_legacy_freed(ptr);
    }
    return rl->mem_free(ptr);
}

CU_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    REAL_OR_FAIL(mem_release);
    if (byval_init() && byval_cfg.cuda)
        byval_cu_export_forget_handle(handle);
    return rl->mem_release(handle);
}

CU_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    REAL_OR_FAIL(mem_unmap);
    if (byval_init() && byval_cfg.cuda)
        byval_cu_export_forget_range(ptr, size);
    return rl->mem_unmap(ptr, size);
}

/* A chunk mapped (a pool that grows) ends no export; a handle remembered
 * for a pointer is checked against the longer run at its next get. */
CU_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                            CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    REAL_OR_FAIL(map);
    CUresult r = rl->map(ptr, size, offset, handle, flags);
    if (r == CUDA_SUCCESS && byval_init() && byval_cfg.cuda)
        byval_cu_export_mapped();
    return r;
}

/* An application's own VMM export (PyTorch expandable segments, UCX):
 * its peer fetches the fd with its own pidfd_getfd, which the kernel may
 * refuse; registered, the fd can then be served by our broker instead
 * (shim/syscall.c, handles/registry_fds.c). */
CU_EXPORT CUresult cuMemExportToShareableHandle(void *shareable,
                                                CUmemGenericAllocationHandle handle,
                                                CUmemAllocationHandleType type,
                                                unsigned long long flags)
{
    REAL_OR_FAIL(export_shareable);
    CUresult r = rl->export_shareable(shareable, handle, type, flags);
    if (r == CUDA_SUCCESS && type == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR && shareable &&
        byval_init() && byval_cfg.cuda)
        byval_export_register_fd(*(int *)shareable);
    return r;
}

/* Our wrappers by name and the first CUDA version each answers: the rows
 * of one name newest first, and the first whose version is not above the
 * one asked for wins (cuIpcOpenMemHandle before 11.0 is the legacy entry). */
static const struct cu_route {
    const char *name;
    int since;
    void *wrapper;
} cu_routes[] = {
    {"cuGetProcAddress", 12000, (void *)cuGetProcAddress_v2},
    {"cuGetProcAddress", 0, (void *)cuGetProcAddress},
    {"cuIpcOpenMemHandle", 11000, (void *)cuIpcOpenMemHandle_v2},
    {"cuIpcOpenMemHandle", 0, (void *)cuIpcOpenMemHandle},
    {"cuMemFree", 3020, (void *)cuMemFree_v2},
    {"cuMemFree", 0, (void *)cuMemFree},
    {"cuIpcGetMemHandle", 0, (void *)cuIpcGetMemHandle},
    {"cuIpcCloseMemHandle", 0, (void *)cuIpcCloseMemHandle},
    {"cuMemRelease", 0, (void *)cuMemRelease},
    {"cuMemUnmap", 0, (void *)cuMemUnmap},
    {"cuMemMap", 0, (void *)cuMemMap},
    {"cuMemExportToShareableHandle", 0, (void *)cuMemExportToShareableHandle},
    /* cu_ctx.c: a context's mappings go before the context does. */
    {"cuCtxDestroy", 4000, (void *)cuCtxDestroy_v2},
    {"cuCtxDestroy", 0, (void *)cuCtxDestroy},
    {"cuDevicePrimaryCtxRelease", 11000, (void *)cuDevicePrimaryCtxRelease_v2},
    {"cuDevicePrimaryCtxRelease", 0, (void *)cuDevicePrimaryCtxRelease},
    {"cuDevicePrimaryCtxReset", 11000, (void *)cuDevicePrimaryCtxReset_v2},
    {"cuDevicePrimaryCtxReset", 0, (void *)cuDevicePrimaryCtxReset},
    {"cuDevicePrimaryCtxRetain", 0, (void *)cuDevicePrimaryCtxRetain},
};

/* Our wrapper for (symbol, requested version), NULL if not ours. */
static void *cu_wrapper_for(const char *symbol, int version)
{
    if (!symbol || symbol[0] != 'c' || symbol[1] != 'u')
        return NULL;
    for (size_t i = 0; i < sizeof(cu_routes) / sizeof(cu_routes[0]); i++)
        if (version >= cu_routes[i].since && strcmp(symbol, cu_routes[i].name) == 0)
            return cu_routes[i].wrapper;
    return NULL;
}

/* Replace *pfn with our wrapper when the driver found the symbol. */
static void cu_substitute(const char *symbol, int version, void **pfn)
{
    if (!pfn || !*pfn)
        return;
    void *w = cu_wrapper_for(symbol, version);
    if (w)
        *pfn = w;
}

typedef CUresult (*gpa_v2_fn)(const char *, void **, int, cuuint64_t,
                              CUdriverProcAddressQueryResult *);
typedef CUresult (*gpa_v1_fn)(const char *, void **, int, cuuint64_t);

CU_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
                                       cuuint64_t flags, CUdriverProcAddressQueryResult *status)
{
    REAL_OR_FAIL(get_proc_address_v2);
    CUresult r = ((gpa_v2_fn)rl->get_proc_address_v2)(symbol, pfn, version, flags, status);
    if (r == CUDA_SUCCESS)
        cu_substitute(symbol, version, pfn);
    return r;
}

CU_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags)
{
    REAL_OR_FAIL(get_proc_address);
    CUresult r = ((gpa_v1_fn)rl->get_proc_address)(symbol, pfn, version, flags);
    if (r == CUDA_SUCCESS)
        cu_substitute(symbol, version, pfn);
    return r;
}

/*
 * The runtime's getters, for programs linked with the shared libcudart
 * (a static cudart binds them internally, and reaches the driver through
 * the cuGetProcAddress route above anyway). The runtime's error type is an
 * int enum: declared here to avoid depending on cuda_runtime_api.h.
 */
typedef int byval_cudart_err_t;
typedef byval_cudart_err_t (*dep_fn)(const char *, void **, unsigned long long, void *);
typedef byval_cudart_err_t (*depv_fn)(const char *, void **, unsigned int, unsigned long long,
                                      void *);

CU_EXPORT byval_cudart_err_t cudaGetDriverEntryPoint(const char *symbol, void **fn,
                                                     unsigned long long flags, void *status)
{
    static dep_fn next;
    if (!next)
        next = (dep_fn)byval_real_dlsym(RTLD_NEXT, "cudaGetDriverEntryPoint");
    if (!next)
        return 3; /* cudaErrorInitializationError */
    byval_cudart_err_t r = next(symbol, fn, flags, status);
    if (r == 0)
        cu_substitute(symbol, 13000, fn); /* this getter hands out the newest */
    return r;
}

CU_EXPORT byval_cudart_err_t cudaGetDriverEntryPointByVersion(const char *symbol, void **fn,
                                                              unsigned int version,
                                                              unsigned long long flags,
                                                              void *status)
{
    static depv_fn next;
    if (!next)
        next = (depv_fn)byval_real_dlsym(RTLD_NEXT, "cudaGetDriverEntryPointByVersion");
    if (!next)
        return 3;
    byval_cudart_err_t r = next(symbol, fn, version, flags, status);
    if (r == 0)
        cu_substitute(symbol, (int)version, fn);
    return r;
}
