/* SPDX-License-Identifier: MIT */
/* bgthread.h - ipcbyval's own background threads (the broker, the
 * registry watcher, the closer of unsafe fds): detached, stacks with room
 * for a driver call, and every signal blocked, so that the application's
 * signals stay with its own threads. */
#ifndef BYVAL_HANDLES_BGTHREAD_H
#define BYVAL_HANDLES_BGTHREAD_H

#include <pthread.h>

/* Start fn(arg) detached, without waiting for it to run (a fork waits
 * instead). 0, or pthread_create's (or malloc's) error number. */
int byval_bgthread_start(void *(*fn)(void *), void *arg, pthread_t *t_p);

/* The threads' stack size: room for a driver call (bgthread.c). */
#define BYVAL_BGTHREAD_STACK (1024 * 1024)

/* For tests: run by every new thread first, before its start ends (a
 * test holds or delays a start with it). NULL outside tests. */
extern void (*byval_bgthread_test_hook)(void);

#endif
