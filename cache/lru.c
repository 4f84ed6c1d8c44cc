/* SPDX-License-Identifier: MIT */
/*
 * lru.c - bounded LRU cache with reference counts (see lru.h).
 *
 * Why not uthash: its UT_hash_handle is 56 bytes and its only list is the
 * insertion-order list that iteration depends on, so an O(1) LRU of
 * *unreferenced* entries needs 16 more bytes: 120 + 48-byte key > 128
 * bytes per entry. A chained table with one next pointer per entry and
 * one bucket pointer per entry costs 88 + 8 bytes for the same key.
 *
 * Why shards: a cache hit takes the lock; one lock for 16 threads would
 * serialise them. Keys are spread over up to 16 shards by hash, each with
 * its own lock, table, LRU list and share of the capacity. The bound is
 * global (the shares add up to it); LRU order and "full" are per shard.
 *
 * Only unreferenced entries sit on the LRU list, so eviction takes the
 * list head: O(1). Referenced entries that are removed become zombies:
 * out of the table, on a per-shard list, released by their last put.
 */
#include "cache/lru.h"

#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cache/lru_internal.h"

#define LRU_MAX_SHARDS 16
#define LRU_MIN_PER_SHARD 64

static lru_shard_t *shard_of(byval_lru_t *lru, uint32_t h)
{
    return &lru->shards[(h >> 24) & (lru->nshards - 1)];
}

/* ---- creation --------------------------------------------------------- */

static void shard_caps(byval_lru_t *lru, size_t capacity)
{
    for (unsigned i = 0; i < lru->nshards; i++)
        lru->shards[i].capacity = capacity / lru->nshards + (i < capacity % lru->nshards);
    lru->capacity = capacity;
}

byval_lru_t *byval_lru_create(size_t capacity, size_t key_len, byval_lru_evict_fn evict,
                              void *ctx)
{
    if (capacity < 1 || key_len < 1 || key_len > 1024) {
        errno = EINVAL;
        return NULL;
    }
    unsigned n = 1;
    while (n < LRU_MAX_SHARDS && capacity / (n * 2) >= LRU_MIN_PER_SHARD)
        n *= 2;
    byval_lru_t *lru = calloc(1, sizeof(*lru) + n * sizeof(lru_shard_t));
    if (!lru)
        return NULL;
    lru->nshards = n;
    lru->key_len = key_len;
    lru->evict = evict;
    lru->ctx = ctx;
    shard_caps(lru, capacity);
    for (unsigned i = 0; i < n; i++) {
        lru_shard_t *s = &lru->shards[i];
        pthread_mutex_init(&s->lock, NULL);
        s->nbuckets = 16;
        s->buckets = calloc(s->nbuckets, sizeof(*s->buckets));
        if (!s->buckets) {
            for (unsigned j = 0; j <= i; j++)
                free(lru->shards[j].buckets);
            free(lru);
            return NULL;
        }
    }
    byval_lru_register(lru);
    return lru;
}

void byval_lru_destroy(byval_lru_t *lru)
{
    if (!lru)
        return;
    byval_lru_unregister(lru);
    for (unsigned i = 0; i < lru->nshards; i++) {
        lru_shard_t *s = &lru->shards[i];
        lru_entry_t *chain = NULL, *tail = NULL;
        pthread_mutex_lock(&s->lock);
        for (size_t b = 0; b < s->nbuckets; b++) {
            for (lru_entry_t *e = s->buckets[b], *nx; e; e = nx) {
                nx = e->hnext;
                lru_list_append(&chain, &tail, e);
            }
        }
        for (lru_entry_t *z = s->zombies, *nx; z; z = nx) {
            nx = z->hnext;
            lru_list_append(&chain, &tail, z);
        }
        free(s->buckets);
        s->buckets = NULL;
        pthread_mutex_unlock(&s->lock);
        pthread_mutex_destroy(&s->lock);
        lru_release_chain(lru, chain);
    }
    free(lru);
}

/* ---- operations ------------------------------------------------------- */

