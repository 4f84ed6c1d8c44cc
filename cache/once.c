/* SPDX-License-Identifier: MIT */
/*
 * once.c - byval_once (see locks.h): once-only initialisation whose fork
 * story is glibc's pthread_once's, whatever the C library or sanitizer.
 * A thread marks an init running (with the fork generation) under the
 * lock, runs it unlocked, and marks it done under the lock; others wait
 * on the condition variable. A fork child starts a new generation: an
 * init marked running in an older one was left by a thread the child
 * does not have, so the child's first caller runs it again (what it had
 * done of it is the parent's state, which each module's fork handler
 * already resets: caches empty themselves in a child).
 */
#include <pthread.h>

#include "cache/locks.h"

enum { ONCE_NEW = 0, ONCE_DONE = 1, ONCE_RUNNING = 2 }; /* running: | generation << 2 */

static byval_lock_t once_lock = BYVAL_LOCK_INIT(ONCE);
static pthread_cond_t once_cond = PTHREAD_COND_INITIALIZER;
static unsigned generation; /* forks since load, in this process's line (once_lock) */
BYVAL_LOCK_STATIC(once, &once_lock);

static void fork_child(void)
{
    generation++;
    pthread_cond_init(&once_cond, NULL); /* its waiters are not in the child */
}
BYVAL_FORK_CHILD(once, fork_child);

void byval_once(byval_once_t *o, void (*fn)(void))
{
    if (__atomic_load_n(&o->state, __ATOMIC_ACQUIRE) == ONCE_DONE)
        return;
    byval_lock(&once_lock);
    const int mine = (int)(ONCE_RUNNING | (generation & 0x1fffffffu) << 2);
    for (;;) {
        int s = __atomic_load_n(&o->state, __ATOMIC_RELAXED);
        if (s == ONCE_DONE) {
            byval_unlock(&once_lock);
            return;
        }
        if (s != mine) /* new, or left running by a thread of the parent */
            break;
        pthread_cond_wait(&once_cond, &once_lock.m);
    }
    __atomic_store_n(&o->state, mine, __ATOMIC_RELAXED);
    byval_unlock(&once_lock);
    fn();
    byval_lock(&once_lock);
    __atomic_store_n(&o->state, ONCE_DONE, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&once_cond);
    byval_unlock(&once_lock);
}
