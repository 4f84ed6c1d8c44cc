/* SPDX-License-Identifier: MIT */
/*
 * cu_legacy_export.c - the exporter's side of legacy (cuMemAlloc) handles.
 *
 * The driver's legacy handle is already by value and passes through
 * untouched; what ipcbyval adds is telling importers when the allocation
 * behind it is freed, so that they release their closed cached mappings
 * of it at once (importers find our registry through the pid the driver
 * puts in the handle). One entry per allocation start: a repeated get is
 * one pointer-attribute call and a lookup.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cache/lru.h"
#include "handles/registry.h"
#include "shim/config.h"
#include "shim/cu.h"
#include "shim/init.h"
#include "shim/transport.h"

typedef struct legacy_export {
    uint64_t key; /* the registry's: a hash of the handle bytes */
} legacy_export_t;

static byval_lru_t *published;
static pthread_once_t published_once = PTHREAD_ONCE_INIT;
static size_t published_live;

static void unpublished(void *ctx, const void *key, void *value)
{
    legacy_export_t *e = value;
    __atomic_fetch_sub(&published_live, 1, __ATOMIC_RELAXED);
    byval_export_unpublish(e->key, 0);
    free(e);
}

static void published_init(void)
{
    published = byval_lru_create(byval_cfg.export_cache_size, sizeof(uint64_t), unpublished, NULL);
}

/* Is (start -> key) published? The entry is read under a reference: a
 * racing free may remove it. */
static int published_has(uint64_t start, uint64_t key)
{
    void *v;
    byval_lru_ref_t ref;
    if (!byval_lru_get_ref(published, &start, &v, &ref))
        return 0;
    int same = ((legacy_export_t *)v)->key == key;
    byval_lru_put_ref(published, ref);
    return same;
}

void byval_cu_legacy_published(const byval_cu_real_t *rl, const CUipcMemHandle *h, CUdeviceptr ptr)
{
    uint64_t start = ptr, size = 0;
    pthread_once(&published_once, published_init);
    uint64_t key = byval_reg_key_bytes(h->reserved, sizeof(h->reserved));
    /* The common repeat: the handle of an allocation's start. */
    if (published && published_has(start, key))
        return;
    byval_enter();
    int ok = byval_cu_attr_u64(rl, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, ptr, &start) == 0 &&
             byval_cu_attr_u64(rl, CU_POINTER_ATTRIBUTE_RANGE_SIZE, ptr, &size) == 0;
    byval_leave();
    if (!published || !ok)
        return;
    if (start != ptr && published_has(start, key))
        return; /* published already */
    legacy_export_t *e = malloc(sizeof(*e));
    if (!e)
        return;
    e->key = key;
    byval_export_publish(key, 0, 0, size);
    byval_lru_remove(published, &start); /* another allocation at that start before */
    void *existing;
    if (byval_lru_insert(published, &start, e, 0, &existing) == BYVAL_LRU_OK) {
        __atomic_fetch_add(&published_live, 1, __ATOMIC_RELAXED);
    } else {
        byval_export_unpublish(key, 0);
        free(e);
    }
}

void byval_cu_legacy_freed(CUdeviceptr ptr)
{
    uint64_t start = ptr;
    if (published && __atomic_load_n(&published_live, __ATOMIC_RELAXED))
        byval_lru_remove(published, &start);
}