int byval_lru_get(byval_lru_t *lru, const void *key, int take_ref, void **value_p)
{
    if (!lru || !key)
        return 0;
    uint32_t h = lru_hash(key, lru->key_len);
    lru_shard_t *s = shard_of(lru, h);
    pthread_mutex_lock(&s->lock);
    lru_entry_t *e = lru_table_find(s, key, lru->key_len, h);
    if (!e) {
        s->misses++;
        pthread_mutex_unlock(&s->lock);
        return 0;
    }
    s->hits++;
    if (take_ref) {
        if (e->refs++ == 0) {
            lru_list_unlink(s, e); /* referenced entries leave the LRU list */
            s->referenced++;
        }
    } else if (e->refs == 0) {
        lru_list_unlink(s, e); /* touch: most recently used goes last */
        lru_list_append(&s->lru_head, &s->lru_tail, e);
    }
    if (value_p)
        *value_p = e->value;
    pthread_mutex_unlock(&s->lock);
    return 1;
}

int byval_lru_insert(byval_lru_t *lru, const void *key, void *value, int take_ref,
                     void **existing_p)
{
    if (!lru || !key)
        return BYVAL_LRU_NOENT;
    uint32_t h = lru_hash(key, lru->key_len);
    lru_shard_t *s = shard_of(lru, h);
    lru_entry_t *n = malloc(sizeof(*n) + lru->key_len);
    if (!n)
        return BYVAL_LRU_NOMEM;
    memset(n, 0, sizeof(*n));
    n->hash = h;
    n->value = value;
    memcpy(n->key, key, lru->key_len);

    pthread_mutex_lock(&s->lock);
    lru_entry_t *e = lru_table_find(s, key, lru->key_len, h);
    if (e) {
        if (take_ref && e->refs++ == 0) {
            lru_list_unlink(s, e);
            s->referenced++;
        }
        if (existing_p)
            *existing_p = e->value;
        pthread_mutex_unlock(&s->lock);
        free(n);
        return BYVAL_LRU_EXISTS;
    }
    /* Make room first, so the bound holds at every instant. */
    lru_entry_t *evicted = s->capacity ? lru_shard_trim(s, s->capacity - 1) : NULL;
    if (s->size >= s->capacity) {
        pthread_mutex_unlock(&s->lock);
        free(n);
        lru_release_chain(lru, evicted);
        return BYVAL_LRU_FULL;
    }
    lru_table_insert(s, n);
    s->inserts++;
    if (take_ref) {
        n->refs = 1;
        s->referenced++;
    } else {
        lru_list_append(&s->lru_head, &s->lru_tail, n);
    }
    pthread_mutex_unlock(&s->lock);
    lru_release_chain(lru, evicted);
    return BYVAL_LRU_OK;
}

/* Drop one reference of key's entry; with match, only of the entry that
 * holds value (a zombie and a newer live entry may share a key). */
static int lru_put(byval_lru_t *lru, const void *key, const void *value, int match)
{
    if (!lru || !key)
        return BYVAL_LRU_NOENT;
    uint32_t h = lru_hash(key, lru->key_len);
    lru_shard_t *s = shard_of(lru, h);
    pthread_mutex_lock(&s->lock);
    /* A removed-while-referenced entry is the one an outstanding reference
     * points to (a live entry with its key can only be newer): put it first. */
    lru_entry_t *z = s->zombies ? lru_zombie_find(s, key, lru->key_len, value, match) : NULL;
    if (z) {
        int left = (int)--z->refs;
        if (left == 0) {
            lru_zombie_unlink(s, z);
            s->zombie_count--;
            z->next = NULL;
        }
        pthread_mutex_unlock(&s->lock);
        if (left == 0)
            lru_release_chain(lru, z);
        return left;
    }
    lru_entry_t *e = lru_table_find(s, key, lru->key_len, h);
    if (!e || e->refs == 0 || (match && e->value != value)) {
        pthread_mutex_unlock(&s->lock);
        return BYVAL_LRU_NOENT;
    }
    int left = (int)--e->refs;
    lru_entry_t *evicted = NULL;
    if (left == 0) {
        s->referenced--;
        lru_list_append(&s->lru_head, &s->lru_tail, e);
        evicted = lru_shard_trim(s, s->capacity); /* capacity may have shrunk */
    }
    pthread_mutex_unlock(&s->lock);
    lru_release_chain(lru, evicted);
    return left;
}

