/* SPDX-License-Identifier: MIT */
/*
 * cu_export_fast.c - the export fast path: the handle last given for a
 * pointer, validated by one BUFFER_ID query (the driver gives a reused
 * address a new id), so a repeated cuIpcGetMemHandle on VMM memory costs
 * a lookup instead of the driver's failing call and a reservation walk.
 * A chunk mapped since the handle was made (anywhere: a counter) sends the
 * get to the reservation walk, as the pointer's extent may have grown. A
 * memo, not an export table: it holds no fd and nothing shared; the end of
 * an extent's export (cu_export.c) clears its reservation's pointers, so a
 * hit never hands out a handle of an ended export.
 */
#include <stdlib.h>

#include "cache/lru.h"
#include "shim/cu.h"

typedef struct cu_fast {
    uint64_t buffer_id;
    uint64_t mapgen; /* a chunk mapped since: the extent may be longer now */
    uint64_t reserve_start, reserve_size;
    CUipcMemHandle handle;
} cu_fast_t;

static byval_lru_t *fast_cache; /* key: the exported pointer */

static void fast_evicted(void *ctx, const void *key, void *value)
{
    free(value);
}

void byval_cu_fast_init(size_t capacity)
{
    fast_cache = byval_lru_create(capacity, sizeof(uint64_t), fast_evicted, NULL);
}

void byval_cu_fast_remember(CUdeviceptr ptr, uint64_t buffer_id, uint64_t mapgen,
                            uint64_t reserve_start, uint64_t reserve_size, const CUipcMemHandle *h)
{
    cu_fast_t *f = fast_cache ? malloc(sizeof(*f)) : NULL;
    if (!f)
        return;
    f->buffer_id = buffer_id;
    f->mapgen = mapgen;
    f->reserve_start = reserve_start;
    f->reserve_size = reserve_size;
    f->handle = *h;
    uint64_t key = ptr;
    void *existing;
    int rc = byval_lru_insert(fast_cache, &key, f, 0, &existing);
    if (rc == BYVAL_LRU_EXISTS) { /* a handle of an older extent: this one replaces it */
        byval_lru_remove(fast_cache, &key);
        rc = byval_lru_insert(fast_cache, &key, f, 0, &existing);
    }
    if (rc != BYVAL_LRU_OK)
        free(f);
}

int byval_cu_fast_lookup(const byval_cu_real_t *rl, CUdeviceptr ptr, uint64_t mapgen,
                         CUipcMemHandle *h)
{
    uint64_t key = ptr, id = 0;
    void *v;
    byval_lru_ref_t ref;
    if (!fast_cache || !byval_lru_get_ref(fast_cache, &key, &v, &ref))
        return 0;
    cu_fast_t *f = v;
    if (f->mapgen != mapgen) { /* a chunk mapped since: the walk decides */
        byval_lru_put_ref(fast_cache, ref);
        return 0;
    }
    int ok =
        byval_cu_attr_u64(rl, CU_POINTER_ATTRIBUTE_BUFFER_ID, ptr, &id) == 0 && id == f->buffer_id;
    if (ok)
        *h = f->handle;
    byval_lru_put_ref(fast_cache, ref);
    if (!ok)
        byval_lru_remove(fast_cache, &key); /* address reused by another allocation */
    return ok;
}

static int fast_overlaps(void *ctx, const void *key, void *value)
{
    const uint64_t *range = ctx;
    const cu_fast_t *f = value;
    return f->reserve_start < range[0] + range[1] && range[0] < f->reserve_start + f->reserve_size;
}

void byval_cu_fast_forget_range(CUdeviceptr ptr, size_t size)
{
    uint64_t range[2] = {ptr, size ? size : 1};
    if (fast_cache)
        byval_lru_remove_if(fast_cache, fast_overlaps, range);
}

static int fast_any(void *ctx, const void *key, void *value)
{
    return 1;
}

void byval_cu_fast_forget_all(void)
{
    if (fast_cache)
        byval_lru_remove_if(fast_cache, fast_any, NULL);
}
