/* SPDX-License-Identifier: MIT */
/*
 * lru.c - bounded cache with reference counts (see lru.h): creation,
 * lookups, inserts, removals, statistics (puts are in lru_put.c).
 *
 * Hits and the puts that leave an entry live take no lock (lru_internal.h
 * says how, lru_clock.c why the clock). Everything else - inserts,
 * removals, evictions, every put of a zombie, and every lookup the
 * lock-free probe could not settle - runs under the cache's one lock. One
 * lock is enough there: those paths come with a driver call that costs
 * microseconds, and they never hold the lock across a callback.
 *
 * Why not uthash: its UT_hash_handle is 56 bytes per entry, and a
 * lock-free reader needs type-stable memory that malloc'd entries are not.
 */
#include "cache/lru.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cache/lru_internal.h"
#include "cache/stripe.h"

static void count_hit(byval_lru_t *lru)
{
    byval_stripe_bump(&lru->stripes[byval_stripe()].hits);
}

static byval_lru_ref_t mkref(uint32_t idx, uint32_t gen)
{
    return (uint64_t)idx << 32 | gen; /* idx >= 1: never 0 */
}

/* ---- creation ----------------------------------------------------------- */

byval_lru_t *byval_lru_create(size_t capacity, size_t key_len, byval_lru_evict_fn evict, void *ctx)
{
    if (capacity < 1 || key_len < 1 || key_len > LRU_MAX_KEY) {
        errno = EINVAL;
        return NULL;
    }
    byval_lru_t *lru = NULL;
    if (posix_memalign((void **)&lru, BYVAL_LRU_CACHELINE, sizeof(*lru)) != 0) {
        errno = ENOMEM;
        return NULL;
    }
    memset(lru, 0, sizeof(*lru));
    lru->key_len = key_len;
    lru->key_words = (key_len + 7) / 8;
    lru->stride = sizeof(lru_slot_t) + lru->key_words * 8;
    lru->capacity = capacity;
    lru->evict = evict;
    lru->ctx = ctx;
    if (byval_lru_slab_init(lru) != 0) {
        free(lru);
        errno = ENOMEM;
        return NULL;
    }
    byval_lru_lock_init(lru);
    byval_lru_register(lru);
    return lru;
}

void byval_lru_destroy(byval_lru_t *lru)
{
    if (!lru)
        return;
    byval_lru_unregister(lru);
    lru_chain_t c = {0, 0};
    byval_lock(&lru->lock);
    for (uint32_t i = 1; i < lru->next_new; i++)
        if (!(LD(&byval_lru_slot(lru, i)->state) & ST_DEAD))
            byval_lru_chain_push(lru, &c, i);
    byval_unlock(&lru->lock);
    if (lru->evict)
        for (uint32_t i = c.head; i; i = LD(&byval_lru_slot(lru, i)->hnext))
            lru->evict(lru->ctx, byval_lru_slot(lru, i)->key, byval_lru_slot(lru, i)->value);
    byval_lru_slab_free(lru);
    byval_lock_destroy(&lru->lock);
    free(lru);
}

/* ---- lookups -------------------------------------------------------------- */

/* Lock-free: the live entry for w (its slot index, 0 when none was
 * found); with take_ref it is referenced (and its CLOCK set) by one CAS,
 * else only its CLOCK is set. *gen_p gets its generation. */
static uint32_t get_fast(byval_lru_t *lru, uint32_t h, const uint64_t *w, int take_ref,
                         void **value_p, uint32_t *gen_p)
{
    lru_probe_t p;
    byval_lru_probe_init(lru, h, &p);
    for (uint32_t i; (i = byval_lru_probe_next(&p, h)) != 0;) {
        lru_slot_t *s = byval_lru_slot(lru, i);
        uint64_t st = LD_ACQ(&s->state);
        if ((st & (ST_DEAD | ST_ZOMBIE)) || !byval_lru_key_eq(lru, s, w))
            continue;
        /* Seqlock read: the key and value loads are acquire loads, so the
         * state is read again (by the CAS or the load below) after them. */
        void *v = LD_ACQ(&s->value);
        if (take_ref) {
            uint32_t refs;
            if (!byval_lru_ref_cas(s, ST_GEN(st), 1, &refs))
                continue; /* removed or reused meanwhile */
        } else {
            uint64_t now = LD(&s->state);
            if (ST_GEN(now) != ST_GEN(st) || (now & (ST_DEAD | ST_ZOMBIE)))
                continue;
            if (!(now & ST_CLOCK)) /* best effort: a lost race is a use seen anyway */
                __atomic_compare_exchange_n(&s->state, &now, now | ST_CLOCK, 0, __ATOMIC_RELAXED,
                                            __ATOMIC_RELAXED);
        }
        *value_p = v;
        *gen_p = ST_GEN(st);
        return i;
    }
    return 0;
}