int byval_lru_put(byval_lru_t *lru, const void *key)
{
    return lru_put(lru, key, NULL, 0);
}

int byval_lru_put_value(byval_lru_t *lru, const void *key, const void *value)
{
    return lru_put(lru, key, value, 1);
}

int byval_lru_remove(byval_lru_t *lru, const void *key)
{
    if (!lru || !key)
        return BYVAL_LRU_NOENT;
    uint32_t h = lru_hash(key, lru->key_len);
    lru_shard_t *s = shard_of(lru, h);
    lru_entry_t *chain = NULL, *tail = NULL;
    pthread_mutex_lock(&s->lock);
    lru_entry_t *e = lru_table_find(s, key, lru->key_len, h);
    if (e)
        lru_shard_detach(s, e, &chain, &tail);
    pthread_mutex_unlock(&s->lock);
    lru_release_chain(lru, chain);
    return e ? BYVAL_LRU_OK : BYVAL_LRU_NOENT;
}

size_t byval_lru_remove_if(byval_lru_t *lru, int (*pred)(void *, const void *, void *),
                           void *ctx)
{
    size_t matched = 0;
    if (!lru || !pred)
        return 0;
    for (unsigned i = 0; i < lru->nshards; i++) {
        lru_shard_t *s = &lru->shards[i];
        lru_entry_t *chain = NULL, *tail = NULL;
        pthread_mutex_lock(&s->lock);
        for (size_t b = 0; b < s->nbuckets; b++) {
            for (lru_entry_t *e = s->buckets[b], *nx; e; e = nx) {
                nx = e->hnext;
                if (pred(ctx, e->key, e->value)) {
                    lru_shard_detach(s, e, &chain, &tail);
                    matched++;
                }
            }
        }
        pthread_mutex_unlock(&s->lock);
        lru_release_chain(lru, chain);
    }
    return matched;
}

void byval_lru_stats(byval_lru_t *lru, byval_lru_stats_t *st)
{
    if (!st)
        return;
    memset(st, 0, sizeof(*st));
    if (!lru)
        return;
    size_t buckets = 0;
    for (unsigned i = 0; i < lru->nshards; i++) {
        lru_shard_t *s = &lru->shards[i];
        pthread_mutex_lock(&s->lock);
        st->hits += s->hits;
        st->misses += s->misses;
        st->inserts += s->inserts;
        st->evictions += s->evictions;
        st->removals += s->removals;
        st->size += s->size;
        st->high_water += s->high_water;
        st->referenced += s->referenced;
        buckets += s->nbuckets;
        pthread_mutex_unlock(&s->lock);
    }
    st->capacity = __atomic_load_n(&lru->capacity, __ATOMIC_RELAXED);
    /* What one entry really costs: its malloc chunk plus its share of the
     * bucket arrays at the current load (at least one bucket each). */
    lru_entry_t *probe = malloc(sizeof(*probe) + lru->key_len);
    size_t chunk = probe ? malloc_usable_size(probe) + sizeof(size_t) : 0;
    free(probe);
    size_t per_bucket = st->size ? (buckets * sizeof(void *) + st->size - 1) / st->size
                                 : sizeof(void *);
    st->bytes_per_entry = chunk + per_bucket;
}

void byval_lru_set_capacity(byval_lru_t *lru, size_t capacity)
{
    if (!lru || capacity < 1)
        return;
    __atomic_store_n(&lru->capacity, capacity, __ATOMIC_RELAXED);
    for (unsigned i = 0; i < lru->nshards; i++) {
        lru_shard_t *s = &lru->shards[i];
        pthread_mutex_lock(&s->lock);
        s->capacity = capacity / lru->nshards + (i < capacity % lru->nshards);
        lru_entry_t *chain = lru_shard_trim(s, s->capacity);
        pthread_mutex_unlock(&s->lock);
        lru_release_chain(lru, chain);
    }
}
