/* SPDX-License-Identifier: MIT */
/*
 * lru_internal.h - the cache's data structures, shared by lru.c (lookups,
 * inserts, removals), lru_put.c (puts), lru_slab.c (slots and the hash
 * table), lru_clock.c (eviction, zombies, releases) and lru_fork.c
 * (registry, at-fork).
 *
 * Concurrency in one paragraph: every change of the table, the slots'
 * contents or the counters is made under the cache's one lock. Hits (get)
 * and the puts that leave an entry live take no lock: they find the entry
 * by probing the hash table with atomic loads (put_ref by its handle,
 * slot index and generation) and change its reference count with one CAS
 * on the entry's state word. That word carries a generation, bumped each
 * time a slot is reused, so a CAS that succeeds proves the key compared
 * just before (or the handle) still names the entry. Slots live in
 * chunks that are never freed before the cache is (type-stable memory), so
 * a reader never touches freed memory; a bucket array replaced by a larger
 * one is kept until then too.
 */
#ifndef BYVAL_CACHE_LRU_INTERNAL_H
#define BYVAL_CACHE_LRU_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "cache/locks.h"
#include "cache/lru.h"
#include "cache/stripe.h"

#define BYVAL_LRU_CACHELINE 64
#define LRU_MAX_KEY 1024
#define MAX_WORDS (LRU_MAX_KEY / 8) /* a key as words, on the stack */

/* Every field a lock-free reader may see is accessed with these. */
#define LD(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define LD_ACQ(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define ST(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)
#define ST_REL(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)

/* The state word: generation << 32 | flags | references. */
#define ST_REFS 0x0FFFFFFFu  /* references held (2^28 - 1 at most) */
#define ST_CLOCK (1u << 28)  /* hit since the clock hand last passed */
#define ST_ZOMBIE (1u << 29) /* removed while referenced: out of lookups */
#define ST_DEAD (1u << 30)   /* free, being released, or being written */
#define ST_GEN(s) ((uint32_t)((s) >> 32))
#define ST_LOW(s) ((uint32_t)(s))

/* One slot: 24 bytes + the key rounded up to 8. Every field is read by
 * lock-free readers, so every access is atomic (relaxed unless noted). */
typedef struct lru_slot {
    uint64_t state;
    uint32_t hash;
    uint32_t hnext; /* next slot of the free list or a release chain; 0: none */
    void *value;
    uint64_t key[]; /* key_len bytes, zero padded to a word */
} lru_slot_t;

/* The hash table: open addressing, a bucket is hash << 32 | slot index
 * (0 = empty). Replaced tables are chained on `retired` and freed with
 * the cache (a reader may still probe one). */
typedef struct lru_table {
    struct lru_table *retired;
    size_t mask;
    uint64_t b[];
} lru_table_t;

/* A probe in progress (lock-free, or locked where the table is stable). */
typedef struct lru_probe {
    const lru_table_t *t;
    size_t pos, n;
} lru_probe_t;

/* Slots in chunks of 1 << chunk_shift; the chunk directory grows by
 * doubling, old directories retired like tables. Slot index i is at position i - 1:
 * index 0 means none. */
typedef struct lru_dir {
    struct lru_dir *retired;
    size_t cap;
    unsigned char *chunk[];
} lru_dir_t;

/* Hit counters, one stripe per thread (cache/stripe.h); two lines a
 * stripe, as CPUs prefetch lines in pairs. */
typedef struct lru_stripe {
    uint64_t hits;
} __attribute__((aligned(2 * BYVAL_LRU_CACHELINE))) lru_stripe_t;

struct byval_lru {
    /* Read by every operation; written at creation (capacity also by
     * set_capacity, the table and directory pointers under the lock). */
    struct byval_lru *reg_next; /* registry of live caches (fork), reg_lock */
    size_t key_len;
    size_t key_words;
    size_t stride; /* bytes per slot */
    size_t capacity;
    byval_lru_evict_fn evict;
    void *ctx;
    lru_table_t *table;
    lru_dir_t *dir;
    unsigned chunk_shift;

    /* Written under the lock only. */
    byval_lock_t lock __attribute__((aligned(BYVAL_LRU_CACHELINE)));
    uint32_t next_new;  /* first never-used slot index */
    uint32_t free_head; /* free slots, chained through hnext */
    uint32_t hand;      /* the clock hand: next slot the sweep looks at */
    size_t nchunks;
    size_t nodes;   /* slots in the table: live + zombies */
    size_t count;   /* live entries: the bound (read unlocked by put) */
    size_t zombies; /* read unlocked by put */
    size_t high_water;
    uint64_t misses, inserts, evictions, removals;

