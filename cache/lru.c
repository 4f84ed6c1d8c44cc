/* SPDX-License-Identifier: MIT */
/*
 * lru.c - bounded LRU cache with reference counts (see lru.h).
 *
 * Why not uthash: its UT_hash_handle is 56 bytes and its only list is the
 * insertion-order list that iteration depends on. An O(1) LRU of
 * *unreferenced* entries needs its own two links, so a 40-byte key costs
 * 56 + 16 + 40 + value + refs = 124 bytes: a 144-byte malloc chunk, plus
 * uthash's 16-byte buckets. Here: one chain link, the two LRU links, value,
 * stamp, hash and refs are 48 bytes, 88 with the key: a 96-byte chunk
 * plus 8-16 bytes of bucket array (load factor 1/2 to 1).
 *
 * Why shards: a hit takes a lock; one lock for 16 threads would serialise
 * them. Keys are spread by hash over up to 16 shards, each with its own
 * lock, table and LRU list. The cache's semantics stay global:
 *  - the bound is one counter of live entries, reserved (CAS) before an
 *    entry enters any table, so it holds at every instant;
 *  - the eviction victim is the least recently used unreferenced entry of
 *    the whole cache: each shard publishes the use stamp of its LRU head,
 *    and the oldest of those heads (16 loads) is evicted;
 *  - FULL means what lru.h says: at capacity and no shard has an
 *    unreferenced entry.
 * No operation holds two shard locks: eviction from another shard drops
 * the inserting shard's lock first and looks the key up again after.
 *
 * Referenced entries removed by remove/remove_if become zombies: out of
 * lookups and of the bound, still in their bucket chain (flagged) so that
 * put finds them in O(1), released by their last put.
 */
#include "cache/lru.h"

#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cache/lru_internal.h"

#define LRU_MAX_SHARDS 16
#define LRU_MIN_PER_SHARD 16
#define LRU_MAX_KEY 1024

static lru_shard_t *shard_of(byval_lru_t *lru, uint32_t h)
{
    return &lru->shards[(h >> 24) & (lru->nshards - 1)];
}

/* ---- creation --------------------------------------------------------- */

byval_lru_t *byval_lru_create(size_t capacity, size_t key_len, byval_lru_evict_fn evict,
                              void *ctx)
{
    if (capacity < 1 || key_len < 1 || key_len > LRU_MAX_KEY) {
        errno = EINVAL;
        return NULL;
    }
    /* Small caches keep one shard: eviction then needs no stamps. */
    unsigned n = 1;
    while (n < LRU_MAX_SHARDS && capacity >= (size_t)n * 2 * LRU_MIN_PER_SHARD)
        n *= 2;
    size_t sz = sizeof(byval_lru_t) + n * sizeof(lru_shard_t);
    byval_lru_t *lru = NULL;
    if (posix_memalign((void **)&lru, BYVAL_LRU_CACHELINE, sz) != 0) {
        errno = ENOMEM;
        return NULL;
    }
    memset(lru, 0, sz);
    lru->nshards = n;
    lru->key_len = key_len;
    lru->capacity = capacity;
    lru->evict = evict;
    lru->ctx = ctx;
    for (unsigned i = 0; i < n; i++) {
        lru_shard_t *s = &lru->shards[i];
        s->nbuckets = 16;
        s->buckets = calloc(s->nbuckets, sizeof(*s->buckets));
        if (!s->buckets) {
            for (unsigned j = 0; j < i; j++) {
                free(lru->shards[j].buckets);
                pthread_mutex_destroy(&lru->shards[j].lock);
            }
            free(lru);
            errno = ENOMEM;
            return NULL;
        }
        s->head_stamp = BYVAL_LRU_NO_STAMP;
        byval_lru_lock_init(s);
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
                byval_lru_chain_append(&chain, &tail, e);
            }
        }
        free(s->buckets);
        s->buckets = NULL;
        pthread_mutex_unlock(&s->lock);
        pthread_mutex_destroy(&s->lock);
        byval_lru_release(lru, chain);
    }
    free(lru);
}

/* ---- operations ------------------------------------------------------- */

/* Take one reference: a referenced entry leaves the LRU list. */
static void entry_ref(lru_shard_t *s, lru_entry_t *e)
{
    if (e->refs++ == 0) {
        byval_lru_list_unlink(s, e);
        s->referenced++;
    }
}

