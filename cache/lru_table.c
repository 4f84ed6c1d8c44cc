/* SPDX-License-Identifier: MIT */
/* lru_table.c - the cache's building blocks: key hash, the chained table,
 * the LRU list of unreferenced entries with its use stamps, the global
 * bound, picking and evicting the least recently used entry, zombies, and
 * releasing evicted chains. */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

#include "cache/lru_internal.h"

/* Word-at-a-time multiply-xorshift: keys are short, fixed-size and on the
 * hot path of every hit (88 bytes for CUDA keys: byte-wise FNV cost ~90 ns
 * there). Tail bytes, if any, are folded in one word. */
uint32_t byval_lru_hash(const void *key, size_t len)
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

lru_entry_t *byval_lru_find(lru_shard_t *s, const void *key, size_t len, uint32_t h)
{
    for (lru_entry_t *e = s->buckets[h & (s->nbuckets - 1)]; e; e = e->hnext)
        if (e->hash == h && !e->zombie && memcmp(e->key, key, len) == 0)
            return e;
    return NULL;
}

/* Double the bucket array when the load passes 1; failure to grow only
 * makes chains longer, never loses an entry. */
static void chain_grow(lru_shard_t *s)
{
    size_t n = s->nbuckets * 2;
    lru_entry_t **b = calloc(n, sizeof(*b));
    if (!b)
        return;
    for (size_t i = 0; i < s->nbuckets; i++) {
        for (lru_entry_t *e = s->buckets[i], *nx; e; e = nx) {
            nx = e->hnext;
            e->hnext = b[e->hash & (n - 1)];
            b[e->hash & (n - 1)] = e;
        }
    }
    free(s->buckets);
    s->buckets = b;
    s->nbuckets = n;
}

void byval_lru_chain_add(lru_shard_t *s, lru_entry_t *e)
{
    if (s->nodes + 1 > s->nbuckets)
        chain_grow(s);
    lru_entry_t **slot = &s->buckets[e->hash & (s->nbuckets - 1)];
    e->hnext = *slot;
    *slot = e;
    s->nodes++;
}

void byval_lru_chain_del(lru_shard_t *s, lru_entry_t *e)
{
    lru_entry_t **pp = &s->buckets[e->hash & (s->nbuckets - 1)];
    while (*pp && *pp != e)
        pp = &(*pp)->hnext;
    if (*pp)
        *pp = e->hnext;
    e->hnext = NULL;
    s->nodes--;
}

/* Critical sections last tens of ns: a waiter spins a while before
 * sleeping. With the default type the first collision sleeps in the
 * kernel, and 2 threads on 2 CPUs made half the hits of one. */
void byval_lru_lock_init(lru_shard_t *s)
{
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ADAPTIVE_NP);
    pthread_mutex_init(&s->lock, &attr);
    pthread_mutexattr_destroy(&attr);
}

/* ---- use stamps and the LRU list ----------------------------------------- */

/* A stamp orders uses across shards: the eviction victim is the shard head
 * with the oldest stamp. The cycle counter: ~15 ns (2-CPU KVM guest) to
 * ~32 ns (16-CPU GPU host) where clock_gettime costs ~36 / ~40, and unlike
 * a global counter it writes no shared cache line, so hits on different
 * shards do not contend. Stamps only order: skew between CPUs can swap
 * concurrent uses, which concurrency leaves unordered anyway; the max with
 * the thread's and the shard's last stamp keeps one thread's uses, and one
 * shard's list, strictly ordered. */
static __thread uint64_t thread_stamp;

static uint64_t stamp_next(lru_shard_t *s)
{
#if defined(__x86_64__) || defined(__i386__)
    uint64_t t = __rdtsc();
#else
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t t = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
#endif
    if (t <= thread_stamp)
        t = thread_stamp + 1;
    if (t <= s->last_stamp)
        t = s->last_stamp + 1;
    return thread_stamp = s->last_stamp = t;
}

static void publish_head(lru_shard_t *s)
{
    uint64_t st = s->lru_head ? s->lru_head->stamp : BYVAL_LRU_NO_STAMP;
    __atomic_store_n(&s->head_stamp, st, __ATOMIC_RELAXED);
}

void byval_lru_list_unlink(lru_shard_t *s, lru_entry_t *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        s->lru_head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        s->lru_tail = e->prev;
    if (!e->prev)
        publish_head(s);
    e->prev = e->next = NULL;
}

