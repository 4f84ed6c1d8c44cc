/* SPDX-License-Identifier: MIT */
/*
 * lru_put.c - dropping references (see lru.h): by handle, by key and
 * value, by key. A put that leaves its entry live is one CAS on the
 * entry's state word and takes no lock; the last put of a zombie, and a
 * put the lock-free probe could not settle, run under the cache's lock.
 */
#include "cache/lru.h"

#include <pthread.h>

#include "cache/lru_internal.h"

/* ---- puts ------------------------------------------------------------------ *
 * Three ways to name the entry: put_ref by its handle (one CAS on a live
 * entry, the lock for a zombie), put_value by key and value (a lock-free
 * probe first), put by key alone (locked, a zombie first). All end in
 * put_finish. */

/* What every put does after its reference went: a live entry evictable
 * again may let the cache down to a capacity that shrank while every
 * entry was referenced; released slots get their callbacks, unlocked. */
static int put_finish(byval_lru_t *lru, int left, int zombie, lru_chain_t *c)
{
    if (left == 0 && !zombie && LD(&lru->count) > LD(&lru->capacity)) {
        byval_lock(&lru->lock);
        byval_lru_trim_locked(lru, c);
        byval_unlock(&lru->lock);
    }
    byval_lru_release(lru, c);
    return left;
}

int byval_lru_put_ref(byval_lru_t *lru, byval_lru_ref_t ref)
{
    uint32_t idx = (uint32_t)(ref >> 32), gen = (uint32_t)ref, refs;
    lru_slot_t *s = lru ? byval_lru_slot_checked(lru, idx) : NULL;
    if (!s)
        return BYVAL_LRU_NOENT;
    if (byval_lru_ref_cas(s, gen, -1, &refs))
        return put_finish(lru, (int)refs, 0, &(lru_chain_t){0, 0});
    /* Not live: a zombie (it moves only under the lock, and a live entry
     * we hold a reference of can only become one), or a stale handle. */
    lru_chain_t c = {0, 0};
    int left = BYVAL_LRU_NOENT;
    byval_lock(&lru->lock);
    uint64_t st = LD(&s->state);
    if (ST_GEN(st) == gen && (st & ST_ZOMBIE) && !(st & ST_DEAD) && (ST_LOW(st) & ST_REFS))
        left = (int)byval_lru_zombie_put(lru, idx, st, &c);
    byval_unlock(&lru->lock);
    return put_finish(lru, left, 1, &c);
}

/* Lock-free put of a live entry holding value that keeps it live; -1
 * when the locked path must decide (zombie, not found, probe gave up). */
static int put_fast(byval_lru_t *lru, uint32_t h, const uint64_t *w, const void *value)
{
    lru_probe_t p;
    byval_lru_probe_init(lru, h, &p);
    for (uint32_t i; (i = byval_lru_probe_next(&p, h)) != 0;) {
        lru_slot_t *s = byval_lru_slot(lru, i);
        uint64_t st = LD_ACQ(&s->state);
        if ((st & (ST_DEAD | ST_ZOMBIE)) || !(ST_LOW(st) & ST_REFS) || LD_ACQ(&s->value) != value ||
            !byval_lru_key_eq(lru, s, w))
            continue;
        uint32_t refs;
        if (byval_lru_ref_cas(s, ST_GEN(st), -1, &refs))
            return (int)refs;
    }
    return -1;
}

/* Locked put: key's referenced entry - with match the one holding value,
 * else a zombie first (a live entry with the same key can only be newer,
 * so the zombie is what an older reference points to). */
static int put_locked(byval_lru_t *lru, uint32_t h, const uint64_t *w, const void *value, int match,
                      lru_chain_t *c, int *zombie_p)
{
    for (;;) {
        uint32_t found = 0;
        uint64_t fst = 0;
        lru_probe_t p;
        byval_lru_probe_init(lru, h, &p);
        for (uint32_t i; (i = byval_lru_probe_next(&p, h)) != 0;) {
            lru_slot_t *s = byval_lru_slot(lru, i);
            uint64_t st = LD(&s->state);
            if ((ST_LOW(st) & ST_REFS) && (!match || LD(&s->value) == value) &&
                byval_lru_key_eq(lru, s, w)) {
                found = i;
                fst = st;
                if ((st & ST_ZOMBIE) || !LD(&lru->zombies))
                    break;
            }
        }
        if (!found)
            return BYVAL_LRU_NOENT;
        uint32_t refs;
        if (fst & ST_ZOMBIE) {
            *zombie_p = 1;
            return (int)byval_lru_zombie_put(lru, found, fst, c);
        }
        if (byval_lru_ref_cas(byval_lru_slot(lru, found), ST_GEN(fst), -1, &refs))
            return (int)refs;
        /* A lock-free put took the last reference first: look again. */
    }
}

static int lru_put(byval_lru_t *lru, const void *key, const void *value, int match)
{
    if (!lru || !key)
        return BYVAL_LRU_NOENT;
    uint64_t w[MAX_WORDS];
    byval_lru_key_words(lru, key, w);
    uint32_t h = byval_lru_hash(key, lru->key_len);
    int left = match ? put_fast(lru, h, w, value) : -1, zombie = 0;
    lru_chain_t c = {0, 0};
    if (left < 0) {
        byval_lock(&lru->lock);
        left = put_locked(lru, h, w, value, match, &c, &zombie);
        byval_unlock(&lru->lock);
    }
    return put_finish(lru, left, zombie, &c);
}

int byval_lru_put(byval_lru_t *lru, const void *key)
{
    return lru_put(lru, key, NULL, 0);
}

int byval_lru_put_value(byval_lru_t *lru, const void *key, const void *value)
{
    return lru_put(lru, key, value, 1);
}
