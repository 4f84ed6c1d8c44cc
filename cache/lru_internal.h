/* SPDX-License-Identifier: MIT */
/* lru_internal.h - the cache's data structures, shared by lru.c (the
 * operations), lru_table.c (table, lists, eviction) and lru_fork.c (the
 * registry and the at-fork handlers). */
#ifndef BYVAL_CACHE_LRU_INTERNAL_H
#define BYVAL_CACHE_LRU_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "cache/lru.h"

#define BYVAL_LRU_CACHELINE 64
#define BYVAL_LRU_NO_STAMP UINT64_MAX /* published head stamp: list empty */

/* 48 bytes + the key: 88 for a 40-byte key, a 96-byte malloc chunk. */
typedef struct lru_entry {
    struct lru_entry *hnext; /* bucket chain (live entries and zombies) */
    struct lru_entry *prev;  /* LRU list: unreferenced live entries only */
    struct lru_entry *next;  /* LRU list, or the release chain once unlinked */
    void *value;
    uint64_t stamp;    /* last use (multi-shard caches): orders shards' heads */
    uint32_t hash;
    uint32_t refs : 31;
    uint32_t zombie : 1; /* removed while referenced: in the chain for put only */
    unsigned char key[]; /* key_len bytes */
} lru_entry_t;

/* One lock, table and LRU list per shard; aligned so that two shards
 * never share a cache line. */
typedef struct lru_shard {
    pthread_mutex_t lock;
    lru_entry_t *lru_head; /* least recently used, unreferenced */
    lru_entry_t *lru_tail;
    uint64_t head_stamp; /* lru_head's stamp, read without the lock */
    lru_entry_t **buckets;
    size_t nbuckets; /* power of two */
    size_t nodes;    /* entries in the chains: live + zombies */
    size_t size;     /* live entries */
    size_t referenced;
    size_t zombies;
    uint64_t last_stamp;
    uint64_t hits, misses, inserts, evictions, removals;
} __attribute__((aligned(BYVAL_LRU_CACHELINE))) lru_shard_t;

struct byval_lru {
    /* Read by every operation, written only at creation (capacity: by
     * set_capacity, atomically). */
    struct byval_lru *reg_next; /* registry of live caches (fork), reg_lock */
    size_t key_len;
    size_t capacity;
    byval_lru_evict_fn evict;
    void *ctx;
    unsigned nshards; /* power of two */
    /* Written by inserts and evictions: a line of their own. Changed only
     * under the lock of the shard whose table gains or loses the entry,
     * so every lock held (fork prepare) means a consistent count. */
    size_t count __attribute__((aligned(BYVAL_LRU_CACHELINE))); /* live entries: the bound */
    size_t high_water;
    lru_shard_t shards[];
};

/* Registry for the at-fork handlers (lru_fork.c). */
void byval_lru_register(byval_lru_t *lru);
void byval_lru_unregister(byval_lru_t *lru);

/* lru_table.c. All take the shard's lock held, except where noted. */
void byval_lru_lock_init(lru_shard_t *s); /* no lock: it makes it */
uint32_t byval_lru_hash(const void *key, size_t len);
/* The live entry with key, or NULL. */
lru_entry_t *byval_lru_find(lru_shard_t *s, const void *key, size_t len, uint32_t h);
void byval_lru_chain_add(lru_shard_t *s, lru_entry_t *e);
void byval_lru_chain_del(lru_shard_t *s, lru_entry_t *e);
/* LRU list of unreferenced entries; push stamps e and appends it. */
void byval_lru_list_unlink(lru_shard_t *s, lru_entry_t *e);
void byval_lru_list_push(byval_lru_t *lru, lru_shard_t *s, lru_entry_t *e);
/* Release chains (linked through ->next): callback, then free. No lock. */
void byval_lru_chain_append(lru_entry_t **head, lru_entry_t **tail, lru_entry_t *e);
void byval_lru_release(byval_lru_t *lru, lru_entry_t *chain);
/* Take one slot of the global bound; 0 when the cache is at capacity. */
int byval_lru_reserve(byval_lru_t *lru);
/* The shard whose LRU head is the least recently used of all, read
 * without locks; NULL when every entry is referenced. */
lru_shard_t *byval_lru_pick(byval_lru_t *lru);
/* Evict s's LRU head onto the chain (s locked, head present). */
void byval_lru_evict_head(byval_lru_t *lru, lru_shard_t *s, lru_entry_t **chain,
                          lru_entry_t **tail);
/* No lock held: evict least recently used entries while above capacity. */
void byval_lru_trim(byval_lru_t *lru, lru_entry_t **chain, lru_entry_t **tail);
/* Unlink e from lookups: unreferenced -> onto the chain, referenced ->
 * zombie (released by its last put). */
void byval_lru_detach(byval_lru_t *lru, lru_shard_t *s, lru_entry_t *e, lru_entry_t **chain,
                      lru_entry_t **tail);

#endif
