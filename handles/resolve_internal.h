/* SPDX-License-Identifier: MIT */
/* resolve_internal.h - helpers shared by self.c and resolve.c. */
#ifndef BYVAL_HANDLES_RESOLVE_INTERNAL_H
#define BYVAL_HANDLES_RESOLVE_INTERNAL_H

#include <errno.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <sys/types.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif
#define BYVAL_PIDFS_MAGIC 0x50494446u

/* Start time (clock ticks after boot) of pid, 0 with *err_p = errno. */
uint64_t byval_proc_start_time(pid_t pid, int *err_p);

/* 1 if pidfd lives on pidfs (its inode then identifies the process). */
int byval_pidfd_is_pidfs(int pidfd);

#endif
