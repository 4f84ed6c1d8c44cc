/* SPDX-License-Identifier: MIT */
/* fdcheck.h - is an exporter's fd the object a handle describes, of a kind
 * we may touch, proven without blocking (fdcheck.c); and closing an fd
 * nothing vouches for. */
#ifndef BYVAL_HANDLES_FDCHECK_H
#define BYVAL_HANDLES_FDCHECK_H

#include <sys/stat.h>

#include "handles/self.h"

enum { FDK_NONE, FDK_SHMEM, FDK_DMABUF, FDK_DMABUF_ANON, FDK_NVIDIA, FDK_PIPE };

/* What the check before pidfd_getfd saw, for the check after it. */
typedef struct byval_fd_seen {
    uint64_t dev, ino;
    int kind; /* FDK_*; 0: nothing seen */
} byval_fd_seen_t;

/* statx from the kernel's cached attributes (AT_STATX_DONT_SYNC): never a
 * FUSE daemon's or a network server's round trip. */
int byval_fdk_stat(int dirfd, const char *path, int flags, struct statx *stx);
uint64_t byval_fdk_dev(const struct statx *stx);
/* The kind statx alone proves, else FDK_NONE. */
int byval_fdk_classify_fast(const struct statx *stx);

/* Before pidfd_getfd(pidfd, fd), through /proc/pid/fd/fd (opening
 * nothing): a proven object of kind obj with the record's inode (low 32
 * bits fd_ino) and, when size != 0, size in pages? BYVAL_OK with *seen
 * filled; FDKIND, BADFD, GONE, PERM, NOFD or SYS with one line in msg. */
byval_status_t byval_fd_precheck(int pidfd, uint32_t pid, uint32_t fd, uint32_t fd_ino,
                                 uint64_t size, byval_obj_t obj, byval_fd_seen_t *seen, char *msg,
                                 size_t msglen);

/* After: is dup (a duplicate of fd in pid) the object seen before (NULL:
 * nothing was, classify it now), of kind obj, with that inode and size?
 * BYVAL_OK, FDKIND or SYS with one line in msg. */
byval_status_t byval_check_fd_kind(int dup, uint32_t pid, uint32_t fd, uint32_t fd_ino,
                                   uint64_t size, byval_obj_t obj, const byval_fd_seen_t *seen,
                                   char *msg, size_t msglen);

/* Is /proc this process's pid namespace's (/proc/PID the pid we mean)? */
int byval_proc_is_ours(void);

/* Close an fd nothing vouches for: at once when its close cannot wait on
 * a file system, else on a thread of its own (a FUSE daemon may never
 * answer its FLUSH). 0, or -1 when it had to stay open. */
int byval_fd_release(int fd);

#endif
