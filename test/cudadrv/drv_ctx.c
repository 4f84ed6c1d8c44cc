/* SPDX-License-Identifier: MIT */
/*
 * cudadrv: contexts. Primary contexts (one per device, never destroyed),
 * contexts from cuCtxCreate (pushed on creation) and the per-thread
 * current-context stack. CUDA 13 adds cuCtxGetDevice_v2 and
 * cuCtxSynchronize_v2, which take the context as an argument.
 */
#include "cudadrv.h"

#include <stdlib.h>
#include <string.h>

#define CTX_MAGIC 0x63747864u /* "dxtc" */
#define CTX_STACK 16

struct CUctx_st {
    unsigned magic;
    int device;
    int primary;
    unsigned flags;
};

#define PRIMARY(i) { CTX_MAGIC, i, 1, 0 }
static struct CUctx_st primary_ctx[CUDADRV_MAX_DEVICES] = {
    PRIMARY(0), PRIMARY(1), PRIMARY(2), PRIMARY(3),
    PRIMARY(4), PRIMARY(5), PRIMARY(6), PRIMARY(7),
};
#undef PRIMARY
_Static_assert(CUDADRV_MAX_DEVICES == 8, "one PRIMARY() per device");
static unsigned primary_refs[CUDADRV_MAX_DEVICES];

/* Contexts made by cuCtxCreate. A handle is checked by membership, never
 * dereferenced first, so a stale or random CUcontext is an error, not a
 * read of freed memory. Own lock: callers may hold cudadrv_lock. */
static pthread_mutex_t ctx_lock = PTHREAD_MUTEX_INITIALIZER;
static struct CUctx_st *ctx_list[64];

static __thread CUcontext ctx_stack[CTX_STACK];
static __thread int ctx_depth;

int cudadrv_ctx_device(CUcontext ctx)
{
    int dev = -1;

    if (!ctx)
        return -1;
    if (ctx >= &primary_ctx[0] && ctx < &primary_ctx[CUDADRV_MAX_DEVICES])
        return ctx->device < cudadrv_device_count() ? ctx->device : -1;
    pthread_mutex_lock(&ctx_lock);
    for (size_t i = 0; i < sizeof(ctx_list) / sizeof(ctx_list[0]); i++)
        if (ctx_list[i] == ctx && ctx->magic == CTX_MAGIC)
            dev = ctx->device;
    pthread_mutex_unlock(&ctx_lock);
    return dev;
}

CUcontext cudadrv_ctx_current(void)
{
    return ctx_depth > 0 ? ctx_stack[ctx_depth - 1] : NULL;
}

CUresult cudadrv_current_device(int *dev_p)
{
    int dev = cudadrv_ctx_device(cudadrv_ctx_current());

    if (dev < 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    *dev_p = dev;
    return CUDA_SUCCESS;
}

static CUresult ctx_create(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    CUresult rc = cudadrv_check_init();
    struct CUctx_st *c;
    size_t i;

    if (rc != CUDA_SUCCESS)
        return rc;
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    if (dev < 0 || dev >= cudadrv_device_count())
        return CUDA_ERROR_INVALID_DEVICE;
    if (ctx_depth == CTX_STACK)
        return CUDA_ERROR_OUT_OF_MEMORY;
    c = calloc(1, sizeof(*c));
    if (!c)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *c = (struct CUctx_st){ CTX_MAGIC, dev, 0, flags };
    pthread_mutex_lock(&ctx_lock);
    for (i = 0; i < sizeof(ctx_list) / sizeof(ctx_list[0]); i++) {
        if (!ctx_list[i]) {
            ctx_list[i] = c;
            break;
        }
    }
    pthread_mutex_unlock(&ctx_lock);
    if (i == sizeof(ctx_list) / sizeof(ctx_list[0])) {
        free(c);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    /* cuCtxCreate pushes the new context onto the thread's stack. */
    ctx_stack[ctx_depth++] = c;
    *pctx = c;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    return ctx_create(pctx, flags, dev);
}

CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    return ctx_create(pctx, flags, dev);
}

CUresult CUDAAPI cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *params,
                                int nparams, unsigned int flags, CUdevice dev)
{
    return ctx_create(pctx, flags, dev);
}

