/* SPDX-License-Identifier: MIT */
/*
 * lru_clock.c - reference counts on the state word, eviction by the clock
 * (second chance), zombies, and release chains.
 *
 * Why a clock and not a strict LRU list: a strict LRU relinks a shared
 * list on every hit, which needs a lock and moves the list's cache lines
 * between CPUs; 16 threads hitting one cache then ran 1.3x one thread.
 * Here a hit sets the entry's CLOCK bit in the same CAS that takes its
 * reference, and the hand (under the lock, at insert time only) clears the
 * bit of an entry used since it last passed and evicts the first
 * unreferenced entry without it: entries hit again survive a full turn,
 * entries used once go first. The bound, FULL and the callbacks keep
 * lru.h's exact semantics; only the victim among unreferenced entries is
 * approximate.
 */
#include <stdlib.h>

#include "cache/lru_internal.h"

#define CAS(p, exp, des) \
    __atomic_compare_exchange_n((p), (exp), (des), 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)

#define GEN_BITS(st) ((st) & ~(uint64_t)UINT32_MAX)

int byval_lru_ref_cas(lru_slot_t *s, uint32_t gen, int delta, uint32_t *refs_p)
{
    uint64_t cur = LD(&s->state);
    for (;;) {
        if (ST_GEN(cur) != gen || (cur & (ST_DEAD | ST_ZOMBIE)))
            return 0;
        uint32_t refs = ST_LOW(cur) & ST_REFS;
        if (delta > 0 ? refs == ST_REFS : refs == 0)
            return 0;
        uint64_t nw = delta > 0 ? (cur + 1) | ST_CLOCK : cur - 1;
        if (CAS(&s->state, &cur, nw)) {
            *refs_p = delta > 0 ? refs + 1 : refs - 1;
            return 1;
        }
    }
}

void byval_lru_chain_push(byval_lru_t *lru, lru_chain_t *c, uint32_t idx)
{
    ST(&byval_lru_slot(lru, idx)->hnext, 0);
    if (c->tail)
        ST(&byval_lru_slot(lru, c->tail)->hnext, idx);
    else
        c->head = idx;
    c->tail = idx;
}

/* Unreferenced live slot -> DEAD and onto the chain; 0 when its state
 * moved (a reader took a reference): the caller looks again. */
static int kill(byval_lru_t *lru, uint32_t idx, uint64_t st, lru_chain_t *c)
{
    lru_slot_t *s = byval_lru_slot(lru, idx);
    if (!CAS(&s->state, &st, GEN_BITS(st) | ST_DEAD))
        return 0;
    byval_lru_table_del(lru, idx);
    ST(&lru->count, lru->count - 1);
    byval_lru_chain_push(lru, c, idx);
    return 1;
}

uint32_t byval_lru_zombie_put(byval_lru_t *lru, uint32_t idx, uint64_t st, lru_chain_t *c)
{
    lru_slot_t *s = byval_lru_slot(lru, idx);
    uint32_t refs = (ST_LOW(st) & ST_REFS) - 1;
    if (refs) {
        ST(&s->state, st - 1);
        return refs;
    }
    ST(&s->state, GEN_BITS(st) | ST_DEAD);
    byval_lru_table_del(lru, idx);
    ST(&lru->zombies, lru->zombies - 1);
    byval_lru_chain_push(lru, c, idx);
    return 0;
}

int byval_lru_evict_one(byval_lru_t *lru, lru_chain_t *c)
{
    uint32_t n = lru->next_new;
    if (n <= 1)
        return 0;
    /* Two turns: the first may only clear CLOCK bits. */
    for (size_t visits = 0; visits <= 2 * (size_t)(n - 1); visits++) {
        uint32_t i = lru->hand;
        lru->hand = i + 1 < n ? i + 1 : 1;
        lru_slot_t *s = byval_lru_slot(lru, i);
        uint64_t st = LD(&s->state);
        for (;;) {
            if ((st & (ST_DEAD | ST_ZOMBIE)) || (ST_LOW(st) & ST_REFS))
                break;
            if (st & ST_CLOCK) {
                if (CAS(&s->state, &st, st & ~(uint64_t)ST_CLOCK))
                    break;
                continue; /* st reloaded */
            }
            if (kill(lru, i, st, c)) {
                lru->evictions++;
                return 1;
            }
            st = LD(&s->state);
        }
    }
    return 0;
}

void byval_lru_detach(byval_lru_t *lru, uint32_t idx, lru_chain_t *c)
{
    lru_slot_t *s = byval_lru_slot(lru, idx);
    uint64_t st = LD(&s->state);
    lru->removals++;
    for (;;) {
        if (ST_LOW(st) & ST_REFS) {
            /* Referenced: out of lookups and of the bound; the slot stays
             * in the table so that the last put finds it. */
            if (CAS(&s->state, &st, st | ST_ZOMBIE)) {
                ST(&lru->count, lru->count - 1);
                ST(&lru->zombies, lru->zombies + 1);
                return;
            }
        } else if (kill(lru, idx, st, c)) {
            return;
        } else {
            st = LD(&s->state);
        }
    }
}

void byval_lru_trim_locked(byval_lru_t *lru, lru_chain_t *c)
{
    while (lru->count > LD(&lru->capacity) && byval_lru_evict_one(lru, c))
        ;
}

void byval_lru_release(byval_lru_t *lru, lru_chain_t *c)
{
    if (!c->head)
        return;
    if (lru->evict)
        for (uint32_t i = c->head; i; i = LD(&byval_lru_slot(lru, i)->hnext)) {
            lru_slot_t *s = byval_lru_slot(lru, i);
            lru->evict(lru->ctx, s->key, LD(&s->value));
        }
    /* Only now may the slots be reused: the callbacks read their keys. */
    byval_lock(&lru->lock);
    for (uint32_t i = c->head, nx; i; i = nx) {
        nx = LD(&byval_lru_slot(lru, i)->hnext);
        byval_lru_slot_free(lru, i);
    }
    byval_unlock(&lru->lock);
    c->head = c->tail = 0;
}

void byval_lru_purge(byval_lru_t *lru, uint32_t idx, lru_chain_t *c)
{
    lru_slot_t *s = byval_lru_slot(lru, idx);
    uint64_t st = LD(&s->state);
    /* Whatever its references: a lock-free put or get then fails its CAS
     * (DEAD), a zombie put finds it DEAD under the lock. */
    while (!(st & ST_DEAD) && !CAS(&s->state, &st, GEN_BITS(st) | ST_DEAD))
        ;
    if (st & ST_DEAD)
        return;
    byval_lru_table_del(lru, idx);
    if (st & ST_ZOMBIE)
        ST(&lru->zombies, lru->zombies - 1);
    else
        ST(&lru->count, lru->count - 1);
    lru->removals++;
    byval_lru_chain_push(lru, c, idx);
}

int byval_lru_evict_slot(byval_lru_t *lru, uint32_t idx, lru_chain_t *c)
{
    uint64_t st = LD(&byval_lru_slot(lru, idx)->state);
    while (!(st & (ST_DEAD | ST_ZOMBIE)) && !(ST_LOW(st) & ST_REFS)) {
        if (kill(lru, idx, st, c)) {
            lru->evictions++;
            return 1;
        }
        st = LD(&byval_lru_slot(lru, idx)->state);
    }
    return 0;
}
