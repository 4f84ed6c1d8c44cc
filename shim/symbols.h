/* SPDX-License-Identifier: MIT */
/*
 * symbols.h - the one table of interposed entry points (X-macros). From it
 * come the exported wrappers and the DDI-table and extension wrappers
 * (ze_entry.c), the cuGetProcAddress routes and libcuda's entry points
 * (cu_entry.c), the table dlsym() hands wrappers out from
 * (dlsym.c) and the export map (the Makefile preprocesses this file with
 * BYVAL_EXPORT_MAP). test_symbols.sh checks the library exports exactly it.
 */
#ifndef BYVAL_SHIM_SYMBOLS_H
#define BYVAL_SHIM_SYMBOLS_H

/*
 * Level Zero: X(name, function type, ZE_RESULT_ERROR_* returned when the
 * loader lacks it, handler(next, args...), 1 if
 * zeDriverGetExtensionFunctionAddress hands it out, (params), (args),
 * (DDI table, table layout, field, from API version)).
 */
/* clang-format off */
#define BYVAL_ZE_SYMBOLS(X) \
    X(zeMemGetIpcHandle, ze_pfnMemGetIpcHandle_t, UNINITIALIZED, byval_ze_get_ipc, 0, \
      (ze_context_handle_t c, const void *p, ze_ipc_mem_handle_t *h), (c, p, h), \
      (MEM, ze_mem_dditable_t, pfnGetIpcHandle, 0)) \
    X(zeMemOpenIpcHandle, ze_pfnMemOpenIpcHandle_t, UNINITIALIZED, byval_ze_open_ipc, 0, \
      (ze_context_handle_t c, ze_device_handle_t d, ze_ipc_mem_handle_t h, \
       ze_ipc_memory_flags_t f, void **pp), (c, d, h, f, pp), \
      (MEM, ze_mem_dditable_t, pfnOpenIpcHandle, 0)) \
    X(zeMemCloseIpcHandle, ze_pfnMemCloseIpcHandle_t, UNINITIALIZED, byval_ze_close_ipc, 0, \
      (ze_context_handle_t c, const void *p), (c, p), \
      (MEM, ze_mem_dditable_t, pfnCloseIpcHandle, 0)) \
    X(zeMemFree, ze_pfnMemFree_t, UNINITIALIZED, byval_ze_free, 0, \
      (ze_context_handle_t c, void *p), (c, p), (MEM, ze_mem_dditable_t, pfnFree, 0)) \
    X(zeMemFreeExt, ze_pfnMemFreeExt_t, UNINITIALIZED, byval_ze_free_ext, 0, \
      (ze_context_handle_t c, const ze_memory_free_ext_desc_t *d, void *p), (c, d, p), \
      (MEM, ze_mem_dditable_t, pfnFreeExt, 0)) \
    X(zeMemPutIpcHandle, byval_ze_mem_put_fn, UNSUPPORTED_FEATURE, byval_ze_put_ipc, 1, \
      (ze_context_handle_t c, ze_ipc_mem_handle_t h), (c, h), \
      (MEM, byval_ze_mem_ddi_1_6_t, pfnPutIpcHandle, BYVAL_ZE_API_1_6)) \
    X(zeMemGetIpcHandleWithProperties, byval_ze_get_props_fn, UNSUPPORTED_FEATURE, \
      byval_ze_get_ipc_props, 1, \
      (ze_context_handle_t c, const void *p, void *n, ze_ipc_mem_handle_t *h), (c, p, n, h), \
      (MEM, byval_ze_mem_ddi_1_15_t, pfnGetIpcHandleWithProperties, BYVAL_ZE_API_1_15)) \
    X(zeMemGetFileDescriptorFromIpcHandleExp, byval_ze_fd_from_ipc_fn, UNSUPPORTED_FEATURE, \
      byval_ze_fd_from_ipc, 1, \
      (ze_context_handle_t c, ze_ipc_mem_handle_t h, uint64_t *fd), (c, h, fd), \
      (MEM_EXP, byval_ze_mem_exp_ddi_t, pfnGetFileDescriptorFromIpcHandleExp, 0)) \
    X(zeMemGetIpcHandleFromFileDescriptorExp, byval_ze_ipc_from_fd_fn, UNSUPPORTED_FEATURE, \
      byval_ze_ipc_from_fd, 1, \
      (ze_context_handle_t c, uint64_t fd, ze_ipc_mem_handle_t *h), (c, fd, h), \
      (MEM_EXP, byval_ze_mem_exp_ddi_t, pfnGetIpcHandleFromFileDescriptorExp, 0)) \
    X(zeContextDestroy, ze_pfnContextDestroy_t, UNINITIALIZED, byval_ze_context_destroy, 0, \
      (ze_context_handle_t c), (c), (CONTEXT, ze_context_dditable_t, pfnDestroy, 0)) \
    X(zeEventPoolCreate, ze_pfnEventPoolCreate_t, UNINITIALIZED, byval_ze_pool_create, 0, \
      (ze_context_handle_t c, const ze_event_pool_desc_t *d, uint32_t n, \
       ze_device_handle_t *ds, ze_event_pool_handle_t *pp), (c, d, n, ds, pp), \
      (EVENT_POOL, ze_event_pool_dditable_t, pfnCreate, 0)) \
    X(zeEventPoolGetIpcHandle, ze_pfnEventPoolGetIpcHandle_t, UNINITIALIZED, \
      byval_ze_pool_get_ipc, 0, \
      (ze_event_pool_handle_t p, ze_ipc_event_pool_handle_t *h), (p, h), \
      (EVENT_POOL, ze_event_pool_dditable_t, pfnGetIpcHandle, 0)) \
    X(zeEventPoolOpenIpcHandle, ze_pfnEventPoolOpenIpcHandle_t, UNINITIALIZED, \
      byval_ze_pool_open_ipc, 0, \
      (ze_context_handle_t c, ze_ipc_event_pool_handle_t h, ze_event_pool_handle_t *pp), \
      (c, h, pp), (EVENT_POOL, ze_event_pool_dditable_t, pfnOpenIpcHandle, 0)) \
    X(zeEventPoolCloseIpcHandle, ze_pfnEventPoolCloseIpcHandle_t, UNINITIALIZED, \
      byval_ze_pool_close_ipc, 0, (ze_event_pool_handle_t p), (p), \
      (EVENT_POOL, ze_event_pool_dditable_t, pfnCloseIpcHandle, 0)) \
    X(zeEventPoolDestroy, ze_pfnEventPoolDestroy_t, UNINITIALIZED, byval_ze_pool_destroy, 0, \
      (ze_event_pool_handle_t p), (p), (EVENT_POOL, ze_event_pool_dditable_t, pfnDestroy, 0)) \
    X(zeEventPoolPutIpcHandle, byval_ze_pool_put_fn, UNSUPPORTED_FEATURE, \
      byval_ze_pool_put_ipc, 1, \
      (ze_context_handle_t c, ze_ipc_event_pool_handle_t h), (c, h), \
      (EVENT_POOL, byval_ze_pool_ddi_1_6_t, pfnPutIpcHandle, BYVAL_ZE_API_1_6)) \
    X(zeDriverGetExtensionFunctionAddress, ze_pfnDriverGetExtensionFunctionAddress_t, \
      UNINITIALIZED, ext_address, 0, \
      (ze_driver_handle_t d, const char *n, void **pfn), (d, n, pfn), \
      (DRIVER, ze_driver_dditable_t, pfnGetExtensionFunctionAddress, 0))

