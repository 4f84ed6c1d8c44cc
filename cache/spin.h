/* SPDX-License-Identifier: MIT */
/*
 * spin.h - a test-and-test-and-set lock for critical sections of a few
 * dozen instructions that never block (the pointer map's). Taking it is
 * one atomic exchange and releasing it one plain store, where a pthread
 * mutex costs a locked instruction each way: a cached open+close takes
 * the pointer map's lock twice, and locked instructions are most of a
 * cache hit's cost on large virtual machines. A waiter spins with pause,
 * then yields, so a holder preempted mid-section is not starved.
 */
#ifndef BYVAL_CACHE_SPIN_H
#define BYVAL_CACHE_SPIN_H

#include <sched.h>

#include "cache/locks.h"

typedef struct byval_spin {
    int locked;
    unsigned rank; /* cache/locks.h: checked in debug builds */
} byval_spin_t;

static inline void byval_spin_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Without the rank check: for the fork handlers (cache/locks.h). */
static inline void byval_spin_lock_raw(byval_spin_t *l)
{
    for (unsigned spins = 0;; spins++) {
        if (!__atomic_load_n(&l->locked, __ATOMIC_RELAXED) &&
            !__atomic_exchange_n(&l->locked, 1, __ATOMIC_ACQUIRE))
            return;
        if (spins < 64)
            byval_spin_relax();
        else
            sched_yield();
    }
}

static inline void byval_spin_unlock_raw(byval_spin_t *l)
{
    __atomic_store_n(&l->locked, 0, __ATOMIC_RELEASE);
}

static inline void byval_spin_lock(byval_spin_t *l)
{
    byval_rank_enter(l->rank);
    byval_spin_lock_raw(l);
}

static inline void byval_spin_unlock(byval_spin_t *l)
{
    byval_spin_unlock_raw(l);
    byval_rank_leave(l->rank);
}

/* A fork child: the holder may be a thread that does not exist there. */
static inline void byval_spin_reset(byval_spin_t *l)
{
    __atomic_store_n(&l->locked, 0, __ATOMIC_RELAXED);
}

#endif
