/* SPDX-License-Identifier: MIT */
/*
 * cudadrv: contexts. Primary contexts (one per device) and contexts from
 * cuCtxCreate (pushed on creation onto the per-thread current-context
 * stack, drv_ctx_current.c, which also answers the queries on a context).
 *
 * Lifetimes, as measured on an H100 with driver 580.159.04 (CUDA 13.0):
 * - cuCtxDestroy frees the context's cuMemAlloc memory and closes its
 *   legacy IPC mappings (cuMemGetAddressRange then says NOT_FOUND,
 *   cuMemFree and cuIpcCloseMemHandle INVALID_VALUE). VMM allocations,
 *   reservations and mappings are not context state (cuda.h says so of
 *   cuMemCreate; a mapping made while the primary context was current was
 *   still mapped, readable and RW after cuDevicePrimaryCtxReset).
 * - The driver reuses context handle values: 28 of 64 cuCtxCreate +
 *   cuCtxDestroy cycles returned a value seen before. The double makes
 *   this deterministic and as hard on callers as possible: cuCtxCreate
 *   returns the most recently destroyed value first.
 * - cuDevicePrimaryCtxReset destroys the primary context's state (as
 *   above) and leaves it inactive (cuDevicePrimaryCtxGetState: active 0)
 *   but does not release it: a retain count of 1 before a reset needed
 *   two releases after one more retain, and a third release failed with
 *   CUDA_ERROR_INVALID_CONTEXT. The last cuDevicePrimaryCtxRelease does
 *   the same destruction. A later retain activates it again with the
 *   SAME handle value.
 * - While an inactive primary context is current, calls that need a
 *   context fail with CUDA_ERROR_CONTEXT_IS_DESTROYED (cuMemAlloc and
 *   cuMemGetInfo returned 709 after the reset and after the last
 *   release); cuCtxGetCurrent still returns it. The same error is given
 *   for a destroyed cuCtxCreate context still current to another thread
 *   (cuda.h), until its handle value is reused.
 * Destroyed memory is replaced by inaccessible address space that the
 * double keeps reserved (up to CUDADRV_DEAD_MAX ranges), so a stale
 * pointer faults on the CPU and makes the copy calls fail with
 * CUDA_ERROR_ILLEGAL_ADDRESS, instead of reaching a later allocation.
 */
#include "drv_ctx.h"

#define PRIMARY(i) { CTX_MAGIC, i, 1, 0, CTX_DESTROYED }
static struct CUctx_st primary_ctx[CUDADRV_MAX_DEVICES] = {
    PRIMARY(0), PRIMARY(1), PRIMARY(2), PRIMARY(3),
    PRIMARY(4), PRIMARY(5), PRIMARY(6), PRIMARY(7),
};
#undef PRIMARY
_Static_assert(CUDADRV_MAX_DEVICES == 8, "one PRIMARY() per device");
static unsigned primary_refs[CUDADRV_MAX_DEVICES];

/* Contexts made by cuCtxCreate live in a fixed pool, so a stale or random
 * CUcontext is checked by address and never read from freed memory.
 * Destroyed slots are reused last-in first-out. Lock order: cudadrv_lock
 * before ctx_lock (callers of cudadrv_ctx_device may hold cudadrv_lock). */
static pthread_mutex_t ctx_lock = PTHREAD_MUTEX_INITIALIZER;
static struct CUctx_st pool[CTX_POOL];
static int free_stack[CTX_POOL];
static int nfree, used_slots;

int cudadrv_ctx_is_primary(CUcontext ctx)
{
    return ctx >= &primary_ctx[0] && ctx < &primary_ctx[CUDADRV_MAX_DEVICES];
}

static int is_pooled(CUcontext ctx)
{
    return ctx >= &pool[0] && ctx < &pool[CTX_POOL];
}

int cudadrv_ctx_pool_index(CUcontext ctx)
{
    return is_pooled(ctx) ? (int)(ctx - pool) : -1;
}

CUresult cudadrv_ctx_check(CUcontext ctx)
{
    CUresult rc = CUDA_ERROR_INVALID_CONTEXT;

    if (!ctx)
        return rc;
    if (cudadrv_ctx_is_primary(ctx) && ctx->device >= cudadrv_device_count())
        return rc;
    if (!cudadrv_ctx_is_primary(ctx) && !is_pooled(ctx))
        return rc;
    pthread_mutex_lock(&ctx_lock);
    if (ctx->state == CTX_LIVE)
        rc = CUDA_SUCCESS;
    else if (ctx->state == CTX_DESTROYED || cudadrv_ctx_is_primary(ctx))
        rc = CUDA_ERROR_CONTEXT_IS_DESTROYED;
    pthread_mutex_unlock(&ctx_lock);
    return rc;
}

int cudadrv_ctx_device(CUcontext ctx)
{
    return cudadrv_ctx_check(ctx) == CUDA_SUCCESS ? ctx->device : -1;
}

CUresult cudadrv_need_ctx(void)
{
    CUresult rc = cudadrv_check_init();

    if (rc != CUDA_SUCCESS)
        return rc;
    return cudadrv_ctx_check(cudadrv_ctx_current());
}

CUresult cudadrv_current_device(int *dev_p)
{
    CUcontext ctx = cudadrv_ctx_current();
    CUresult rc = cudadrv_ctx_check(ctx);

    if (rc == CUDA_SUCCESS)
        *dev_p = ctx->device;
    return rc;
}