/* Intel's extensions, reached only through zeDriverGetExtensionFunctionAddress. */
#define BYVAL_ZE_EXTENSIONS(X) \
    X(zexMemGetIpcHandles, byval_zex_get_handles_fn, UNINITIALIZED, byval_zex_get_ipcs, 1, \
      (ze_context_handle_t c, void *p, uint32_t *n, ze_ipc_mem_handle_t *hs), (c, p, n, hs), ()) \
    X(zexMemOpenIpcHandles, byval_zex_open_handles_fn, UNINITIALIZED, byval_zex_open_ipcs, 1, \
      (ze_context_handle_t c, ze_device_handle_t d, uint32_t n, ze_ipc_mem_handle_t *hs, \
       ze_ipc_memory_flags_t f, void **pp), (c, d, n, hs, f, pp), ())

/* The DDI table getters: X(getter, table layout, DDI table). */
#define BYVAL_ZE_TABLES(X) \
    X(zeGetMemProcAddrTable, ze_mem_dditable_t, MEM) \
    X(zeGetMemExpProcAddrTable, byval_ze_mem_exp_ddi_t, MEM_EXP) \
    X(zeGetContextProcAddrTable, ze_context_dditable_t, CONTEXT) \
    X(zeGetEventPoolProcAddrTable, ze_event_pool_dditable_t, EVENT_POOL) \
    X(zeGetDriverProcAddrTable, ze_driver_dditable_t, DRIVER)

/*
 * CUDA (CUDA_ERROR_NOT_INITIALIZED without libcuda, cudaErrorInitializationError
 * without libcudart: both 3): X(name, name asked of cuGetProcAddress, from
 * CUDA version, byval_cu_real_t field, handler(real, args...), (params),
 * (args)). A name's rows go newest first.
 */
