/* SPDX-License-Identifier: MIT */
/*
 * bgthread.c - see bgthread.h.
 *
 * A start ends when the new thread runs our code, not when pthread_create
 * returns: in between, the new thread is still inside the C library's and
 * a sanitizer's start-up (ASan registers it in its thread registry under
 * a lock). A fork landing there gave the child that lock held by a thread
 * it does not have, and the child's own first thread start (the watcher,
 * at its first open) blocked in pthread_create for ever. So fork's
 * prepare (the BGTHREAD rank, cache/locks.h) waits until no start is
 * pending, and holds the start lock so that none begins.
 *
 * The starter does not wait for its thread to run (on a VM the
 * new thread's first run is a scheduler wake-up away, 70-170 us that the
 * first import paid): it counts the start as pending and the new thread
 * ends it, under the same lock, before anything else.
 */
#include "handles/bgthread.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>

#include "cache/locks.h"

static byval_lock_t start_lock = BYVAL_LOCK_INIT(BGTHREAD);
static pthread_cond_t started_cond = PTHREAD_COND_INITIALIZER;
static unsigned pending; /* threads created that have not run our code yet */

/* fork's prepare: wait until every start ended, then hold the lock (no
 * start begins until the parent's and the child's drop). */
static void fork_take(void)
{
    pthread_mutex_lock(&start_lock.m);
    while (pending)
        pthread_cond_wait(&started_cond, &start_lock.m);
}

static void fork_drop(void)
{
    pthread_mutex_unlock(&start_lock.m);
}
BYVAL_LOCK_CLASS(bgthread, BGTHREAD, fork_take, fork_drop);

/* For tests (test/unit): called by every new thread before it ends its
 * start; a test delays or holds the start with it. */
void (*byval_bgthread_test_hook)(void);

typedef struct start {
    void *(*fn)(void *);
    void *arg;
} start_t;

static void *trampoline(void *p)
{
    start_t s = *(start_t *)p;
    free(p);
    void (*hook)(void) = __atomic_load_n(&byval_bgthread_test_hook, __ATOMIC_ACQUIRE);
    if (hook)
        hook();
    byval_lock(&start_lock);
    pending--;
    pthread_cond_broadcast(&started_cond);
    byval_unlock(&start_lock);
    return s.fn(s.arg);
}

int byval_bgthread_start(void *(*fn)(void *), void *arg, pthread_t *t_p)
{
    start_t *s = malloc(sizeof(*s)); /* the new thread's: it frees it */
    if (!s)
        return ENOMEM;
    *s = (start_t){fn, arg};
    sigset_t all, old;
    sigfillset(&all);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    /* The watcher runs the driver's close (an import's release) on this
     * stack. Measured with the test drivers: 8.4 KiB at most (Level Zero
     * event pools), 5.8 KiB for the broker; a real driver's needs are its
     * own, so leave it room: only the pages touched are ever backed. */
    pthread_attr_setstacksize(&attr, BYVAL_BGTHREAD_STACK);
    pthread_t t;
    byval_lock(&start_lock);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* the new thread inherits the mask */
    int rc = pthread_create(&t, &attr, trampoline, s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc == 0)
        pending++;
    byval_unlock(&start_lock);
    pthread_attr_destroy(&attr);
    if (rc != 0)
        free(s);
    else if (t_p)
        *t_p = t;
    return rc;
}
