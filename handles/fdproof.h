/* SPDX-License-Identifier: MIT */
/*
 * fdproof.h - "fd N still refers to the object it referred to then",
 * without holding a reference (fdproof.c says how). One rule for everything
 * the exporter serves by number: the broker's offers (broker_offers.c) and
 * the pidfd_getfd rescue's registry (registry_fds.c), each with its own
 * private epoll instance.
 */
#ifndef BYVAL_HANDLES_FDPROOF_H
#define BYVAL_HANDLES_FDPROOF_H

#include <sys/types.h>

typedef enum { BYVAL_PROOF_EPOLL = 1, BYVAL_PROOF_INODE = 2 } byval_proof_kind_t;

/* What fd referred to when it was recorded. */
typedef struct byval_fdproof {
    int fd;
    int accmode; /* O_ACCMODE bits then */
    dev_t dev;
    ino_t ino;
    byval_proof_kind_t kind;
} byval_fdproof_t;

/* Record what fd refers to now in *p, in the private epoll instance epfd
 * (the caller's, created with epoll_create1). 0, or -1 with errno:
 * ENOTSUP when the file can be proven neither by epoll nor by its inode
 * (it does not poll and is not a regular file), EBADF when fd is closed. */
int byval_fdproof_take(int epfd, int fd, byval_fdproof_t *p);

/* 1 when p->fd still refers to what *p recorded, else 0. */
int byval_fdproof_same(int epfd, const byval_fdproof_t *p);

/* A duplicate (O_CLOEXEC) of p->fd in *dup_p, proven both before and after
 * it is made (a close and reuse racing it is refused, never served).
 * 0, -ESTALE (no longer what was recorded), or -errno of the duplicate. */
int byval_fdproof_dup(int epfd, const byval_fdproof_t *p, int *dup_p);

/* Forget *p: its epoll item goes now where p->fd is still that file (it
 * would go anyway when the file is released). */
void byval_fdproof_drop(int epfd, const byval_fdproof_t *p);

#endif
