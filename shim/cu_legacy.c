/* SPDX-License-Identifier: MIT */
/*
 * cu_legacy.c - the import cache for legacy (cuMemAlloc) handles.
 *
 * Legacy handles are already copy-by-value, but each open+close cycle costs
 * the driver ~56 us (33 + 23 measured on H200). The cache keys on all 64
 * handle bytes (the driver puts a per-allocation identifier in them, so a
 * new allocation is a new key) plus the current context and the flags; a
 * re-open after close is a lookup. The driver's close runs on eviction,
 * with the entry's context made current. IPCBYVAL_CUDA_LEGACY_CACHE=0
 * restores pure pass-through.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cache/lru.h"
#include "shim/config.h"
#include "shim/cu.h"
#include "shim/init.h"
#include "shim/log.h"
#include "shim/stats.h"

typedef struct cu_legacy {
    CUdeviceptr ptr;
    CUcontext ctx;
} cu_legacy_t;

static byval_lru_t *legacy_cache;
static pthread_once_t legacy_once = PTHREAD_ONCE_INIT;

static void legacy_evicted(void *ctx, const void *key, void *value)
{
    cu_legacy_t *e = value;
    const byval_cu_real_t *rl = byval_cu_real();
    if (rl) {
        byval_enter();
        CUcontext saved = byval_cu_ctx_push(e->ctx);
        CUresult r = rl->ipc_close(e->ptr);
        byval_cu_ctx_pop(saved);
        byval_leave();
        if (r != CUDA_SUCCESS)
            BYVAL_LOG_DEBUG("cuIpcCloseMemHandle(0x%llx) on eviction: %s",
                            (unsigned long long)e->ptr, byval_cu_err(r));
    }
    free(e);
}

static void legacy_init(void)
{
    legacy_cache = byval_lru_create(byval_cfg.cache_size, sizeof(byval_cu_key_t), legacy_evicted,
                                    NULL);
    if (legacy_cache)
        byval_stats_register_cache("cuda legacy import", legacy_cache);
}

void byval_cu_legacy_put(byval_lru_ref_t ref)
{
    byval_lru_put_ref(legacy_cache, ref);
}

CUresult byval_cu_legacy_open(byval_cu_open_fn next, CUdeviceptr *pdptr, CUipcMemHandle h,
                              unsigned int flags)
{
    const byval_cu_real_t *rl = byval_cu_real();
    CUcontext ctx = NULL;
    pthread_once(&legacy_once, legacy_init);
    if (!rl || !legacy_cache || rl->ctx_get_current(&ctx) != CUDA_SUCCESS || !ctx) {
        BYVAL_STAT_INC(open_passthrough);
        return next(pdptr, h, flags);
    }
    byval_cu_key_t key;
    memset(&key, 0, sizeof(key));
    key.type = BYVAL_CU_KEY_LEGACY;
    key.flags = flags;
    key.ctx = (uintptr_t)ctx;
    memcpy(key.u.legacy, h.reserved, sizeof(key.u.legacy));

    BYVAL_STAT_INC(opens);
    void *v;
    byval_lru_ref_t ref;
    if (byval_lru_get_ref(legacy_cache, &key, &v, &ref)) {
        CUdeviceptr p = ((cu_legacy_t *)v)->ptr;
        if (byval_cu_ptr_ref(p, BYVAL_CU_KEY_LEGACY, ref, v) > 0) {
            BYVAL_STAT_INC(open_hits);
            *pdptr = p;
            return CUDA_SUCCESS;
        }
        byval_lru_put_ref(legacy_cache, ref);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    BYVAL_STAT_INC(open_misses);
    CUdeviceptr p = 0;
    uint64_t t0 = byval_stats_now_ns();
    byval_enter();
    CUresult r = next(&p, h, flags);
    byval_leave();
    BYVAL_STAT_ADD(miss_import_ns, byval_stats_now_ns() - t0);
    if (r != CUDA_SUCCESS)
        return r;
    cu_legacy_t *e = malloc(sizeof(*e));
    void *existing = NULL;
    int ins = BYVAL_LRU_NOMEM;
    if (e) {
        e->ptr = p;
        e->ctx = ctx;
        ins = byval_lru_insert_ref(legacy_cache, &key, e, &existing, &ref);
    }
    if (ins == BYVAL_LRU_EXISTS) {
        /* Raced with another thread: the driver refcounted our open. */
        free(e);
        byval_enter();
        rl->ipc_close(p);
        byval_leave();
        p = ((cu_legacy_t *)existing)->ptr;
        e = existing;
    } else if (ins != BYVAL_LRU_OK) {
        free(e);
        if (byval_cu_ptr_ref(p, BYVAL_CU_KEY_UNCACHED, 0, NULL) < 0) {
            byval_enter();
            rl->ipc_close(p);
            byval_leave();
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        *pdptr = p;
        return CUDA_SUCCESS;
    }
    if (byval_cu_ptr_ref(p, BYVAL_CU_KEY_LEGACY, ref, e) < 0) {
        byval_lru_put_ref(legacy_cache, ref);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *pdptr = p;
    return CUDA_SUCCESS;
}
