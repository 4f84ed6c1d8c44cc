/* SPDX-License-Identifier: MIT */
/*
 * cudadrv: the per-thread current-context stack (cuCtxSetCurrent,
 * cuCtxPushCurrent, cuCtxPopCurrent, cuCtxGetCurrent) and the queries on
 * a context (device, id, synchronize; CUDA 13 adds cuCtxGetDevice_v2 and
 * cuCtxSynchronize_v2, which take the context as an argument). The
 * contexts themselves live in drv_ctx.c, which says what was measured on
 * real GPUs.
 */
#include "drv_ctx.h"

#include <string.h>

static __thread CUcontext ctx_stack[CTX_STACK];
static __thread int ctx_depth;

CUcontext cudadrv_ctx_current(void)
{
    return ctx_depth > 0 ? ctx_stack[ctx_depth - 1] : NULL;
}

CUresult cudadrv_ctx_push(CUcontext ctx)
{
    if (ctx_depth == CTX_STACK)
        return CUDA_ERROR_OUT_OF_MEMORY;
    ctx_stack[ctx_depth++] = ctx;
    return CUDA_SUCCESS;
}

int cudadrv_ctx_stack_full(void)
{
    return ctx_depth == CTX_STACK;
}

void cudadrv_ctx_forget(CUcontext ctx)
{
    for (int i = 0; i < ctx_depth; i++) {
        if (ctx_stack[i] == ctx) {
            memmove(&ctx_stack[i], &ctx_stack[i + 1],
                    (size_t)(ctx_depth - i - 1) * sizeof(ctx_stack[0]));
            ctx_depth--;
            i--;
        }
    }
}

/* An inactive primary context may be made current (its handle stays
 * valid); a destroyed cuCtxCreate context may not. */
static CUresult settable(CUcontext ctx)
{
    CUresult rc = cudadrv_ctx_check(ctx);

    return rc == CUDA_ERROR_CONTEXT_IS_DESTROYED && cudadrv_ctx_is_primary(ctx) ? CUDA_SUCCESS
           : rc == CUDA_SUCCESS                                    ? rc
                                                                   : CUDA_ERROR_INVALID_CONTEXT;
}

CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx)
{
    CUresult rc = cudadrv_check_init();

    if (rc != CUDA_SUCCESS)
        return rc;
    if (ctx && settable(ctx) != CUDA_SUCCESS)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!ctx) {
        if (ctx_depth > 0)
            ctx_depth--;
    } else if (ctx_depth == 0) {
        ctx_stack[ctx_depth++] = ctx;
    } else {
        ctx_stack[ctx_depth - 1] = ctx;
    }
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetCurrent(CUcontext *pctx)
{
    CUresult rc = cudadrv_check_init();

    if (rc != CUDA_SUCCESS)
        return rc;
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    *pctx = cudadrv_ctx_current();
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxPushCurrent_v2(CUcontext ctx)
{
    CUresult rc = cudadrv_check_init();

    if (rc != CUDA_SUCCESS)
        return rc;
    if (settable(ctx) != CUDA_SUCCESS)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (ctx_depth == CTX_STACK)
        return CUDA_ERROR_OUT_OF_MEMORY;
    ctx_stack[ctx_depth++] = ctx;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxPushCurrent(CUcontext ctx)
{
    return cuCtxPushCurrent_v2(ctx);
}

CUresult CUDAAPI cuCtxPopCurrent_v2(CUcontext *pctx)
{
    CUresult rc = cudadrv_check_init();

    if (rc != CUDA_SUCCESS)
        return rc;
    if (ctx_depth == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    ctx_depth--;
    if (pctx)
        *pctx = ctx_stack[ctx_depth];
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxPopCurrent(CUcontext *pctx)
{
    return cuCtxPopCurrent_v2(pctx);
}

/* The device a context belongs to. Measured on an H100 (driver 580): a
 * reset primary context still current tells its device (CUDA_SUCCESS)
 * while cuMemGetInfo, cuCtxSynchronize, cuCtxGetId and cuIpcOpenMemHandle
 * answer CUDA_ERROR_CONTEXT_IS_DESTROYED. */
static CUresult ctx_device(CUcontext ctx, CUdevice *device)
{
    CUresult rc = cudadrv_ctx_check(ctx);

    if (rc == CUDA_ERROR_CONTEXT_IS_DESTROYED && cudadrv_ctx_is_primary(ctx))
        rc = CUDA_SUCCESS;
    if (rc == CUDA_SUCCESS)
        *device = ctx->device;
    return rc;
}

CUresult CUDAAPI cuCtxGetDevice(CUdevice *device)
{
    CUresult rc = cudadrv_check_init();

    if (rc != CUDA_SUCCESS)
        return rc;
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    return ctx_device(cudadrv_ctx_current(), device);
}

/* CUDA 13: cuGetProcAddress("cuCtxGetDevice", 13000) hands out this one,
 * which takes the context as a second argument (NULL: the current one). */
CUresult CUDAAPI cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx)
{
    CUresult rc = cudadrv_check_init();

    if (rc != CUDA_SUCCESS)
        return rc;
    if (!ctx)
        return cuCtxGetDevice(device);
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    return ctx_device(ctx, device);
}

/* The context's id; CUDA_ERROR_CONTEXT_IS_DESTROYED for a destroyed or
 * reset one (H100, driver 580), CUDA_ERROR_INVALID_CONTEXT for no context. */
CUresult CUDAAPI cuCtxGetId(CUcontext ctx, unsigned long long *id)
{
    CUresult rc = cudadrv_check_init();

    if (rc != CUDA_SUCCESS)
        return rc;
    if (!id)
        return CUDA_ERROR_INVALID_VALUE;
    if (!ctx)
        ctx = cudadrv_ctx_current();
    rc = cudadrv_ctx_check(ctx);
    if (rc == CUDA_SUCCESS)
        *id = cudadrv_ctx_is_primary(ctx) ? 1u + (unsigned)ctx->device : 1000u + (unsigned)cudadrv_ctx_pool_index(ctx);
    return rc;
}

CUresult CUDAAPI cuCtxSynchronize(void)
{
    return cudadrv_need_ctx();
}

CUresult CUDAAPI cuCtxSynchronize_v2(CUcontext ctx)
{
    CUresult rc = cudadrv_check_init();

    if (rc != CUDA_SUCCESS)
        return rc;
    if (!ctx)
        return cuCtxSynchronize();
    return cudadrv_ctx_check(ctx);
}
