/* SPDX-License-Identifier: MIT */
/*
 * drv_ctx.h - the double's contexts, shared by drv_ctx.c (their life:
 * create, destroy, primary retain/release/reset) and drv_ctx_current.c
 * (the per-thread current-context stack and the queries on a context).
 */
#ifndef CUDADRV_DRV_CTX_H
#define CUDADRV_DRV_CTX_H

#include "cudadrv.h"

#define CTX_MAGIC 0x63747864u /* "dxtc" */
#define CTX_STACK 16
#define CTX_POOL 64

enum ctx_state { CTX_FREE = 0, CTX_LIVE, CTX_DESTROYED };

struct CUctx_st {
    unsigned magic;
    int device;
    int primary;
    unsigned flags;
    enum ctx_state state; /* primary: LIVE while active, else DESTROYED */
};

/* drv_ctx.c */
int cudadrv_ctx_is_primary(CUcontext ctx);
/* The context's slot in the cuCtxCreate pool, or -1 (a primary). */
int cudadrv_ctx_pool_index(CUcontext ctx);
/* CUDA_SUCCESS, CUDA_ERROR_CONTEXT_IS_DESTROYED (a handle of ours that is
 * not live now) or CUDA_ERROR_INVALID_CONTEXT (not a context handle). */
CUresult cudadrv_ctx_check(CUcontext ctx);

/* drv_ctx_current.c: this thread's stack. */
/* Push ctx: CUDA_SUCCESS, or CUDA_ERROR_OUT_OF_MEMORY when full. */
CUresult cudadrv_ctx_push(CUcontext ctx);
/* 1 when the stack is full. */
int cudadrv_ctx_stack_full(void);
/* Take every entry of ctx off this thread's stack (it was destroyed). */
void cudadrv_ctx_forget(CUcontext ctx);

#endif
