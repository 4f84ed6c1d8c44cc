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

/* Word-at-a-time multiply-xorshift: keys are short, fixed-size and on the
 * hot path of every hit (88 bytes for CUDA keys: byte-wise FNV cost ~90 ns
 * there). Tail bytes, if any, are folded in one word. */
static uint32_t lru_hash(const void *key, size_t len)
{
    const unsigned char *p = key;
    uint64_t h = 0x9E3779B97F4A7C15ull ^ len;
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 0xFF51AFD7ED558CCDull;
        h ^= h >> 29;
    }
    if (i < len) {
        uint64_t w = 0;
        memcpy(&w, p + i, len - i);
        h = (h ^ w) * 0xFF51AFD7ED558CCDull;
    }
    h ^= h >> 32;
    h *= 0xC4CEB9FE1A85EC53ull;
    h ^= h >> 29;
    return (uint32_t)h;
}

static lru_shard_t *shard_of(byval_lru_t *lru, uint32_t h)
{
    return &lru->shards[(h >> 24) & (lru->nshards - 1)];
}

/* ---- LRU list of unreferenced entries -------------------------------- */

static void list_unlink(lru_shard_t *s, lru_entry_t *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        s->lru_head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        s->lru_tail = e->prev;
    e->prev = e->next = NULL;
}

static void list_append(lru_entry_t **head, lru_entry_t **tail, lru_entry_t *e)
{
    e->next = NULL;
    e->prev = *tail;
    if (*tail)
        (*tail)->next = e;
    else
        *head = e;
    *tail = e;
}

/* ---- chained hash table ---------------------------------------------- */

static lru_entry_t **table_slot(lru_shard_t *s, const lru_entry_t *e)
{
    return &s->buckets[e->hash & (s->nbuckets - 1)];
}

static lru_entry_t *table_find(lru_shard_t *s, const void *key, size_t len, uint32_t h)
{
    for (lru_entry_t *e = s->buckets[h & (s->nbuckets - 1)]; e; e = e->hnext)
        if (e->hash == h && memcmp(e->key, key, len) == 0)
            return e;
    return NULL;
}

static void table_remove(lru_shard_t *s, lru_entry_t *e)
{
    lru_entry_t **pp = table_slot(s, e);
    while (*pp && *pp != e)
        pp = &(*pp)->hnext;
    if (*pp)
        *pp = e->hnext;
    e->hnext = NULL;
    s->size--;
}

/* Double the bucket array when the load passes 1; failure to grow only
 * makes chains longer, never loses an entry. */
static void table_grow(lru_shard_t *s)
{
    size_t n = s->nbuckets * 2;
    lru_entry_t **b = calloc(n, sizeof(*b));
    if (!b)
        return;
    for (size_t i = 0; i < s->nbuckets; i++) {
        lru_entry_t *e = s->buckets[i];
        while (e) {
            lru_entry_t *nx = e->hnext;
            e->hnext = b[e->hash & (n - 1)];
            b[e->hash & (n - 1)] = e;
            e = nx;
        }
    }
    free(s->buckets);
    s->buckets = b;
    s->nbuckets = n;
}

static void table_insert(lru_shard_t *s, lru_entry_t *e)
{
    if (s->size + 1 > s->nbuckets)
        table_grow(s);
    lru_entry_t **slot = table_slot(s, e);
    e->hnext = *slot;
    *slot = e;
    s->size++;
    if (s->size > s->high_water)
        s->high_water = s->size;
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

/* Release a chain of entries linked through ->next: callback, then free.
 * Never called with a shard lock held. */
static void release_chain(byval_lru_t *lru, lru_entry_t *e)
{
    while (e) {
        lru_entry_t *nx = e->next;
        if (lru->evict)
            lru->evict(lru->ctx, e->key, e->value);
        free(e);
        e = nx;
    }
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
                list_append(&chain, &tail, e);
            }
        }
        for (lru_entry_t *z = s->zombies, *nx; z; z = nx) {
            nx = z->hnext;
            list_append(&chain, &tail, z);
        }
        free(s->buckets);
        s->buckets = NULL;
        pthread_mutex_unlock(&s->lock);
        pthread_mutex_destroy(&s->lock);
        release_chain(lru, chain);
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
    lru_entry_t *e = table_find(s, key, lru->key_len, h);
    if (!e) {
        s->misses++;
        pthread_mutex_unlock(&s->lock);
        return 0;
    }
    s->hits++;
    if (take_ref) {
        if (e->refs++ == 0) {
            list_unlink(s, e); /* referenced entries leave the LRU list */
            s->referenced++;
        }
    } else if (e->refs == 0) {
        list_unlink(s, e); /* touch: most recently used goes last */
        list_append(&s->lru_head, &s->lru_tail, e);
    }
    if (value_p)
        *value_p = e->value;
    pthread_mutex_unlock(&s->lock);
    return 1;
}

/* Evict unreferenced entries from the LRU head while above limit.
 * Returns the evicted chain (linked through ->next) for release. */
