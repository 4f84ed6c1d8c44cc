/* SPDX-License-Identifier: MIT */
/* bgthread.c - see bgthread.h. */
#include "handles/bgthread.h"

#include <signal.h>

int byval_bgthread_start(void *(*fn)(void *), void *arg, pthread_t *t_p)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* the new thread inherits the mask */
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    pthread_t t;
    int rc = pthread_create(&t, &attr, fn, arg);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc == 0 && t_p)
        *t_p = t;
    return rc;
}
