/* SPDX-License-Identifier: MIT */
/* init.h - lazy, once-only initialisation and the re-entry guard. Nothing
 * happens at load time: a process that never calls a GPU API (a shell,
 * mpirun) is untouched. */
#ifndef BYVAL_CACHE_INIT_H
#define BYVAL_CACHE_INIT_H

/* init.c's state, read inline on every wrapped call (a call into init.c
 * would cost a cached re-open a few ns). */
extern __thread int byval_init_depth_ __attribute__((tls_model("initial-exec")));
extern int byval_init_done_; /* init finished (release/acquire) */
extern int byval_init_enabled_;
int byval_init_slow(void);

/* Initialise on first call (thread-safe, recursion-safe). Returns 1 when
 * ipcbyval is enabled, 0 for pure pass-through; a call made from inside
 * ipcbyval (or during its initialisation) passes straight through. */
static inline int byval_init(void)
{
    if (__builtin_expect(!byval_init_depth_ && __atomic_load_n(&byval_init_done_, __ATOMIC_ACQUIRE),
                         1))
        return byval_init_enabled_;
    return byval_init_slow();
}

/* Whether ipcbyval is enabled, initialising if needed, also from inside
 * ipcbyval (a driver's own system call made while we called into it);
 * 0 only during the initialisation itself. */
int byval_enabled(void);

/* 1 while the calling thread is inside ipcbyval (wrappers pass through). */
#define byval_in_shim() (byval_init_depth_ != 0)
/* Mark the calling thread as inside ipcbyval around calls into the real
 * driver, so that our own table wrappers on that path pass through. */
#define byval_enter() ((void)byval_init_depth_++)
#define byval_leave() ((void)byval_init_depth_--)

/* doctor.c: print `ipcbyval-run --doctor`'s report; 0 when by-value works. */
int byval_doctor(void);

#endif
