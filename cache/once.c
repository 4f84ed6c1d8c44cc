/* SPDX-License-Identifier: MIT */
/*
 * once.c - byval_once (see locks.h): once-only initialisation whose fork
 * story is the ONCE rank's. A thread marks an init running under the lock,
 * runs it unlocked, and marks it done under the lock; others wait on the
 * condition variable. fork's prepare takes the lock and waits until no
 * init of another thread runs (the forking thread's own, if it forks from
 * inside one, are its business), so the child sees every init either not
 * started or done.
 */
#include <pthread.h>

#include "cache/locks.h"

enum { ONCE_NEW = 0, ONCE_RUNNING, ONCE_DONE };

static byval_lock_t once_lock = BYVAL_LOCK_INIT(ONCE);
static pthread_cond_t once_cond = PTHREAD_COND_INITIALIZER;
static unsigned running;        /* inits running, every thread (once_lock) */
static __thread unsigned mine;  /* those of this thread */

static void fork_take(void)
{
    pthread_mutex_lock(&once_lock.m);
    while (running > mine)
        pthread_cond_wait(&once_cond, &once_lock.m);
}

static void fork_drop(void)
{
    pthread_mutex_unlock(&once_lock.m);
}
BYVAL_LOCK_CLASS(once, ONCE, fork_take, fork_drop);

void byval_once(byval_once_t *o, void (*fn)(void))
{
    if (__atomic_load_n(&o->state, __ATOMIC_ACQUIRE) == ONCE_DONE)
        return;
    byval_lock(&once_lock);
    while (__atomic_load_n(&o->state, __ATOMIC_RELAXED) == ONCE_RUNNING)
        pthread_cond_wait(&once_cond, &once_lock.m);
    if (__atomic_load_n(&o->state, __ATOMIC_RELAXED) == ONCE_DONE) {
        byval_unlock(&once_lock);
        return;
    }
    __atomic_store_n(&o->state, ONCE_RUNNING, __ATOMIC_RELAXED);
    running++;
    mine++;
    byval_unlock(&once_lock);
    fn();
    byval_lock(&once_lock);
    __atomic_store_n(&o->state, ONCE_DONE, __ATOMIC_RELEASE);
    running--;
    mine--;
    pthread_cond_broadcast(&once_cond);
    byval_unlock(&once_lock);
}
