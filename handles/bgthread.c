/* SPDX-License-Identifier: MIT */
/*
 * bgthread.c - see bgthread.h.
 *
 * A start ends when the new thread runs our code, not when pthread_create
 * returns, and it holds the BGTHREAD lock until then, which fork's prepare
 * takes (cache/locks.h). Between the two a new thread is still inside the
 * C library's and a sanitizer's start-up (ASan registers it in its thread
 * registry under a lock): a fork landing there gave the child that lock
 * held by a thread it does not have, and the child's own first thread
 * start (the watcher, at its first open) blocked in pthread_create for ever.
 */
#include "handles/bgthread.h"

#include <errno.h>
#include <semaphore.h>
#include <signal.h>

#include "cache/locks.h"

static byval_lock_t start_lock = BYVAL_LOCK_INIT(BGTHREAD);
BYVAL_LOCK_STATIC(bgthread, &start_lock);

typedef struct start {
    void *(*fn)(void *);
    void *arg;
    sem_t running;
} start_t;

static void *trampoline(void *p)
{
    start_t *s = p;
    void *(*fn)(void *) = s->fn;
    void *arg = s->arg;
    sem_post(&s->running); /* the starter's: not touched after this */
    return fn(arg);
}

int byval_bgthread_start(void *(*fn)(void *), void *arg, pthread_t *t_p)
{
    start_t s = {.fn = fn, .arg = arg};
    if (sem_init(&s.running, 0, 0) != 0)
        return errno;
    sigset_t all, old;
    sigfillset(&all);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    pthread_t t;
    byval_lock(&start_lock);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* the new thread inherits the mask */
    int rc = pthread_create(&t, &attr, trampoline, &s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    while (rc == 0 && sem_wait(&s.running) != 0 && errno == EINTR)
        ;
    byval_unlock(&start_lock);
    pthread_attr_destroy(&attr);
    sem_destroy(&s.running);
    if (rc == 0 && t_p)
        *t_p = t;
    return rc;
}
