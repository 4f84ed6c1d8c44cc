/* SPDX-License-Identifier: MIT */
/* lru_table.c - the cache's building blocks, used under a shard's lock:
 * key hash, the chained table, the LRU list of unreferenced entries,
 * zombies (removed while referenced), and releasing evicted chains. */
#include <stdlib.h>
#include <string.h>

#include "cache/lru_internal.h"

/* Word-at-a-time multiply-xorshift: keys are short, fixed-size and on the
 * hot path of every hit (88 bytes for CUDA keys: byte-wise FNV cost ~90 ns
 * there). Tail bytes, if any, are folded in one word. */
uint32_t lru_hash(const void *key, size_t len)
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

void lru_list_unlink(lru_shard_t *s, lru_entry_t *e)
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

void lru_list_append(lru_entry_t **head, lru_entry_t **tail, lru_entry_t *e)
{
    e->next = NULL;
    e->prev = *tail;
    if (*tail)
        (*tail)->next = e;
    else
        *head = e;
    *tail = e;
}

lru_entry_t **lru_table_slot(lru_shard_t *s, const lru_entry_t *e)
{
    return &s->buckets[e->hash & (s->nbuckets - 1)];
}

lru_entry_t *lru_table_find(lru_shard_t *s, const void *key, size_t len, uint32_t h)
{
    for (lru_entry_t *e = s->buckets[h & (s->nbuckets - 1)]; e; e = e->hnext)
        if (e->hash == h && memcmp(e->key, key, len) == 0)
            return e;
    return NULL;
}

void lru_table_remove(lru_shard_t *s, lru_entry_t *e)
{
    lru_entry_t **pp = lru_table_slot(s, e);
    while (*pp && *pp != e)
        pp = &(*pp)->hnext;
    if (*pp)
        *pp = e->hnext;
    e->hnext = NULL;
    s->size--;
}

/* Double the bucket array when the load passes 1; failure to grow only
 * makes chains longer, never loses an entry. */
void lru_table_grow(lru_shard_t *s)
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

void lru_table_insert(lru_shard_t *s, lru_entry_t *e)
{
    if (s->size + 1 > s->nbuckets)
        lru_table_grow(s);
    lru_entry_t **slot = lru_table_slot(s, e);
    e->hnext = *slot;
    *slot = e;
    s->size++;
    if (s->size > s->high_water)
        s->high_water = s->size;
}

/* Release a chain of entries linked through ->next: callback, then free.
 * Never called with a shard lock held. */
void lru_release_chain(byval_lru_t *lru, lru_entry_t *e)
{
    while (e) {
        lru_entry_t *nx = e->next;
        if (lru->evict)
            lru->evict(lru->ctx, e->key, e->value);
        free(e);
        e = nx;
    }
}

/* Evict unreferenced entries from the LRU head while above limit.
 * Returns the evicted chain (linked through ->next) for release. */
lru_entry_t *lru_shard_trim(lru_shard_t *s, size_t limit)
{
    lru_entry_t *chain = NULL, *tail = NULL;
    while (s->size > limit && s->lru_head) {
        lru_entry_t *e = s->lru_head;
        lru_list_unlink(s, e);
        lru_table_remove(s, e);
        s->evictions++;
        lru_list_append(&chain, &tail, e);
    }
    return chain;
}

lru_entry_t *lru_zombie_find(lru_shard_t *s, const void *key, size_t len, const void *value,
                             int match)
{
    for (lru_entry_t *z = s->zombies; z; z = z->hnext)
        if (memcmp(z->key, key, len) == 0 && (!match || z->value == value))
            return z;
    return NULL;
}

void lru_zombie_unlink(lru_shard_t *s, lru_entry_t *z)
{
    lru_entry_t **pp = &s->zombies;
    while (*pp && *pp != z)
        pp = &(*pp)->hnext;
    if (*pp)
        *pp = z->hnext;
}

/* Unlink e from lookups: unreferenced -> onto *chain for release,
 * referenced -> zombie. Shard lock held. */
void lru_shard_detach(lru_shard_t *s, lru_entry_t *e, lru_entry_t **chain,
                         lru_entry_t **tail)
{
    lru_table_remove(s, e);
    s->removals++;
    if (e->refs == 0) {
        lru_list_unlink(s, e);
        lru_list_append(chain, tail, e);
    } else {
        s->referenced--;
        e->hnext = s->zombies;
        s->zombies = e;
        s->zombie_count++;
    }
}
