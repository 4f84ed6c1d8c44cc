/* SPDX-License-Identifier: MIT */
/*
 * lru_fork.c - every cache in one list, the class LRU of cache/locks.h, so
 * that fork() leaves the child with consistent, empty caches: prepare
 * takes every cache's lock (no cache is mid-update when the address space
 * is copied), the parent releases them, and so does the child, which
 * then (a fork-child callback) forgets every entry without
 * calling eviction callbacks (they would call the GPU driver, whose state
 * the child does not own). No cache operation holds two cache locks or
 * waits for anything while holding one (callbacks run unlocked), so
 * prepare cannot deadlock with a thread that uses a cache.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cache/locks.h"
#include "cache/lru_internal.h"

static byval_lock_t reg_lock = BYVAL_LOCK_INIT(LRU_LIST);
static byval_lru_t *reg_head;

static void fork_prepare(void)
{
    byval_lock_fork_take(&reg_lock);
    for (byval_lru_t *c = reg_head; c; c = c->reg_next)
        byval_lock_fork_take(&c->lock);
}

static void fork_parent(void)
{
    for (byval_lru_t *c = reg_head; c; c = c->reg_next)
        byval_lock_fork_drop(&c->lock);
    byval_lock_fork_drop(&reg_lock);
}

BYVAL_LOCK_CLASS(lru, LRU, fork_prepare, fork_parent);

/* Forget every entry (live and zombie) without callbacks: an empty table,
 * no slot in use (the chunks stay, for the child's own entries), zeroed
 * stats (the lock is fresh already: cache/locks.c). Stores that lock-free readers would race are
 * atomic: those threads are gone in the child, but the sanitizer's model
 * (and the compiler's) still wants the same discipline. */
static void cache_empty(byval_lru_t *c)
{
    lru_table_t *t = c->table;
    for (size_t b = 0; b <= t->mask; b++)
        __atomic_store_n(&t->b[b], (uint64_t)0, __ATOMIC_RELAXED);
    c->next_new = 1;
    c->free_head = 0;
    c->hand = 1;
    c->nodes = 0;
    __atomic_store_n(&c->count, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&c->zombies, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&c->high_water, 0, __ATOMIC_RELAXED);
    c->misses = c->inserts = c->evictions = c->removals = 0;
    for (int i = 0; i < BYVAL_STRIPES; i++)
        __atomic_store_n(&c->stripes[i].hits, 0, __ATOMIC_RELAXED);
}

static void fork_child(void)
{
    for (byval_lru_t *c = reg_head; c; c = c->reg_next)
        cache_empty(c);
}

BYVAL_FORK_CHILD(lru, fork_child);

/* Critical sections last tens of ns: a waiter spins a while before
 * sleeping rather than going to the kernel at the first collision. */
void byval_lru_lock_init(byval_lru_t *lru)
{
    byval_lock_init(&lru->lock, BYVAL_RANK_LRU, 1);
}

void byval_lru_register(byval_lru_t *lru)
{
    byval_lock(&reg_lock);
    lru->reg_next = reg_head;
    reg_head = lru;
    byval_unlock(&reg_lock);
}

void byval_lru_unregister(byval_lru_t *lru)
{
    byval_lock(&reg_lock);
    for (byval_lru_t **pp = &reg_head; *pp; pp = &(*pp)->reg_next) {
        if (*pp == lru) {
            *pp = lru->reg_next;
            break;
        }
    }
    byval_unlock(&reg_lock);
}
