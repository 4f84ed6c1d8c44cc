/* SPDX-License-Identifier: MIT */
/*
 * lru.h - generic, bounded, thread-safe LRU cache with reference counts.
 *
 * Keys are fixed-size byte strings (compared bytewise: callers zero the
 * padding); values are opaque pointers. Referenced entries are never
 * evicted; the eviction callback runs after the cache lock is released.
 * All operations are O(1) except the *_if scans. Invalid arguments (NULL
 * cache, key or predicate) do nothing: get and the scans return 0, the
 * others BYVAL_LRU_NOENT. A reference taken with a handle (get_ref,
 * insert_ref) is dropped by it (put_ref) without hashing the key again.
 *
 * fork(): the child empties every cache WITHOUT eviction callbacks (no
 * driver call in the child) and zeroes its stats.
 */
#ifndef BYVAL_CACHE_LRU_H
#define BYVAL_CACHE_LRU_H

#include <stddef.h>
#include <stdint.h>

typedef struct byval_lru byval_lru_t;

/* Names one entry: slot index << 32 | generation; 0 names none. Valid
 * while the reference it came with is held (the slot cannot be reused
 * before), so it stays exact when the entry is removed and its key
 * inserted again meanwhile. */
typedef uint64_t byval_lru_ref_t;

/* Called with the evicted/removed entry's key and value, never under the
 * cache lock, never from the at-fork child handler. */
typedef void (*byval_lru_evict_fn)(void *ctx, const void *key, void *value);
/* The *_if scans' predicate. */
typedef int (*byval_lru_pred_fn)(void *ctx, const void *key, void *value);

typedef struct byval_lru_stats {
    uint64_t hits, misses, inserts;
    uint64_t evictions, removals;      /* by the capacity; by remove, remove_if, purge_if */
    size_t size, high_water, capacity; /* entries now, the most ever, the bound */
    size_t referenced;                 /* entries with refs > 0 now */
    size_t bytes_per_entry;            /* memory one entry costs the cache */
} byval_lru_stats_t;

enum {
    BYVAL_LRU_OK = 0,
    BYVAL_LRU_EXISTS = 1, /* insert: key present; existing value returned, referenced */
    BYVAL_LRU_FULL = -1,  /* insert: at capacity and every entry referenced */
    BYVAL_LRU_NOMEM = -2,
    BYVAL_LRU_NOENT = -3,
};

/* capacity >= 1. evict may be NULL. Returns NULL on ENOMEM/EINVAL. */
byval_lru_t *byval_lru_create(size_t capacity, size_t key_len, byval_lru_evict_fn evict, void *ctx);

/* Destroy; calls evict for every remaining entry (after unlocking). The
 * callback must not use the cache being destroyed. */
void byval_lru_destroy(byval_lru_t *lru);

/* Lookup. On hit: moves the entry to most-recently-used, takes a reference
 * when take_ref, stores the value in *value_p and returns 1. Miss: 0. */
int byval_lru_get(byval_lru_t *lru, const void *key, int take_ref, void **value_p);

/* Insert key -> value, with one reference when take_ref. If the cache is
 * above capacity afterwards, the least recently used unreferenced entries
 * are evicted (callback after unlock). Returns BYVAL_LRU_OK,
 * BYVAL_LRU_EXISTS (then *existing_p gets the present value, referenced
 * when take_ref, and value was NOT stored), BYVAL_LRU_FULL (not stored),
 * or BYVAL_LRU_NOMEM. */
int byval_lru_insert(byval_lru_t *lru, const void *key, void *value, int take_ref,
                     void **existing_p);

/* get with a reference, also returning its handle in *ref_p (0 on a
 * miss). Returns 1 on a hit, 0 on a miss. Drop it with put_ref. */
int byval_lru_get_ref(byval_lru_t *lru, const void *key, void **value_p, byval_lru_ref_t *ref_p);

/* insert with a reference, also returning its handle in *ref_p: the new
 * entry's on BYVAL_LRU_OK, the existing (now referenced) one's on
 * BYVAL_LRU_EXISTS, 0 otherwise. Drop it with put_ref. */
int byval_lru_insert_ref(byval_lru_t *lru, const void *key, void *value, void **existing_p,
                         byval_lru_ref_t *ref_p);

/* Drop the reference ref was handed out with. Returns the remaining count,
 * or BYVAL_LRU_NOENT (ref 0, NULL cache, or an entry that no longer holds
 * that reference). A live entry costs one CAS and no lock; a zombie whose
 * last reference this is is released (callback after unlock), and a newer
 * entry under the same key is left alone. O(1), no key. */
int byval_lru_put_ref(byval_lru_t *lru, byval_lru_ref_t ref);

/* Drop one reference. Returns the remaining count, or BYVAL_LRU_NOENT.
 * An entry marked by remove() while referenced (a zombie) is released
 * (callback) when its last reference goes. When a zombie and a newer live
 * entry share the key, put drops the zombie's reference first. */
int byval_lru_put(byval_lru_t *lru, const void *key);

/* Drop one reference of the entry for key that holds value. Use this (or
 * put_ref) whenever an entry may be removed and its key inserted again
 * while references are out: plain put would go to the removed (zombie)
 * entry first, whoever's reference it was. */
int byval_lru_put_value(byval_lru_t *lru, const void *key, const void *value);

/* Remove key: unreferenced -> released now (callback after unlock);
 * referenced -> unlinked from lookups at once and released when the last
 * reference is put. Returns BYVAL_LRU_OK or BYVAL_LRU_NOENT. */
int byval_lru_remove(byval_lru_t *lru, const void *key);

/* Remove every entry for which pred(ctx, key, value) returns non-zero,
 * with remove()'s semantics. O(n). Returns how many matched. pred runs
 * under a cache lock: it must not call this cache, nor fork(). */
size_t byval_lru_remove_if(byval_lru_t *lru, byval_lru_pred_fn pred, void *ctx);

/* Remove the very entry ref names (remove()'s semantics), not whatever
 * now holds its key: BYVAL_LRU_OK, or BYVAL_LRU_NOENT when that entry is
 * no longer live. The caller's own reference, if any, stays valid. */
int byval_lru_remove_ref(byval_lru_t *lru, byval_lru_ref_t ref);

/* Like remove_if, but every matching entry, referenced or a zombie, is
 * released now: the references out there become stale (their puts
 * return BYVAL_LRU_NOENT). For owners that know the entries are dead
 * whatever their users think (a destroyed GPU context). */
size_t byval_lru_purge_if(byval_lru_t *lru, byval_lru_pred_fn pred, void *ctx);

/* Evict unreferenced live entries for which pred returns > 0, visiting
 * them in clock order; pred returning < 0 ends the pass. Returns how many
 * were evicted (counted as evictions). Same rules for pred as remove_if. */
size_t byval_lru_evict_if(byval_lru_t *lru, byval_lru_pred_fn pred, void *ctx);

void byval_lru_stats(byval_lru_t *lru, byval_lru_stats_t *stats_p);

/* Memory of the cache's own structures (slots, tables, directories; not
 * what values point at): now, and per entry when full at capacity. */
void byval_lru_memory(byval_lru_t *lru, size_t *now_p, size_t *full_per_entry_p);

/* Change capacity (evicts down to it where it can). */
void byval_lru_set_capacity(byval_lru_t *lru, size_t capacity);

/* The key hash (test_lru_hash checks its spread). */
uint32_t byval_lru_hash(const void *key, size_t len);

#endif