    lru_stripe_t stripes[BYVAL_STRIPES];
};

/* The list of caches, for fork (lru_fork.c). */
void byval_lru_register(byval_lru_t *lru);
void byval_lru_unregister(byval_lru_t *lru);
void byval_lru_lock_init(byval_lru_t *lru);

/* lru_slab.c: slots and the table. Functions marked (locked) need the
 * cache lock; the others are lock-free readers. */
uint32_t byval_lru_hash(const void *key, size_t len);
int byval_lru_slab_init(byval_lru_t *lru);
void byval_lru_slab_free(byval_lru_t *lru);
lru_slot_t *byval_lru_slot(const byval_lru_t *lru, uint32_t idx);
/* The same for an index from outside (a reference handle): NULL when it
 * names no slot of an allocated chunk, instead of reading out of bounds. */
lru_slot_t *byval_lru_slot_checked(const byval_lru_t *lru, uint32_t idx);
/* Copy key into words (zero padded): what slots hold and readers compare. */
void byval_lru_key_words(const byval_lru_t *lru, const void *key, uint64_t *w);
int byval_lru_key_eq(const byval_lru_t *lru, const lru_slot_t *s, const uint64_t *w);
/* The slots whose hash is h, one per call, then 0. Lock-free, the table
 * may change under the probe, which then misses (or gives up after a
 * bounded number of buckets): only a locked probe may say that a key is
 * absent. */
void byval_lru_probe_init(const byval_lru_t *lru, uint32_t h, lru_probe_t *p);
uint32_t byval_lru_probe_next(lru_probe_t *p, uint32_t h);
/* (locked) a slot for key (state DEAD, not in the table) or 0 on ENOMEM. */
uint32_t byval_lru_slot_alloc(byval_lru_t *lru);
/* (locked) fill a slot (state = refs, new generation) and add it to the
 * table; -1 when the table is full and cannot grow. */
int byval_lru_slot_publish(byval_lru_t *lru, uint32_t idx, uint32_t h, const uint64_t *w,
                           void *value, uint32_t refs);
void byval_lru_slot_free(byval_lru_t *lru, uint32_t idx); /* (locked) */
void byval_lru_table_del(byval_lru_t *lru, uint32_t idx); /* (locked) */

/* lru.c (locked): the live (not zombie) entry for key words w, or 0. */
uint32_t byval_lru_find_live(byval_lru_t *lru, uint32_t h, const uint64_t *w);

/* lru_clock.c (locked unless noted). A release chain links slots through
 * hnext: their callbacks run after unlock, then the slots are freed. */
typedef struct lru_chain {
    uint32_t head, tail;
} lru_chain_t;
/* Take or drop a reference of a live entry with one CAS; fails (0) when
 * the slot is not the live generation gen. */
int byval_lru_ref_cas(lru_slot_t *s, uint32_t gen, int delta, uint32_t *refs_p);
/* Drop one reference of zombie idx, whose state is st (and cannot move:
 * zombies change only under the lock); the last one unlinks it and puts
 * it on the chain. Returns the references left. */
uint32_t byval_lru_zombie_put(byval_lru_t *lru, uint32_t idx, uint64_t st, lru_chain_t *c);
/* Evict one unreferenced entry by the clock; 0 when none can be. */
int byval_lru_evict_one(byval_lru_t *lru, lru_chain_t *c);
/* Unlink from lookups: unreferenced -> released, referenced -> zombie. */
void byval_lru_detach(byval_lru_t *lru, uint32_t idx, lru_chain_t *c);
/* Release idx now whatever its references (live or zombie): its
 * holders' puts then fail. No-op on a DEAD slot. */
void byval_lru_purge(byval_lru_t *lru, uint32_t idx, lru_chain_t *c);
/* Evict idx if it is live and unreferenced (1), else leave it (0). */
int byval_lru_evict_slot(byval_lru_t *lru, uint32_t idx, lru_chain_t *c);
/* Evict while above capacity. */
void byval_lru_trim_locked(byval_lru_t *lru, lru_chain_t *c);
/* No lock held: callbacks, then free the slots (takes the lock). */
void byval_lru_release(byval_lru_t *lru, lru_chain_t *c);
void byval_lru_chain_push(byval_lru_t *lru, lru_chain_t *c, uint32_t idx);

#endif
