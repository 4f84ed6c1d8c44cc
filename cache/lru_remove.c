/* SPDX-License-Identifier: MIT */
/*
 * lru_remove.c - taking entries out of the cache (see lru.h): by key, by
 * handle, by predicate (remove_if keeps referenced entries as zombies;
 * purge_if releases them now; evict_if takes only unreferenced ones).
 * Every path runs under the cache's lock and hands the released slots to
 * the callbacks after unlocking.
 */
#include "cache/lru.h"

#include <pthread.h>

#include "cache/lru_internal.h"

int byval_lru_remove(byval_lru_t *lru, const void *key)
{
    if (!lru || !key)
        return BYVAL_LRU_NOENT;
    uint64_t w[MAX_WORDS];
    byval_lru_key_words(lru, key, w);
    uint32_t h = byval_lru_hash(key, lru->key_len);
    lru_chain_t c = {0, 0};
    byval_lock(&lru->lock);
    uint32_t i = byval_lru_find_live(lru, h, w);
    if (i)
        byval_lru_detach(lru, i, &c);
    byval_unlock(&lru->lock);
    byval_lru_release(lru, &c);
    return i ? BYVAL_LRU_OK : BYVAL_LRU_NOENT;
}

int byval_lru_remove_ref(byval_lru_t *lru, byval_lru_ref_t ref)
{
    uint32_t idx = (uint32_t)(ref >> 32), gen = (uint32_t)ref;
    lru_slot_t *s = lru ? byval_lru_slot_checked(lru, idx) : NULL;
    if (!s)
        return BYVAL_LRU_NOENT;
    lru_chain_t c = {0, 0};
    int rc = BYVAL_LRU_NOENT;
    byval_lock(&lru->lock);
    uint64_t st = LD(&s->state);
    if (ST_GEN(st) == gen && !(st & (ST_DEAD | ST_ZOMBIE))) {
        byval_lru_detach(lru, idx, &c);
        rc = BYVAL_LRU_OK;
    }
    byval_unlock(&lru->lock);
    byval_lru_release(lru, &c);
    return rc;
}

enum scan_mode { SCAN_REMOVE, SCAN_PURGE, SCAN_EVICT };

/* One pass over the slots under the lock, starting at the clock hand (so
 * that evict_if takes the entries the clock would take first). */
static size_t scan(byval_lru_t *lru, int (*pred)(void *, const void *, void *), void *ctx,
                   enum scan_mode mode)
{
    size_t matched = 0;
    if (!lru || !pred)
        return 0;
    lru_chain_t c = {0, 0};
    byval_lock(&lru->lock);
    uint32_t n = lru->next_new, start = lru->hand >= 1 && lru->hand < n ? lru->hand : 1;
    for (uint32_t k = 1; k < n; k++) {
        uint32_t i = start + k - 1 < n ? start + k - 1 : start + k - n;
        lru_slot_t *s = byval_lru_slot(lru, i);
        uint64_t st = LD(&s->state);
        if ((st & ST_DEAD) || ((st & ST_ZOMBIE) && mode != SCAN_PURGE))
            continue;
        if (mode == SCAN_EVICT && (ST_LOW(st) & ST_REFS))
            continue;
        int v = pred(ctx, s->key, LD(&s->value));
        if (v < 0)
            break;
        if (!v)
            continue;
        if (mode == SCAN_REMOVE)
            byval_lru_detach(lru, i, &c);
        else if (mode == SCAN_PURGE)
            byval_lru_purge(lru, i, &c);
        else if (!byval_lru_evict_slot(lru, i, &c))
            continue; /* referenced meanwhile */
        matched++;
    }
    byval_unlock(&lru->lock);
    byval_lru_release(lru, &c);
    return matched;
}

size_t byval_lru_remove_if(byval_lru_t *lru, int (*pred)(void *, const void *, void *), void *ctx)
{
    return scan(lru, pred, ctx, SCAN_REMOVE);
}

size_t byval_lru_purge_if(byval_lru_t *lru, int (*pred)(void *, const void *, void *), void *ctx)
{
    return scan(lru, pred, ctx, SCAN_PURGE);
}

size_t byval_lru_evict_if(byval_lru_t *lru, int (*pred)(void *, const void *, void *), void *ctx)
{
    return scan(lru, pred, ctx, SCAN_EVICT);
}
