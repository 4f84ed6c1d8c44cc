/* SPDX-License-Identifier: MIT */
/*
 * cudadrv_check.h - what the self-check of the CUDA driver test double
 * (cudadrv_check.c) shares with its parts: the CHECK counter, the double's
 * own symbols, and one function per part:
 *   cudadrv_check.c      entry points and versions, error names, fork, main
 *   cudadrv_check_mem.c  legacy and VMM memory, pointer attributes, memory
 *                        accounting
 *   cudadrv_check_ctx.c  context lifetimes (created and primary)
 *   cudadrv_check_ipc.c  IPC across processes: by value, the importer's
 *                        reset, the churn of the lifetime issue
 */
#ifndef CUDADRV_CHECK_H
#define CUDADRV_CHECK_H

#include <cuda.h>
#include <stdio.h>

#undef cuDevicePrimaryCtxReset
CUresult CUDAAPI cuDevicePrimaryCtxReset(CUdevice dev);

#define MiB ((size_t)1 << 20)
#define TOTAL_MEM (64 * MiB)

extern int check_passed, check_failed;

#define CHECK(cond)                                                           \
    do {                                                                      \
        if (cond) {                                                           \
            check_passed++;                                                   \
        } else {                                                              \
            check_failed++;                                                   \
            fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);   \
        }                                                                     \
    } while (0)

/* The double's symbol name (its test-only entry points included). */
void *sym(const char *name);

/* A VMM allocation's properties on device 0, shareable as types. */
CUmemAllocationProp vmm_prop(CUmemAllocationHandleType types);

void check_legacy(void);
void check_vmm(void);
void check_host_pointer(void);
void check_meminfo(void);
void check_contexts(CUcontext primary);
void check_primary_lifetime(CUcontext primary0);
void check_cross_process(void);
void check_churn(int hold);

#endif
