/* SPDX-License-Identifier: MIT */
/* cu_symbols.h - interposed CUDA symbols (see symbols.h). Driver entry
 * points first, then the runtime's entry-point getters. */
#ifndef BYVAL_SHIM_CU_SYMBOLS_H
#define BYVAL_SHIM_CU_SYMBOLS_H

#define BYVAL_CU_SYMBOLS(X)         \
    X(cuIpcGetMemHandle)            \
    X(cuIpcOpenMemHandle)           \
    X(cuIpcOpenMemHandle_v2)        \
    X(cuIpcCloseMemHandle)          \
    X(cuMemFree)                    \
    X(cuMemFree_v2)                 \
    X(cuMemRelease)                 \
    X(cuMemUnmap)                   \
    X(cuMemMap)                     \
    X(cuMemExportToShareableHandle) \
    X(cuCtxDestroy)                 \
    X(cuCtxDestroy_v2)              \
    X(cuDevicePrimaryCtxRetain)     \
    X(cuDevicePrimaryCtxRelease)    \
    X(cuDevicePrimaryCtxRelease_v2) \
    X(cuDevicePrimaryCtxReset)      \
    X(cuDevicePrimaryCtxReset_v2)   \
    X(cuGetProcAddress)             \
    X(cuGetProcAddress_v2)          \
    X(cudaGetDriverEntryPoint)      \
    X(cudaGetDriverEntryPointByVersion)

#endif
