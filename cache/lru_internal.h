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

#endif