uint32_t byval_lru_find_live(byval_lru_t *lru, uint32_t h, const uint64_t *w)
{
    lru_probe_t p;
    byval_lru_probe_init(lru, h, &p);
    for (uint32_t i; (i = byval_lru_probe_next(&p, h)) != 0;) {
        lru_slot_t *s = byval_lru_slot(lru, i);
        if (!(LD(&s->state) & ST_ZOMBIE) && byval_lru_key_eq(lru, s, w))
            return i;
    }
    return 0;
}

/* get and get_ref: with ref_p (take_ref only), the handle of the entry
 * referenced, 0 on a miss. */
static int lru_get(byval_lru_t *lru, const void *key, int take_ref, void **value_p,
                   byval_lru_ref_t *ref_p)
{
    if (ref_p)
        *ref_p = 0;
    if (!lru || !key)
        return 0;
    uint64_t w[MAX_WORDS];
    byval_lru_key_words(lru, key, w);
    uint32_t h = byval_lru_hash(key, lru->key_len);
    void *v = NULL;
    uint32_t gen = 0, i = get_fast(lru, h, w, take_ref, &v, &gen);
    if (!i) {
        /* Absent, or the probe raced a writer: ask under the lock. */
        byval_lock(&lru->lock);
        i = byval_lru_find_live(lru, h, w);
        uint32_t refs;
        if (i) {
            lru_slot_t *s = byval_lru_slot(lru, i);
            uint64_t st = LD(&s->state);
            gen = ST_GEN(st);
            /* Under the lock a live entry cannot die: only refs move. */
            if (take_ref ? !byval_lru_ref_cas(s, gen, 1, &refs)
                         : (__atomic_fetch_or(&s->state, ST_CLOCK, __ATOMIC_RELAXED), 0))
                i = 0; /* 2^28 references: none more */
            v = LD(&s->value);
        }
        if (!i)
            lru->misses++;
        byval_unlock(&lru->lock);
        if (!i)
            return 0;
    }
    count_hit(lru);
    if (value_p)
        *value_p = v;
    if (ref_p)
        *ref_p = mkref(i, gen);
    return 1;
}

int byval_lru_get(byval_lru_t *lru, const void *key, int take_ref, void **value_p)
{
    return lru_get(lru, key, take_ref, value_p, NULL);
}

int byval_lru_get_ref(byval_lru_t *lru, const void *key, void **value_p, byval_lru_ref_t *ref_p)
{
    return lru_get(lru, key, 1, value_p, ref_p);
}

/* insert and insert_ref: with ref_p (take_ref only), the handle of the
 * entry referenced on OK and EXISTS, else 0. */
static int lru_insert(byval_lru_t *lru, const void *key, void *value, int take_ref,
                      void **existing_p, byval_lru_ref_t *ref_p)
{
    if (ref_p)
        *ref_p = 0;
    if (!lru || !key)
        return BYVAL_LRU_NOENT;
    uint64_t w[MAX_WORDS];
    byval_lru_key_words(lru, key, w);
    uint32_t h = byval_lru_hash(key, lru->key_len);
    lru_chain_t c = {0, 0};
    int rc;
    byval_lock(&lru->lock);
    for (;;) {
        uint32_t i = byval_lru_find_live(lru, h, w);
        if (i) {
            lru_slot_t *s = byval_lru_slot(lru, i);
            uint32_t refs;
            if (take_ref && !byval_lru_ref_cas(s, ST_GEN(LD(&s->state)), 1, &refs)) {
                rc = BYVAL_LRU_FULL; /* 2^28 references: none more */
                break;
            }
            if (existing_p)
                *existing_p = LD(&s->value);
            if (ref_p)
                *ref_p = mkref(i, ST_GEN(LD(&s->state)));
            rc = BYVAL_LRU_EXISTS;
            break;
        }
        /* Make room first, so that the bound holds at every instant. */
        if (lru->count < LD(&lru->capacity)) {
            i = byval_lru_slot_alloc(lru);
            if (!i) {
                rc = BYVAL_LRU_NOMEM;
                break;
            }
            if (byval_lru_slot_publish(lru, i, h, w, value, take_ref ? 1 : 0) != 0) {
                byval_lru_slot_free(lru, i);
                rc = BYVAL_LRU_NOMEM;
                break;
            }
            ST(&lru->count, lru->count + 1);
            if (lru->count > lru->high_water)
                ST(&lru->high_water, lru->count);
            lru->inserts++;
            if (ref_p) /* the generation moves only under the lock */
                *ref_p = mkref(i, ST_GEN(LD(&byval_lru_slot(lru, i)->state)));
            rc = BYVAL_LRU_OK;
            break;
        }
        if (!byval_lru_evict_one(lru, &c)) {
            rc = BYVAL_LRU_FULL;
            break;
        }
    }
    byval_unlock(&lru->lock);
    byval_lru_release(lru, &c);
    return rc;
}