void byval_lru_list_push(byval_lru_t *lru, lru_shard_t *s, lru_entry_t *e)
{
    /* One shard needs no stamps: its list order is the whole order. */
    e->stamp = lru->nshards > 1 ? stamp_next(s) : 0;
    e->next = NULL;
    e->prev = s->lru_tail;
    if (s->lru_tail)
        s->lru_tail->next = e;
    s->lru_tail = e;
    if (!s->lru_head) {
        s->lru_head = e;
        publish_head(s);
    }
}

/* ---- release chains ------------------------------------------------------- */

void byval_lru_chain_append(lru_entry_t **head, lru_entry_t **tail, lru_entry_t *e)
{
    e->next = NULL;
    if (*tail)
        (*tail)->next = e;
    else
        *head = e;
    *tail = e;
}

/* Never called with a shard lock held: the callback may use the cache. */
void byval_lru_release(byval_lru_t *lru, lru_entry_t *e)
{
    while (e) {
        lru_entry_t *nx = e->next;
        if (lru->evict)
            lru->evict(lru->ctx, e->key, e->value);
        free(e);
        e = nx;
    }
}

/* ---- the global bound and eviction ---------------------------------------- */

int byval_lru_reserve(byval_lru_t *lru)
{
    size_t c = __atomic_load_n(&lru->count, __ATOMIC_RELAXED);
    do {
        if (c >= __atomic_load_n(&lru->capacity, __ATOMIC_RELAXED))
            return 0;
    } while (!__atomic_compare_exchange_n(&lru->count, &c, c + 1, 1, __ATOMIC_RELAXED,
                                          __ATOMIC_RELAXED));
    size_t hw = __atomic_load_n(&lru->high_water, __ATOMIC_RELAXED);
    while (c + 1 > hw && !__atomic_compare_exchange_n(&lru->high_water, &hw, c + 1, 1,
                                                      __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
    return 1;
}

/* O(shards), at most 16: a constant. */
lru_shard_t *byval_lru_pick(byval_lru_t *lru)
{
    lru_shard_t *best = NULL;
    uint64_t oldest = BYVAL_LRU_NO_STAMP;
    for (unsigned i = 0; i < lru->nshards; i++) {
        uint64_t st = __atomic_load_n(&lru->shards[i].head_stamp, __ATOMIC_RELAXED);
        if (st != BYVAL_LRU_NO_STAMP && (!best || st < oldest)) {
            oldest = st;
            best = &lru->shards[i];
        }
    }
    return best;
}

void byval_lru_evict_head(byval_lru_t *lru, lru_shard_t *s, lru_entry_t **chain,
                          lru_entry_t **tail)
{
    lru_entry_t *e = s->lru_head;
    byval_lru_list_unlink(s, e);
    byval_lru_chain_del(s, e);
    s->size--;
    s->evictions++;
    __atomic_fetch_sub(&lru->count, 1, __ATOMIC_RELAXED);
    byval_lru_chain_append(chain, tail, e);
}

void byval_lru_trim(byval_lru_t *lru, lru_entry_t **chain, lru_entry_t **tail)
{
    for (;;) {
        if (__atomic_load_n(&lru->count, __ATOMIC_RELAXED) <=
            __atomic_load_n(&lru->capacity, __ATOMIC_RELAXED))
            return;
        lru_shard_t *v = byval_lru_pick(lru);
        if (!v)
            return; /* every entry referenced: over the bound until puts */
        pthread_mutex_lock(&v->lock);
        /* Re-checked under the lock: a concurrent trim may have done it. */
        if (v->lru_head && __atomic_load_n(&lru->count, __ATOMIC_RELAXED) >
                               __atomic_load_n(&lru->capacity, __ATOMIC_RELAXED))
            byval_lru_evict_head(lru, v, chain, tail);
        pthread_mutex_unlock(&v->lock);
    }
}

void byval_lru_detach(byval_lru_t *lru, lru_shard_t *s, lru_entry_t *e, lru_entry_t **chain,
                      lru_entry_t **tail)
{
    s->size--;
    s->removals++;
    __atomic_fetch_sub(&lru->count, 1, __ATOMIC_RELAXED);
    if (e->refs == 0) {
        byval_lru_list_unlink(s, e);
        byval_lru_chain_del(s, e);
        byval_lru_chain_append(chain, tail, e);
    } else {
        /* Stays in its chain, invisible to lookups, so put finds it in
         * O(1); released by its last put. */
        e->zombie = 1;
        s->referenced--;
        s->zombies++;
    }
}
