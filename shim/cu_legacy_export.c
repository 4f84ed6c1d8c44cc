/* SPDX-License-Identifier: MIT */
/*
 * cu_legacy_export.c - the exporter's side of legacy (cuMemAlloc) handles.
 *
 * The driver's legacy handle is already by value and passes through
 * untouched; what ipcbyval adds is telling importers when the allocation
 * behind it is freed, so that they release their closed cached mappings
 * of it at once (importers find our registry through the pid the driver
 * puts in the handle). One entry per allocation start: a repeated get is
 * one pointer-attribute call and a lookup. cuMemAlloc memory is context
 * state (the driver frees it with its context), so each export records
 * its allocation's context and ends when that context is destroyed,
 * reset or released for the last time (cu_ctx.c), before the driver
 * frees the memory.
 */
#include <pthread.h>
#include <stdlib.h>

#include "cache/locks.h"
#include "cache/exports.h"
#include "handles/registry.h"
#include "shim/config.h"
#include "shim/cu.h"
#include "shim/init.h"
#include "cache/transport.h"

typedef struct legacy_export {
    byval_export_t core;      /* first: cache/exports.h */
    byval_export_item_t item; /* its registry entry: a hash of the handle bytes */
} legacy_export_t;

static byval_exports_t *published;
static byval_once_t published_once = BYVAL_ONCE_INIT;

/* Withdrawn already; the driver's handle needs nothing back. */
static void legacy_end(byval_export_t *core)
{
    free(core);
}

static const byval_exports_ops_t legacy_ops = {"cuda legacy export", sizeof(uint64_t), legacy_end};

static void published_init(void)
{
    /* Read without the once by the free path: published with a release. */
    __atomic_store_n(&published, byval_export_table(&legacy_ops), __ATOMIC_RELEASE);
}

/* Is (start -> key) published? The export is read under a reference: a
 * racing free may end it. */
static int published_has(uint64_t start, uint64_t key)
{
    byval_lru_ref_t ref;
    legacy_export_t *e = (legacy_export_t *)byval_exports_get(published, &start, &ref);
    if (!e)
        return 0;
    int same = e->item.key == key;
    byval_exports_unget(published, ref);
    return same;
}

void byval_cu_legacy_published(const byval_cu_real_t *rl, const CUipcMemHandle *h, CUdeviceptr ptr)
{
    uint64_t start = ptr, size = 0, ctx = 0;
    byval_once(&published_once, published_init);
    uint64_t key = byval_reg_key_bytes(h->reserved, sizeof(h->reserved));
    /* The common repeat: the handle of an allocation's start. */
    if (published && published_has(start, key))
        return;
    byval_enter();
    int ok = byval_cu_attr_u64(rl, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, ptr, &start) == 0 &&
        byval_cu_attr_u64(rl, CU_POINTER_ATTRIBUTE_RANGE_SIZE, ptr, &size) == 0;
    if (ok && byval_cu_attr_u64(rl, CU_POINTER_ATTRIBUTE_CONTEXT, ptr, &ctx) != 0)
        ctx = 0; /* no context known: the export ends at the free alone */
    byval_leave();
    if (!published || !ok)
        return;
    if (start != ptr && published_has(start, key))
        return; /* published already */
    legacy_export_t *e = calloc(1, sizeof(*e));
    if (!e)
        return;
    e->item = (byval_export_item_t){.key = key, .fd = -1, .size = size};
    e->core.ctx = (uintptr_t)ctx;
    e->core.nitems = 1;
    e->core.items = &e->item;
    if (byval_exports_start(published, &e->core) != 0) {
        byval_exports_discard(&e->core);
        return;
    }
    for (int tries = 0; tries < 2; tries++) {
        byval_export_t *other = NULL;
        byval_lru_ref_t ref;
        int rc = byval_exports_insert(published, &start, &e->core, &other, &ref);
        if (rc != BYVAL_LRU_EXISTS) {
            byval_exports_unget(published, ref);
            return; /* kept, or not kept and withdrawn */
        }
        int same = ((legacy_export_t *)other)->item.key == key;
        byval_exports_unget(published, ref);
        if (same) { /* a racing get published it first: share it */
            byval_exports_discard(&e->core);
            return;
        }
        byval_exports_end(published, &start); /* another allocation at that start before */
    }
    byval_exports_discard(&e->core);
}

void byval_cu_legacy_freed(CUdeviceptr ptr)
{
    uint64_t start = ptr;
    byval_exports_t *x = __atomic_load_n(&published, __ATOMIC_ACQUIRE);
    if (byval_exports_live(x))
        byval_exports_end(x, &start);
}

size_t byval_cu_legacy_ctx_gone(CUcontext ctx)
{
    byval_exports_t *x = __atomic_load_n(&published, __ATOMIC_ACQUIRE);
    return ctx && byval_exports_live(x) ? byval_exports_end_ctx(x, (uintptr_t)ctx) : 0;
}
