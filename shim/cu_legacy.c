/* SPDX-License-Identifier: MIT */
/*
 * cu_legacy.c - the import cache for legacy (cuMemAlloc) handles.
 *
 * Legacy handles are already copy-by-value, but each open+close cycle costs
 * the driver ~56 us (33 + 23 measured on H200). The cache keys on all 64
 * handle bytes (the driver puts a per-allocation identifier in them, so a
 * new allocation is a new key) plus the current context and the flags; a
 * re-open after close is a lookup. Lifetimes are the import core's
 * (cache/imports.h): the driver's bytes 8-11 carry the exporter's pid, so
 * an exporter that runs ipcbyval tells us about its frees through its
 * registry (it publishes the hash of the handle bytes it gave out); any
 * other exporter's closed mappings are kept within IPCBYVAL_CACHE_BYTES.
 * The driver's close runs with the mapping's context made current.
 * IPCBYVAL_CUDA_LEGACY_CACHE=0 restores pure pass-through.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cache/locks.h"
#include "cache/imports.h"
#include "handles/registry.h"
#include "shim/config.h"
#include "shim/cu.h"
#include "shim/init.h"
#include "shim/log.h"
#include "shim/stats.h"
#include "shim/track.h"

typedef struct cu_legacy {
    byval_import_t core; /* the lifecycle core's part (cache/imports.h) */
    CUdeviceptr ptr;
    CUcontext ctx;
    uint8_t handle[CU_IPC_HANDLE_SIZE];
} cu_legacy_t;

static byval_imports_t *legacy_cache;
static byval_once_t legacy_once = BYVAL_ONCE_INIT;

static void legacy_release(byval_import_t *b)
{
    cu_legacy_t *e = (cu_legacy_t *)b;
    const byval_cu_real_t *rl = byval_cu_real();
    if (rl && !__atomic_load_n(&b->dead, __ATOMIC_RELAXED)) {
        byval_enter();
        CUcontext saved = byval_cu_ctx_push(e->ctx);
        CUresult r = rl->ipc_close(e->ptr);
        byval_cu_ctx_pop(saved);
        byval_leave();
        if (r != CUDA_SUCCESS)
            BYVAL_LOG_DEBUG("cuIpcCloseMemHandle(0x%llx) on release: %s",
                            (unsigned long long)e->ptr, byval_cu_err(r));
    }
}

/* The key holds all 64 handle bytes: one key, one record. */
static int legacy_same(const byval_import_t *a, const byval_import_t *b)
{
    return 1;
}

/* Driver 580 puts the exporter's getpid() in bytes 8-11 (little endian). */
static void legacy_track(byval_import_t *b)
{
    const cu_legacy_t *e = (const cu_legacy_t *)b;
    uint32_t pid = (uint32_t)e->handle[8] | (uint32_t)e->handle[9] << 8 |
        (uint32_t)e->handle[10] << 16 | (uint32_t)e->handle[11] << 24;
    byval_track_pid(b, pid, byval_reg_key_bytes(e->handle, sizeof(e->handle)));
}

static byval_imports_ops_t legacy_ops = {
    .name = "cuda legacy import",
    .key_len = sizeof(byval_cu_key_t),
    .release = legacy_release,
    .same = legacy_same,
    .track = legacy_track,
    .shared_ptr = 1,
};

static void legacy_init(void)
{
    legacy_cache = byval_track_cache(&legacy_ops);
}

CUresult byval_cu_legacy_open(byval_cu_open_fn next, CUdeviceptr *pdptr, CUipcMemHandle h,
                              unsigned int flags)
{
    const byval_cu_real_t *rl = byval_cu_real();
    CUcontext ctx = NULL;
    byval_once(&legacy_once, legacy_init);
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
    unsigned long long t_open = BYVAL_LOG_T0();
    byval_lru_ref_t ref;
    cu_legacy_t *e = (cu_legacy_t *)byval_imports_get(legacy_cache, &key, &ref);
    if (e) {
        if (byval_imports_open(legacy_cache, &e->core, ref, (uintptr_t)e->ptr) < 0)
            return CUDA_ERROR_OUT_OF_MEMORY;
        BYVAL_STAT_INC(open_hits);
        byval_log_open("legacy ", BYVAL_ROUTE_HIT, 0, e->core.bytes, (void *)(uintptr_t)e->ptr,
                       t_open);
        *pdptr = e->ptr;
        return CUDA_SUCCESS;
    }
    BYVAL_STAT_INC(open_misses);
    CUdeviceptr p = 0, base = 0;
    size_t size = 0;
    uint64_t t0 = byval_stats_now_ns();
    byval_enter();
    CUresult r = next(&p, h, flags);
    if (r == CUDA_SUCCESS && rl->mem_get_address_range(&base, &size, p) != CUDA_SUCCESS)
        size = 0;
    byval_leave();
    BYVAL_STAT_ADD(miss_import_ns, byval_stats_now_ns() - t0);
    if (r != CUDA_SUCCESS)
        return r;
    e = calloc(1, sizeof(*e));
    if (!e) {
        byval_enter();
        rl->ipc_close(p);
        byval_leave();
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    e->ptr = p;
    e->ctx = ctx;
    memcpy(e->handle, h.reserved, sizeof(e->handle));
    e->core.bytes = size;
    e->core.ctx = (uintptr_t)ctx;
    e->core.addr = (uintptr_t)p;
    byval_import_t *out;
    /* A racing thread's open of the same handle got the same pointer
     * (the driver counts opens): the core keeps one and closes ours. */
    byval_imports_insert(legacy_cache, &key, &e->core, &out, &ref);
    e = (cu_legacy_t *)out;
    if (byval_imports_open(legacy_cache, out, ref, (uintptr_t)e->ptr) < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    byval_log_open("legacy ", BYVAL_ROUTE_DRIVER, 0, e->core.bytes, (void *)(uintptr_t)e->ptr,
                   t_open);
    *pdptr = e->ptr;
    return CUDA_SUCCESS;
}
