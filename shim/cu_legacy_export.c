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

/* A get: the pointer (the key: its allocation's start once made), the
 * hash of the handle's bytes. */
typedef struct legacy_call {
    uint64_t start, key;
    const byval_cu_real_t *rl;
} legacy_call_t;

static byval_exports_t *published;
static byval_once_t published_once = BYVAL_ONCE_INIT;

static int same_handle(const byval_export_t *e, const void *arg)
{
    return e->items[0].key == ((const legacy_call_t *)arg)->key;
}

static byval_export_t *legacy_make(void *arg)
{
    legacy_call_t *c = arg;
    uint64_t ptr = c->start, size = 0, ctx = 0;
    byval_enter();
    int ok = byval_cu_attr_u64(c->rl, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, ptr, &c->start) == 0 &&
        byval_cu_attr_u64(c->rl, CU_POINTER_ATTRIBUTE_RANGE_SIZE, ptr, &size) == 0;
    if (ok && byval_cu_attr_u64(c->rl, CU_POINTER_ATTRIBUTE_CONTEXT, ptr, &ctx) != 0)
        ctx = 0; /* no context known: the export ends at the free alone */
    byval_leave();
    legacy_export_t *e;
    if (!ok || (c->start != ptr && byval_exports_hit(published, &c->start, c)) ||
        !(e = calloc(1, sizeof(*e))))
        return NULL;
    e->item = BYVAL_EXPORT_ITEM(c->key, -1, 0, size, 0);
    e->core.ctx = (uintptr_t)ctx;
    e->core.nitems = 1;
    e->core.items = &e->item;
    return &e->core;
}

/* The driver's handle needs nothing back. */
static const byval_backend_export_t legacy_ops = {.name = "cuda legacy export",
                                                  .key_len = sizeof(uint64_t),
                                                  .same = same_handle,
                                                  .make = legacy_make};

static void published_init(void)
{
    /* Read without the once by the free path: published with a release. */
    __atomic_store_n(&published, byval_export_table(&legacy_ops), __ATOMIC_RELEASE);
}

void byval_cu_legacy_published(const byval_cu_real_t *rl, const CUipcMemHandle *h, CUdeviceptr ptr)
{
    legacy_call_t c = {ptr, byval_reg_key_bytes(h->reserved, sizeof(h->reserved)), rl};
    byval_once(&published_once, published_init);
    if (published) /* the common repeat, an allocation's start, a hit */
        byval_exports_obtain(published, &c.start, &c);
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
