/* SPDX-License-Identifier: MIT */
/*
 * symbols.h - the one list of interposed symbols (X-macros).
 *
 * From these lists derive: the exported wrappers' declarations, the table
 * dlsym() consults to hand out wrappers, and test/integration's check that
 * every listed symbol is exported and routed (test_symbols.sh).
 * X(name) for every symbol; the wrapper is the exported function `name`.
 */
#ifndef BYVAL_SHIM_SYMBOLS_H
#define BYVAL_SHIM_SYMBOLS_H

#define BYVAL_ZE_SYMBOLS(X)                   \
    X(zeMemGetIpcHandle)                      \
    X(zeMemOpenIpcHandle)                     \
    X(zeMemCloseIpcHandle)                    \
    X(zeMemPutIpcHandle)                      \
    X(zeMemFree)                              \
    X(zeMemFreeExt)                           \
    X(zeMemGetIpcHandleWithProperties)        \
    X(zeMemGetFileDescriptorFromIpcHandleExp) \
    X(zeMemGetIpcHandleFromFileDescriptorExp) \
    X(zeContextDestroy)                       \
    X(zeEventPoolCreate)                      \
    X(zeEventPoolGetIpcHandle)                \
    X(zeEventPoolOpenIpcHandle)               \
    X(zeEventPoolCloseIpcHandle)              \
    X(zeEventPoolPutIpcHandle)                \
    X(zeEventPoolDestroy)                     \
    X(zeDriverGetExtensionFunctionAddress)    \
    X(zeGetMemProcAddrTable)                  \
    X(zeGetDriverProcAddrTable)               \
    X(zeGetContextProcAddrTable)              \
    X(zeGetEventPoolProcAddrTable)            \
    X(zeGetMemExpProcAddrTable)

#ifdef BYVAL_HAVE_CUDA
#include "shim/cu_symbols.h"
#else
#define BYVAL_CU_SYMBOLS(X)
#endif

#define BYVAL_ALL_SYMBOLS(X) BYVAL_ZE_SYMBOLS(X) BYVAL_CU_SYMBOLS(X)

/* The wrapper for an interposed name, NULL if not ours. */
void *byval_symbol_wrapper(const char *name);

/* The real dlsym (glibc's), never our interposer. */
void *byval_real_dlsym(void *handle, const char *name);

#endif