int byval_lru_insert(byval_lru_t *lru, const void *key, void *value, int take_ref,
                     void **existing_p)
{
    return lru_insert(lru, key, value, take_ref, existing_p, NULL);
}

int byval_lru_insert_ref(byval_lru_t *lru, const void *key, void *value, void **existing_p,
                         byval_lru_ref_t *ref_p)
{
    return lru_insert(lru, key, value, 1, existing_p, ref_p);
}

/* ---- stats and capacity --------------------------------------------------- */

void byval_lru_stats(byval_lru_t *lru, byval_lru_stats_t *st)
{
    if (!st)
        return;
    memset(st, 0, sizeof(*st));
    if (!lru)
        return;
    for (int i = 0; i < BYVAL_STRIPES; i++)
        st->hits += LD(&lru->stripes[i].hits);
    byval_lock(&lru->lock);
    st->misses = lru->misses;
    st->inserts = lru->inserts;
    st->evictions = lru->evictions;
    st->removals = lru->removals;
    st->size = lru->count;
    st->high_water = lru->high_water;
    for (uint32_t i = 1; i < lru->next_new; i++) {
        uint64_t s = LD(&byval_lru_slot(lru, i)->state);
        st->referenced += !(s & (ST_DEAD | ST_ZOMBIE)) && (ST_LOW(s) & ST_REFS);
    }
    /* What the entries really cost: every slot chunk, every bucket array
     * (replaced ones too) and chunk directory, shared over the entries
     * held (one slot and bucket when empty). */
    size_t bytes = lru->nchunks * (lru->stride << lru->chunk_shift);
    for (lru_table_t *t = lru->table; t; t = t->retired)
        bytes += sizeof(*t) + (t->mask + 1) * sizeof(t->b[0]);
    for (lru_dir_t *d = lru->dir; d; d = d->retired)
        bytes += sizeof(*d) + d->cap * sizeof(d->chunk[0]);
    byval_unlock(&lru->lock);
    st->capacity = LD(&lru->capacity);
    st->bytes_per_entry =
        st->size ? (bytes + st->size - 1) / st->size : lru->stride + sizeof(uint64_t);
}

/* The bookkeeping's memory now, and per entry once full at capacity
 * (chunks full, the table at its final size): bytes_per_entry divides
 * what is allocated now by the entries held, which says little until the
 * cache fills. */
void byval_lru_memory(byval_lru_t *lru, size_t *now_p, size_t *full_per_entry_p)
{
    size_t now = 0, full = 0;
    byval_lock(&lru->lock);
    size_t per = (size_t)1 << lru->chunk_shift, cap = LD(&lru->capacity);
    size_t chunk = lru->stride << lru->chunk_shift;
    now += lru->nchunks * chunk;
    size_t chunks_full = (cap + per - 1) / per;
    full += (chunks_full > lru->nchunks ? chunks_full : lru->nchunks) * chunk;

    size_t tables = 0;
    for (lru_table_t *t = lru->table; t; t = t->retired)
        tables += sizeof(*t) + (t->mask + 1) * sizeof(t->b[0]);
    now += tables;
    /* The table doubles when an insert would pass a load of 7/8. */
    size_t size = lru->table->mask + 1;
    full += tables;
    while (cap * 8 > size * 7) {
        size *= 2;
        full += sizeof(lru_table_t) + size * sizeof(uint64_t);
    }

    size_t dirs = 0;
    for (lru_dir_t *d = lru->dir; d; d = d->retired)
        dirs += sizeof(*d) + d->cap * sizeof(d->chunk[0]);
    now += dirs;
    full += dirs;
    for (size_t c = lru->dir->cap; c < chunks_full; c *= 2)
        full += sizeof(lru_dir_t) + 2 * c * sizeof(unsigned char *);
    byval_unlock(&lru->lock);

    *now_p = now;
    *full_per_entry_p = cap ? (full + cap / 2) / cap : 0;
}

void byval_lru_set_capacity(byval_lru_t *lru, size_t capacity)
{
    if (!lru || capacity < 1)
        return;
    lru_chain_t c = {0, 0};
    byval_lock(&lru->lock);
    ST(&lru->capacity, capacity);
    byval_lru_trim_locked(lru, &c);
    byval_unlock(&lru->lock);
    byval_lru_release(lru, &c);
}