CUresult CUDAAPI cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params,
                                unsigned int flags, CUdevice dev)
{
    return ctx_create(pctx, flags, dev);
}

CUresult CUDAAPI cuCtxDestroy_v2(CUcontext ctx)
{
    CUresult rc = cudadrv_check_init();

    if (rc != CUDA_SUCCESS)
        return rc;
    /* Primary contexts are released, never destroyed. */
    if (cudadrv_ctx_device(ctx) < 0 || ctx->primary)
        return CUDA_ERROR_INVALID_CONTEXT;
    for (int i = 0; i < ctx_depth; i++) {
        if (ctx_stack[i] == ctx) {
            memmove(&ctx_stack[i], &ctx_stack[i + 1],
                    (size_t)(ctx_depth - i - 1) * sizeof(ctx_stack[0]));
            ctx_depth--;
            i--;
        }
    }
    pthread_mutex_lock(&ctx_lock);
    for (size_t i = 0; i < sizeof(ctx_list) / sizeof(ctx_list[0]); i++)
        if (ctx_list[i] == ctx)
            ctx_list[i] = NULL;
    pthread_mutex_unlock(&ctx_lock);
    ctx->magic = 0;
    free(ctx);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxDestroy(CUcontext ctx)
{
    return cuCtxDestroy_v2(ctx);
}

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    CUresult rc = cudadrv_check_init();

    if (rc != CUDA_SUCCESS)
        return rc;
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    if (dev < 0 || dev >= cudadrv_device_count())
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&cudadrv_lock);
    primary_refs[dev]++;
    pthread_mutex_unlock(&cudadrv_lock);
    *pctx = &primary_ctx[dev];
    return CUDA_SUCCESS;
}

/* The primary context keeps its handle (and the double its state) when
 * the last reference goes: only the count is checked. */
CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    CUresult rc = cudadrv_check_init();

    if (rc != CUDA_SUCCESS)
        return rc;
    if (dev < 0 || dev >= cudadrv_device_count())
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&cudadrv_lock);
    if (primary_refs[dev] == 0)
        rc = CUDA_ERROR_INVALID_CONTEXT;
    else
        primary_refs[dev]--;
    pthread_mutex_unlock(&cudadrv_lock);
    return rc;
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev)
{
    return cuDevicePrimaryCtxRelease_v2(dev);
}

CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx)
{
    CUresult rc = cudadrv_check_init();

    if (rc != CUDA_SUCCESS)
        return rc;
    if (ctx && cudadrv_ctx_device(ctx) < 0)
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
    if (cudadrv_ctx_device(ctx) < 0)
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

CUresult CUDAAPI cuCtxGetDevice(CUdevice *device)
{
    CUresult rc = cudadrv_check_init();
    int dev;

    if (rc != CUDA_SUCCESS)
        return rc;
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    rc = cudadrv_current_device(&dev);
    if (rc == CUDA_SUCCESS)
        *device = dev;
    return rc;
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
    if (cudadrv_ctx_device(ctx) < 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    *device = ctx->device;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSynchronize(void)
{
    CUresult rc = cudadrv_check_init();

    if (rc != CUDA_SUCCESS)
        return rc;
    return cudadrv_ctx_current() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

CUresult CUDAAPI cuCtxSynchronize_v2(CUcontext ctx)
{
    CUresult rc = cudadrv_check_init();

    if (rc != CUDA_SUCCESS)
        return rc;
    if (!ctx)
        return cuCtxSynchronize();
    return cudadrv_ctx_device(ctx) < 0 ? CUDA_ERROR_INVALID_CONTEXT : CUDA_SUCCESS;
}