#define BYVAL_CU_SYMBOLS(X) \
    X(cuIpcGetMemHandle, cuIpcGetMemHandle, 0, ipc_get, byval_cu_ipc_get, \
      (CUipcMemHandle *h, CUdeviceptr p), (h, p)) \
    X(cuIpcOpenMemHandle_v2, cuIpcOpenMemHandle, 11000, ipc_open_v2, byval_cu_ipc_open, \
      (CUdeviceptr *pp, CUipcMemHandle h, unsigned int f), (pp, h, f)) \
    X(cuIpcOpenMemHandle, cuIpcOpenMemHandle, 0, ipc_open, byval_cu_ipc_open, \
      (CUdeviceptr *pp, CUipcMemHandle h, unsigned int f), (pp, h, f)) \
    X(cuIpcCloseMemHandle, cuIpcCloseMemHandle, 0, ipc_close, byval_cu_ipc_close, \
      (CUdeviceptr p), (p)) \
    X(cuMemFree_v2, cuMemFree, 3020, mem_free_v2, MEM_FREE, (CUdeviceptr p), (p)) \
    X(cuMemFree, cuMemFree, 0, mem_free, MEM_FREE, (unsigned int p), (p)) /* CUDA < 3.2 */ \
    X(cuMemRelease, cuMemRelease, 0, mem_release, mem_release, \
      (CUmemGenericAllocationHandle a), (a)) \
    X(cuMemUnmap, cuMemUnmap, 0, mem_unmap, mem_unmap, (CUdeviceptr p, size_t n), (p, n)) \
    X(cuMemMap, cuMemMap, 0, map, mem_map, \
      (CUdeviceptr p, size_t n, size_t o, CUmemGenericAllocationHandle a, \
       unsigned long long f), (p, n, o, a, f)) \
    X(cuMemExportToShareableHandle, cuMemExportToShareableHandle, 0, export_shareable, \
      export_shareable, (void *s, CUmemGenericAllocationHandle a, \
                         CUmemAllocationHandleType t, unsigned long long f), (s, a, t, f)) \
    X(cuGetProcAddress_v2, cuGetProcAddress, 12000, get_proc_address_v2, ROUTED, \
      (const char *s, void **pfn, int v, cuuint64_t f, CUdriverProcAddressQueryResult *st), \
      (s, pfn, v, f, st)) \
    X(cuGetProcAddress, cuGetProcAddress, 0, get_proc_address, ROUTED, \
      (const char *s, void **pfn, int v, cuuint64_t f), (s, pfn, v, f))

/* Context ends (wrappers in cu_entry.c): X(name, asked as, from, field). */
#define BYVAL_CU_CTX_SYMBOLS(X) \
    X(cuCtxDestroy_v2, cuCtxDestroy, 4000, ctx_destroy_v2) \
    X(cuCtxDestroy, cuCtxDestroy, 0, ctx_destroy) \
    X(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain, 0, primary_retain) \
    X(cuDevicePrimaryCtxRelease_v2, cuDevicePrimaryCtxRelease, 11000, primary_release_v2) \
    X(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease, 0, primary_release) \
    X(cuDevicePrimaryCtxReset_v2, cuDevicePrimaryCtxReset, 11000, primary_reset_v2) \
    X(cuDevicePrimaryCtxReset, cuDevicePrimaryCtxReset, 0, primary_reset)

/* The runtime's entry-point getters (libcudart): X(name, CUDA version
 * their answers are of, (params), (args)). */
#define BYVAL_CUDART_SYMBOLS(X) \
    X(cudaGetDriverEntryPoint, 13000, \
      (const char *s, void **pfn, unsigned long long f, void *st), (s, pfn, f, st)) \
    X(cudaGetDriverEntryPointByVersion, (int)v, \
      (const char *s, void **pfn, unsigned int v, unsigned long long f, void *st), \
      (s, pfn, v, f, st))

#ifdef BYVAL_HAVE_CUDA
#define BYVAL_CUDA_ALL_(X) BYVAL_CU_SYMBOLS(X) BYVAL_CU_CTX_SYMBOLS(X) BYVAL_CUDART_SYMBOLS(X)
#else
#define BYVAL_CUDA_ALL_(X)
#endif
/* Every exported wrapper; X(name, ...). */
#define BYVAL_ALL_SYMBOLS(X) BYVAL_ZE_SYMBOLS(X) BYVAL_ZE_TABLES(X) BYVAL_CUDA_ALL_(X)
/* The drivers' libraries: dlsym() hands out our wrapper for their entry points. */
#define BYVAL_DRIVER_LIBS(X) X("libze_loader.so") X("libcuda.so")

#ifdef BYVAL_EXPORT_MAP
/* The version script. An anonymous version node on purpose: unversioned
 * definitions match the versioned references programs carry
 * (dlsym@GLIBC_2.34), so the preload wins. */
#define BYVAL_MAP_(name, ...) name;
{
global:
    dlsym;
    syscall;
    pidfd_getfd;
    BYVAL_ALL_SYMBOLS(BYVAL_MAP_)
local:
    *;
};
/* clang-format on */
#else
/* The real dlsym (glibc's), never our interposer. */
void *byval_real_dlsym(void *handle, const char *name);
#endif

#endif