static lru_entry_t *shard_trim(lru_shard_t *s, size_t limit)
{
    lru_entry_t *chain = NULL, *tail = NULL;
    while (s->size > limit && s->lru_head) {
        lru_entry_t *e = s->lru_head;
        list_unlink(s, e);
        table_remove(s, e);
        s->evictions++;
        list_append(&chain, &tail, e);
    }
    return chain;
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
    lru_entry_t *e = table_find(s, key, lru->key_len, h);
    if (e) {
        if (take_ref && e->refs++ == 0) {
            list_unlink(s, e);
            s->referenced++;
        }
        if (existing_p)
            *existing_p = e->value;
        pthread_mutex_unlock(&s->lock);
        free(n);
        return BYVAL_LRU_EXISTS;
    }
    /* Make room first, so the bound holds at every instant. */
    lru_entry_t *evicted = s->capacity ? shard_trim(s, s->capacity - 1) : NULL;
    if (s->size >= s->capacity) {
        pthread_mutex_unlock(&s->lock);
        free(n);
        release_chain(lru, evicted);
        return BYVAL_LRU_FULL;
    }
    table_insert(s, n);
    s->inserts++;
    if (take_ref) {
        n->refs = 1;
        s->referenced++;
    } else {
        list_append(&s->lru_head, &s->lru_tail, n);
    }
    pthread_mutex_unlock(&s->lock);
    release_chain(lru, evicted);
    return BYVAL_LRU_OK;
}

static lru_entry_t *zombie_find(lru_shard_t *s, const void *key, size_t len)
{
    for (lru_entry_t *z = s->zombies; z; z = z->hnext)
        if (memcmp(z->key, key, len) == 0)
            return z;
    return NULL;
}

static void zombie_unlink(lru_shard_t *s, lru_entry_t *z)
{
    lru_entry_t **pp = &s->zombies;
    while (*pp && *pp != z)
        pp = &(*pp)->hnext;
    if (*pp)
        *pp = z->hnext;
}

int byval_lru_put(byval_lru_t *lru, const void *key)
{
    if (!lru || !key)
        return BYVAL_LRU_NOENT;
    uint32_t h = lru_hash(key, lru->key_len);
    lru_shard_t *s = shard_of(lru, h);
    pthread_mutex_lock(&s->lock);
    /* A removed-while-referenced entry is the one an outstanding reference
     * points to (a live entry with its key can only be newer): put it first. */
    lru_entry_t *z = s->zombies ? zombie_find(s, key, lru->key_len) : NULL;
    if (z) {
        int left = (int)--z->refs;
        if (left == 0) {
            zombie_unlink(s, z);
            s->zombie_count--;
            z->next = NULL;
        }
        pthread_mutex_unlock(&s->lock);
        if (left == 0)
            release_chain(lru, z);
        return left;
    }
    lru_entry_t *e = table_find(s, key, lru->key_len, h);
    if (!e || e->refs == 0) {
        pthread_mutex_unlock(&s->lock);
        return BYVAL_LRU_NOENT;
    }
    int left = (int)--e->refs;
    lru_entry_t *evicted = NULL;
    if (left == 0) {
        s->referenced--;
        list_append(&s->lru_head, &s->lru_tail, e);
        evicted = shard_trim(s, s->capacity); /* capacity may have shrunk */
    }
    pthread_mutex_unlock(&s->lock);
    release_chain(lru, evicted);
    return left;
}

/* Unlink e from lookups: unreferenced -> onto *chain for release,
 * referenced -> zombie. Shard lock held. */
static void shard_detach(lru_shard_t *s, lru_entry_t *e, lru_entry_t **chain,
                         lru_entry_t **tail)
{
    table_remove(s, e);
    s->removals++;
    if (e->refs == 0) {
        list_unlink(s, e);
        list_append(chain, tail, e);
    } else {
        s->referenced--;
        e->hnext = s->zombies;
        s->zombies = e;
        s->zombie_count++;
    }
}

int byval_lru_remove(byval_lru_t *lru, const void *key)
{
    if (!lru || !key)
        return BYVAL_LRU_NOENT;
    uint32_t h = lru_hash(key, lru->key_len);
    lru_shard_t *s = shard_of(lru, h);
    lru_entry_t *chain = NULL, *tail = NULL;
    pthread_mutex_lock(&s->lock);
    lru_entry_t *e = table_find(s, key, lru->key_len, h);
    if (e)
        shard_detach(s, e, &chain, &tail);
    pthread_mutex_unlock(&s->lock);
    release_chain(lru, chain);
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
                    shard_detach(s, e, &chain, &tail);
                    matched++;
                }
            }
        }
        pthread_mutex_unlock(&s->lock);
        release_chain(lru, chain);
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
    st->capacity = lru->capacity;
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
    lru->capacity = capacity;
    for (unsigned i = 0; i < lru->nshards; i++) {
        lru_shard_t *s = &lru->shards[i];
        pthread_mutex_lock(&s->lock);
        s->capacity = capacity / lru->nshards + (i < capacity % lru->nshards);
        lru_entry_t *chain = shard_trim(s, s->capacity);
        pthread_mutex_unlock(&s->lock);
        release_chain(lru, chain);
    }
}