static CUresult ctx_create(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    CUresult rc = cudadrv_check_init();
    struct CUctx_st *c = NULL;

    if (rc != CUDA_SUCCESS)
        return rc;
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    if (dev < 0 || dev >= cudadrv_device_count())
        return CUDA_ERROR_INVALID_DEVICE;
    if (cudadrv_ctx_stack_full())
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&ctx_lock);
    if (nfree > 0)
        c = &pool[free_stack[--nfree]];
    else if (used_slots < CTX_POOL)
        c = &pool[used_slots++];
    if (c)
        *c = (struct CUctx_st){ CTX_MAGIC, dev, 0, flags, CTX_LIVE };
    pthread_mutex_unlock(&ctx_lock);
    if (!c)
        return CUDA_ERROR_OUT_OF_MEMORY;
    /* cuCtxCreate pushes the new context onto the thread's stack. */
    cudadrv_ctx_push(c);
    *pctx = c;
    cudadrv_trace("cuCtxCreate(dev %d) = %p", dev, (void *)c);
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
    /* Primary contexts are released or reset, never destroyed. */
    if (!ctx || !is_pooled(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_lock(&cudadrv_lock);
    pthread_mutex_lock(&ctx_lock);
    if (ctx->state != CTX_LIVE) {
        rc = CUDA_ERROR_INVALID_CONTEXT;
    } else {
        ctx->state = CTX_DESTROYED;
        free_stack[nfree++] = (int)(ctx - pool);
    }
    pthread_mutex_unlock(&ctx_lock);
    if (rc == CUDA_SUCCESS)
        cudadrv_ctx_release_state(ctx);
    pthread_mutex_unlock(&cudadrv_lock);
    if (rc != CUDA_SUCCESS)
        return rc;
    /* Popped from this thread's stack; other threads keep it current and
     * get CUDA_ERROR_CONTEXT_IS_DESTROYED. */
    cudadrv_ctx_forget(ctx);
    cudadrv_trace("cuCtxDestroy(%p)", (void *)ctx);
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
    pthread_mutex_lock(&ctx_lock);
    primary_refs[dev]++;
    primary_ctx[dev].state = CTX_LIVE; /* activated again after a reset */
    pthread_mutex_unlock(&ctx_lock);
    *pctx = &primary_ctx[dev];
    return CUDA_SUCCESS;
}

/* Destroys the primary context's state. release: drop a reference first
 * (CUDA_ERROR_INVALID_CONTEXT when there is none) and destroy only when it
 * was the last. */
static CUresult primary_down(CUdevice dev, int release)
{
    CUresult rc = cudadrv_check_init();
    int destroy = 0;

    if (rc != CUDA_SUCCESS)
        return rc;
    if (dev < 0 || dev >= cudadrv_device_count())
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&cudadrv_lock);
    pthread_mutex_lock(&ctx_lock);
    if (release && primary_refs[dev] == 0) {
        rc = CUDA_ERROR_INVALID_CONTEXT;
    } else {
        if (release)
            primary_refs[dev]--;
        if ((!release || primary_refs[dev] == 0) && primary_ctx[dev].state == CTX_LIVE) {
            primary_ctx[dev].state = CTX_DESTROYED;
            destroy = 1;
        }
    }
    pthread_mutex_unlock(&ctx_lock);
    if (destroy)
        cudadrv_ctx_release_state(&primary_ctx[dev]);
    pthread_mutex_unlock(&cudadrv_lock);
    cudadrv_trace("cuDevicePrimaryCtx%s(%d) = %d%s", release ? "Release" : "Reset", dev,
                  (int)rc, destroy ? ", state destroyed" : "");
    return rc;
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    return primary_down(dev, 1);
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev)
{
    return primary_down(dev, 1);
}

CUresult CUDAAPI cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    return primary_down(dev, 0);
}

CUresult CUDAAPI cuDevicePrimaryCtxReset(CUdevice dev)
{
    return primary_down(dev, 0);
}

CUresult CUDAAPI cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    CUresult rc = cudadrv_check_init();

    if (rc != CUDA_SUCCESS)
        return rc;
    if (!flags || !active)
        return CUDA_ERROR_INVALID_VALUE;
    if (dev < 0 || dev >= cudadrv_device_count())
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&ctx_lock);
    *flags = primary_ctx[dev].flags;
    *active = primary_ctx[dev].state == CTX_LIVE;
    pthread_mutex_unlock(&ctx_lock);
    return CUDA_SUCCESS;
}

/* Flags are kept for cuDevicePrimaryCtxGetState; they change nothing. */
CUresult CUDAAPI cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags)
{
    CUresult rc = cudadrv_check_init();

    if (rc != CUDA_SUCCESS)
        return rc;
    if (dev < 0 || dev >= cudadrv_device_count())
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&ctx_lock);
    primary_ctx[dev].flags = flags;
    pthread_mutex_unlock(&ctx_lock);
    return CUDA_SUCCESS;
}

/* Before CUDA 11 the flags of an active primary context were fixed. */
CUresult CUDAAPI cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags)
{
    unsigned old;
    int active;
    CUresult rc = cuDevicePrimaryCtxGetState(dev, &old, &active);

    if (rc != CUDA_SUCCESS)
        return rc;
    if (active)
        return CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE;
    return cuDevicePrimaryCtxSetFlags_v2(dev, flags);
}

