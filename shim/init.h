/* SPDX-License-Identifier: MIT */
/*
 * init.h - lazy, once-only initialisation. Nothing happens at load time:
 * a process that never calls a GPU API (a shell, mpirun) is untouched.
 */
#ifndef BYVAL_SHIM_INIT_H
#define BYVAL_SHIM_INIT_H

/* Initialise on first call (thread-safe, recursion-safe). Returns 1 when
 * ipcbyval is enabled, 0 for pure pass-through. */
int byval_init(void);

/* Whether ipcbyval is enabled, initialising if needed, also from inside
 * ipcbyval (a driver's own system call made while we called into it);
 * 0 only during the initialisation itself. */
int byval_enabled(void);

/* 1 while the calling thread is inside ipcbyval (wrappers pass through). */
int byval_in_shim(void);

/* Mark the calling thread as inside ipcbyval around calls into the real
 * driver, so that our own table wrappers on that path pass through. */
void byval_enter(void);
void byval_leave(void);

#endif
