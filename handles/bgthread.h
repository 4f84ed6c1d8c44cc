/* SPDX-License-Identifier: MIT */
/* bgthread.h - ipcbyval's own background threads (the broker, the
 * registry watcher, the closer of unsafe fds): detached, small stacks, and
 * every signal blocked, so that the application's signals stay with its
 * own threads. */
#ifndef BYVAL_HANDLES_BGTHREAD_H
#define BYVAL_HANDLES_BGTHREAD_H

#include <pthread.h>

/* Start fn(arg) detached. 0, or pthread_create's error number. */
int byval_bgthread_start(void *(*fn)(void *), void *arg, pthread_t *t_p);

#endif
