/* SPDX-License-Identifier: MIT */
/*
 * cu_ctx.c - CUDA context destruction: the mappings ipcbyval keeps in a
 * context are released before the driver destroys it.
 *
 * Why: cudaDeviceReset() keeps the primary context's handle value and
 * cuCtxDestroy + cuCtxCreate may hand out the same value again, so a
 * cached mapping keyed by the context would be found again after its
 * memory went with the old context. cuCtxDestroy names its context; a
 * primary context's reset names a device (its context is found with
 * GetState and a retain/release pair that cannot destroy it), and its
 * release destroys it only when it drops the last retain: counted here,
 * and checked after the call (inactive now: destroyed, the mappings of it
 * are forgotten, as their memory went with it).
 *
 * What goes with a context: its cuMemAlloc memory, so the legacy exports
 * of it end first (their registry entries withdrawn: importers release
 * their closed mappings and a re-open reaches the driver, which refuses
 * it as natively), then our mappings in it. VMM memory is no context's
 * (an H100 kept a mapping after a reset): its exports live on.
 */
#include "cache/imports.h"
#include "shim/config.h"
#include "shim/cu.h"
#include "shim/init.h"
#include "shim/log.h"

#define CU_EXPORT __attribute__((visibility("default")))
#define MAX_DEVICES 64

/* Retains of each device's primary context seen through our wrappers. */
static int retains[MAX_DEVICES];

#define ACTIVE() (byval_init() && byval_cfg.cuda)

/* The primary context of dev while it is active, else NULL. */
static CUcontext primary_of(const byval_cu_real_t *rl, CUdevice dev)
{
    unsigned flags = 0;
    int on = 0;
    CUcontext ctx = NULL;
    if (!rl->primary_get_state || !rl->primary_retain || !rl->primary_release_v2)
        return NULL;
    byval_enter();
    if (rl->primary_get_state(dev, &flags, &on) == CUDA_SUCCESS && on &&
        rl->primary_retain(&ctx, dev) == CUDA_SUCCESS)
        rl->primary_release_v2(dev); /* ours: it was active, so not the last */
    byval_leave();
    return ctx;
}

void byval_cu_context_dying(CUcontext ctx)
{
    if (!ctx || !ACTIVE())
        return;
    size_t ended = byval_cu_legacy_ctx_gone(ctx);
    size_t n = byval_imports_purge_ctx((uintptr_t)ctx);
    if (ended || n)
        BYVAL_LOG_DEBUG("context %p: ended %zu export%s and released %zu mapping%s of it before "
                        "the driver destroys it",
                        (void *)ctx, ended, ended == 1 ? "" : "s", n, n == 1 ? "" : "s");
}

/* After a release: destroyed (inactive now) though the count did not say
 * so (retains we did not see)? Its mappings are gone with it. */
static void released(const byval_cu_real_t *rl, CUdevice dev, CUcontext ctx, int purged)
{
    unsigned flags = 0;
    int on = 1;
    if (dev >= 0 && dev < MAX_DEVICES) { /* one decrement, never below 0, under races */
        int n = __atomic_load_n(&retains[dev], __ATOMIC_RELAXED);
        while (n > 0 &&
               !__atomic_compare_exchange_n(&retains[dev], &n, n - 1, 1, __ATOMIC_RELAXED,
                                            __ATOMIC_RELAXED))
            ;
    }
    if (purged || !ctx || !rl->primary_get_state)
        return;
    byval_enter();
    int ok = rl->primary_get_state(dev, &flags, &on) == CUDA_SUCCESS;
    byval_leave();
    if (ok && !on) { /* too late to end them first: at least now */
        byval_cu_legacy_ctx_gone(ctx);
        byval_imports_forget_ctx((uintptr_t)ctx);
    }
}

static CUresult primary_release(CUresult (*real)(CUdevice), CUdevice dev)
{
    const byval_cu_real_t *rl = byval_cu_real();
    if (!ACTIVE())
        return real(dev);
    CUcontext ctx = primary_of(rl, dev);
    int last =
        dev >= 0 && dev < MAX_DEVICES && __atomic_load_n(&retains[dev], __ATOMIC_RELAXED) == 1;
    if (ctx && last)
        byval_cu_context_dying(ctx);
    CUresult r = real(dev);
    if (r == CUDA_SUCCESS)
        released(rl, dev, ctx, ctx && last);
    return r;
}

static CUresult primary_reset(CUresult (*real)(CUdevice), CUdevice dev)
{
    if (ACTIVE()) {
        byval_cu_context_dying(primary_of(byval_cu_real(), dev)); /* NULL: none */
        if (dev >= 0 && dev < MAX_DEVICES)
            __atomic_store_n(&retains[dev], 0, __ATOMIC_RELAXED);
    }
    return real(dev);
}

static CUresult ctx_destroy(CUresult (*real)(CUcontext), CUcontext ctx)
{
    byval_cu_context_dying(ctx);
    return real(ctx);
}

CU_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    const byval_cu_real_t *rl = byval_cu_real();
    if (!rl || !rl->primary_retain)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = rl->primary_retain(pctx, dev);
    if (r == CUDA_SUCCESS && dev >= 0 && dev < MAX_DEVICES)
        __atomic_add_fetch(&retains[dev], 1, __ATOMIC_RELAXED);
    return r;
}

/* The exported entry points: each passes the driver's function of its
 * version to the helper above. */
#define CTX_ENTRY(name, helper, type, slot)                                         \
    CU_EXPORT CUresult name(type arg)                                               \
    {                                                                               \
        const byval_cu_real_t *rl = byval_cu_real();                                \
        return rl && rl->slot ? helper(rl->slot, arg) : CUDA_ERROR_NOT_INITIALIZED; \
    }

CTX_ENTRY(cuDevicePrimaryCtxRelease_v2, primary_release, CUdevice, primary_release_v2)
CTX_ENTRY(cuDevicePrimaryCtxRelease, primary_release, CUdevice, primary_release)
CTX_ENTRY(cuDevicePrimaryCtxReset_v2, primary_reset, CUdevice, primary_reset_v2)
CTX_ENTRY(cuDevicePrimaryCtxReset, primary_reset, CUdevice, primary_reset)
CTX_ENTRY(cuCtxDestroy_v2, ctx_destroy, CUcontext, ctx_destroy_v2)
CTX_ENTRY(cuCtxDestroy, ctx_destroy, CUcontext, ctx_destroy)
