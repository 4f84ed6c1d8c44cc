/* SPDX-License-Identifier: MIT */
/*
 * cu_legacy_export.c - the CUDA legacy (cuMemAlloc) export backend. The
 * driver's handle is by value already and passes through; one export per
 * allocation start publishes it (keyed by a hash of the handle bytes) so
 * that importers release their closed mappings of it when it is freed or
 * its context goes (cu_ctx.c), before the driver frees the memory.
 */
#include <stdlib.h>

#include "cache/exports.h"
#include "cache/locks.h"
#include "handles/registry.h"
#include "shim/cu.h"
#include "shim/init.h"
#include "shim/transport.h"

typedef struct legacy_export {
    byval_export_t core;
    byval_export_item_t item;
} legacy_export_t;

static byval_exports_t *published;
static byval_once_t published_once = BYVAL_ONCE_INIT;

static void legacy_end(byval_export_t *core)
{
    free(core); /* the driver's handle needs nothing back */
}

static int same_handle(const byval_export_t *e, const void *key)
{
    return ((const legacy_export_t *)e)->item.key == *(const uint64_t *)key;
}

static const byval_backend_export_t legacy_ops = {"cuda legacy export", sizeof(uint64_t),
                                                  legacy_end, same_handle};

static void published_init(void)
{
    /* Read without the once by the free path: published with a release. */
    __atomic_store_n(&published, byval_export_table(&legacy_ops), __ATOMIC_RELEASE);
}

/* Is (start -> key) published? */
static int published_has(uint64_t start, uint64_t key)
{
    byval_lru_ref_t ref;
    if (!byval_exports_find(published, &start, &key, &ref))
        return 0;
    byval_exports_unget(published, ref);
    return 1;
}

void byval_cu_legacy_published(const byval_cu_real_t *rl, const CUipcMemHandle *h, CUdeviceptr ptr)
{
    uint64_t start = ptr, size = 0, ctx = 0;
    byval_once(&published_once, published_init);
    uint64_t key = byval_reg_key_bytes(h->reserved, sizeof(h->reserved));
    if (!published || published_has(start, key)) /* the common repeat: an allocation's start */
        return;
    byval_enter();
    int ok = byval_cu_attr_u64(rl, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, ptr, &start) == 0 &&
        byval_cu_attr_u64(rl, CU_POINTER_ATTRIBUTE_RANGE_SIZE, ptr, &size) == 0;
    if (ok && byval_cu_attr_u64(rl, CU_POINTER_ATTRIBUTE_CONTEXT, ptr, &ctx) != 0)
        ctx = 0; /* no context known: the export ends at the free alone */
    byval_leave();
    legacy_export_t *e;
    if (!ok || (start != ptr && published_has(start, key)) || !(e = calloc(1, sizeof(*e))))
        return;
    e->item = (byval_export_item_t){.key = key, .fd = -1, .size = size};
    e->core.ctx = (uintptr_t)ctx;
    e->core.nitems = 1;
    e->core.items = &e->item;
    byval_export_t *kept;
    byval_lru_ref_t ref;
    if (byval_exports_keep(published, &start, &e->core, &key, &kept, &ref) == 1)
        byval_exports_discard(&e->core); /* a racing get published it first */
    byval_exports_unget(published, ref);
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