int byval_lru_get(byval_lru_t *lru, const void *key, int take_ref, void **value_p)
{
    if (!lru || !key)
        return 0;
    uint32_t h = byval_lru_hash(key, lru->key_len);
    lru_shard_t *s = shard_of(lru, h);
    pthread_mutex_lock(&s->lock);
    lru_entry_t *e = byval_lru_find(s, key, lru->key_len, h);
    if (!e) {
        s->misses++;
        pthread_mutex_unlock(&s->lock);
        return 0;
    }
    s->hits++;
    if (take_ref) {
        entry_ref(s, e);
    } else if (e->refs == 0) {
        byval_lru_list_unlink(s, e); /* touch: most recently used goes last */
        byval_lru_list_push(lru, s, e);
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
    uint32_t h = byval_lru_hash(key, lru->key_len);
    lru_shard_t *s = shard_of(lru, h);
    lru_entry_t *n = malloc(sizeof(*n) + lru->key_len);
    if (!n)
        return BYVAL_LRU_NOMEM;
    memset(n, 0, sizeof(*n));
    n->hash = h;
    n->value = value;
    memcpy(n->key, key, lru->key_len);

    lru_entry_t *chain = NULL, *tail = NULL;
    int rc;
    pthread_mutex_lock(&s->lock);
    for (;;) {
        lru_entry_t *e = byval_lru_find(s, key, lru->key_len, h);
        if (e) {
            if (take_ref)
                entry_ref(s, e);
            if (existing_p)
                *existing_p = e->value;
            rc = BYVAL_LRU_EXISTS;
            break;
        }
        /* Make room first, so the bound holds at every instant. */
        if (byval_lru_reserve(lru)) {
            byval_lru_chain_add(s, n);
            s->size++;
            s->inserts++;
            if (take_ref) {
                n->refs = 1;
                s->referenced++;
            } else {
                byval_lru_list_push(lru, s, n);
            }
            n = NULL;
            rc = BYVAL_LRU_OK;
            break;
        }
        lru_shard_t *v = byval_lru_pick(lru);
        if (!v) {
            rc = BYVAL_LRU_FULL;
            break;
        }
        if (v == s) {
            byval_lru_evict_head(lru, s, &chain, &tail);
            continue;
        }
        /* One shard lock at a time; the key is looked up again after. */
        pthread_mutex_unlock(&s->lock);
        pthread_mutex_lock(&v->lock);
        if (v->lru_head)
            byval_lru_evict_head(lru, v, &chain, &tail);
        pthread_mutex_unlock(&v->lock);
        pthread_mutex_lock(&s->lock);
    }
    pthread_mutex_unlock(&s->lock);
    free(n);
    byval_lru_release(lru, chain);
    return rc;
}

/* Drop one reference of key's entry; with match, only of the entry that
 * holds value. Without match a zombie is preferred: a live entry with the
 * same key can only be newer than the zombie, so the zombie is the one an
 * older outstanding reference points to (see byval_lru_put_value). */
static int lru_put(byval_lru_t *lru, const void *key, const void *value, int match)
{
    if (!lru || !key)
        return BYVAL_LRU_NOENT;
    uint32_t h = byval_lru_hash(key, lru->key_len);
    lru_shard_t *s = shard_of(lru, h);
    lru_entry_t *chain = NULL, *tail = NULL, *e = NULL;
    int zombie = 0;
    pthread_mutex_lock(&s->lock);
    for (lru_entry_t *x = s->buckets[h & (s->nbuckets - 1)]; x; x = x->hnext) {
        if (x->hash != h || x->refs == 0 || (match && x->value != value) ||
            memcmp(x->key, key, lru->key_len) != 0)
            continue;
        e = x;
        if ((zombie = x->zombie) || !s->zombies)
            break; /* a zombie, or there is none to look for further */
    }
    if (!e) {
        pthread_mutex_unlock(&s->lock);
        return BYVAL_LRU_NOENT;
    }
    /* zombie read before the store to refs: reading a bit of the word
     * just written stalls store forwarding (~10 ns a put). */
    int left = (int)--e->refs, relisted = 0;
    if (left == 0 && zombie) {
        byval_lru_chain_del(s, e);
        s->zombies--;
        byval_lru_chain_append(&chain, &tail, e);
    } else if (left == 0) {
        s->referenced--;
        byval_lru_list_push(lru, s, e);
        relisted = 1;
    }
    pthread_mutex_unlock(&s->lock);
    /* Evictable again: the cache may be above a capacity that shrank while
     * every entry was referenced. */
    if (relisted && __atomic_load_n(&lru->count, __ATOMIC_RELAXED) >
                        __atomic_load_n(&lru->capacity, __ATOMIC_RELAXED))
        byval_lru_trim(lru, &chain, &tail);
    byval_lru_release(lru, chain);
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
    uint32_t h = byval_lru_hash(key, lru->key_len);
    lru_shard_t *s = shard_of(lru, h);
    lru_entry_t *chain = NULL, *tail = NULL;
    pthread_mutex_lock(&s->lock);
    lru_entry_t *e = byval_lru_find(s, key, lru->key_len, h);
    if (e)
        byval_lru_detach(lru, s, e, &chain, &tail);
    pthread_mutex_unlock(&s->lock);
    byval_lru_release(lru, chain);
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
                if (!e->zombie && pred(ctx, e->key, e->value)) {
                    byval_lru_detach(lru, s, e, &chain, &tail);
                    matched++;
                }
            }
        }
        pthread_mutex_unlock(&s->lock);
        byval_lru_release(lru, chain);
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
        st->referenced += s->referenced;
        buckets += s->nbuckets;
        pthread_mutex_unlock(&s->lock);
    }
    st->capacity = __atomic_load_n(&lru->capacity, __ATOMIC_RELAXED);
    st->high_water = __atomic_load_n(&lru->high_water, __ATOMIC_RELAXED);
    /* What one entry really costs: its malloc chunk (usable size plus
     * glibc's size word) and its share of the bucket arrays at the current
     * load (one bucket when empty). */
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
    lru_entry_t *chain = NULL, *tail = NULL;
    __atomic_store_n(&lru->capacity, capacity, __ATOMIC_RELAXED);
    byval_lru_trim(lru, &chain, &tail);
    byval_lru_release(lru, chain);
}
