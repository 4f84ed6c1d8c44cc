/* SPDX-License-Identifier: MIT */
/* lru_internal.h - the cache's data structures, shared by lru.c (the
 * operations) and lru_fork.c (the registry and the at-fork handlers). */
#ifndef BYVAL_CACHE_LRU_INTERNAL_H
#define BYVAL_CACHE_LRU_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "cache/lru.h"

typedef struct lru_entry {
    struct lru_entry *hnext; /* bucket chain; zombie list when removed */
    struct lru_entry *prev;  /* LRU list (unreferenced only) / release chain */
    struct lru_entry *next;
    void *value;
    uint32_t hash;
    uint32_t refs;
    unsigned char key[]; /* key_len bytes */
} lru_entry_t;

typedef struct lru_shard {
    pthread_mutex_t lock;
    lru_entry_t **buckets;
    size_t nbuckets; /* power of two */
    size_t size;     /* entries in the table */
    size_t capacity;
    size_t high_water;
    size_t referenced;
    lru_entry_t *lru_head; /* least recently used, unreferenced */
    lru_entry_t *lru_tail;
    lru_entry_t *zombies; /* removed while referenced */
    size_t zombie_count;
    uint64_t hits, misses, inserts, evictions, removals;
} lru_shard_t;

struct byval_lru {
    struct byval_lru *reg_next; /* registry of live caches (fork) */
    size_t key_len;
    size_t capacity;
    byval_lru_evict_fn evict;
    void *ctx;
    unsigned nshards; /* power of two */
    lru_shard_t shards[];
};

/* Registry for the at-fork handlers (lru_fork.c). */
void byval_lru_register(byval_lru_t *lru);
void byval_lru_unregister(byval_lru_t *lru);

/* lru_table.c: building blocks, called with the shard's lock held
 * (lru_release_chain: without it). */
uint32_t lru_hash(const void *key, size_t len);
void lru_list_unlink(lru_shard_t *s, lru_entry_t *e);
void lru_list_append(lru_entry_t **head, lru_entry_t **tail, lru_entry_t *e);
lru_entry_t **lru_table_slot(lru_shard_t *s, const lru_entry_t *e);
lru_entry_t *lru_table_find(lru_shard_t *s, const void *key, size_t len, uint32_t h);
void lru_table_remove(lru_shard_t *s, lru_entry_t *e);
void lru_table_grow(lru_shard_t *s);
void lru_table_insert(lru_shard_t *s, lru_entry_t *e);
/* Release a chain linked through ->next: callback, then free. */
void lru_release_chain(byval_lru_t *lru, lru_entry_t *e);
/* Evict unreferenced entries from the LRU head while above limit. */
lru_entry_t *lru_shard_trim(lru_shard_t *s, size_t limit);
/* A zombie with key (and, with match, holding value). */
lru_entry_t *lru_zombie_find(lru_shard_t *s, const void *key, size_t len, const void *value,
                             int match);
void lru_zombie_unlink(lru_shard_t *s, lru_entry_t *z);
/* Unlink e: unreferenced -> onto *chain, referenced -> zombie. */
void lru_shard_detach(lru_shard_t *s, lru_entry_t *e, lru_entry_t **chain, lru_entry_t **tail);

#endif
