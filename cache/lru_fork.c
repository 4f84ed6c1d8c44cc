/* SPDX-License-Identifier: MIT */
/*
 * lru_fork.c - every cache in one registry so that fork() leaves the child
 * with consistent, empty caches: prepare takes every lock (no cache is
 * mid-update when the address space is copied), the parent releases them,
 * and the child re-initialises the locks and frees every entry without
 * calling eviction callbacks (they would call the GPU driver, whose state
 * the child does not own). No cache operation holds two shard locks or
 * waits for anything while holding one (callbacks run unlocked), so
 * prepare cannot deadlock with a thread that uses a cache.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cache/lru_internal.h"

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t reg_once = PTHREAD_ONCE_INIT;
static byval_lru_t *reg_head;

static void fork_prepare(void)
{
    pthread_mutex_lock(&reg_lock);
    for (byval_lru_t *c = reg_head; c; c = c->reg_next)
        for (unsigned i = 0; i < c->nshards; i++)
            pthread_mutex_lock(&c->shards[i].lock);
}

static void fork_parent(void)
{
    for (byval_lru_t *c = reg_head; c; c = c->reg_next)
        for (unsigned i = 0; i < c->nshards; i++)
            pthread_mutex_unlock(&c->shards[i].lock);
    pthread_mutex_unlock(&reg_lock);
}

/* Free every entry (live and zombie) without callbacks; keep the bucket
 * array (emptied) and nothing else: zeroed stats, a fresh lock. */
static void shard_empty(lru_shard_t *s)
{
    for (size_t b = 0; b < s->nbuckets; b++) {
        for (lru_entry_t *e = s->buckets[b], *nx; e; e = nx) {
            nx = e->hnext;
            free(e);
        }
        s->buckets[b] = NULL;
    }
    /* Field by field, and atomically where other threads read without
     * the lock: those threads are gone in the child, but the sanitizer's
     * model (and the compiler's) still wants the same discipline. */
    s->lru_head = s->lru_tail = NULL;
    __atomic_store_n(&s->head_stamp, BYVAL_LRU_NO_STAMP, __ATOMIC_RELAXED);
    s->nodes = s->size = s->referenced = s->zombies = 0;
    s->last_stamp = 0;
    s->hits = s->misses = s->inserts = s->evictions = s->removals = 0;
    byval_lru_lock_init(s);
}

static void fork_child(void)
{
    for (byval_lru_t *c = reg_head; c; c = c->reg_next) {
        for (unsigned i = 0; i < c->nshards; i++)
            shard_empty(&c->shards[i]);
        __atomic_store_n(&c->count, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&c->high_water, 0, __ATOMIC_RELAXED);
    }
    pthread_mutex_init(&reg_lock, NULL);
}

static void reg_init(void)
{
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}

void byval_lru_register(byval_lru_t *lru)
{
    pthread_once(&reg_once, reg_init);
    pthread_mutex_lock(&reg_lock);
    lru->reg_next = reg_head;
    reg_head = lru;
    pthread_mutex_unlock(&reg_lock);
}

void byval_lru_unregister(byval_lru_t *lru)
{
    pthread_mutex_lock(&reg_lock);
    for (byval_lru_t **pp = &reg_head; *pp; pp = &(*pp)->reg_next) {
        if (*pp == lru) {
            *pp = lru->reg_next;
            break;
        }
    }
    pthread_mutex_unlock(&reg_lock);
}
