/* SPDX-License-Identifier: MIT */
/*
 * fdproof.h - "fd N still refers to the object it referred to then",
 * without holding a reference (fdproof.c says how), and the table of such
 * proofs that everything the exporter serves by number keeps: the broker's
 * offers (broker_serve.c) and the rescue's registry (registry_fds.c).
 */
#ifndef BYVAL_HANDLES_FDPROOF_H
#define BYVAL_HANDLES_FDPROOF_H

#include <stdint.h>
#include <sys/types.h>

typedef enum { BYVAL_PROOF_EPOLL = 1, BYVAL_PROOF_INODE = 2 } byval_proof_kind_t;

/* What fd referred to when it was recorded. */
typedef struct byval_fdproof {
    int fd;
    int accmode; /* O_ACCMODE bits then */
    dev_t dev;
    ino_t ino;
    byval_proof_kind_t kind;
    int open; /* the broker's: served to the group without a tag */
} byval_fdproof_t;

/* A table of proofs with its own epoll instance, under its owner's lock. */
typedef struct byval_fdtab {
    int epfd; /* -1 until the first add */
    uint32_t n, max;
    byval_fdproof_t *e; /* max entries, allocated at the first add */
} byval_fdtab_t;

/* The entry of fd, or NULL. */
byval_fdproof_t *byval_fdtab_find(byval_fdtab_t *t, int fd);

/* Record fd (a number that now holds another file than its entry's is
 * recorded anew): its entry, or NULL with errno (ENOSPC: full). */
byval_fdproof_t *byval_fdtab_add(byval_fdtab_t *t, int fd);

/* Forget x; forget every entry whose number no longer holds its file. */
void byval_fdtab_drop(byval_fdtab_t *t, byval_fdproof_t *x);
void byval_fdtab_remove(byval_fdtab_t *t, int fd); /* fd's entry, if any */
void byval_fdtab_sweep(byval_fdtab_t *t);

/* A duplicate of x proven before and after (0), or -errno; -ESTALE
 * (closed or reused since) drops x. */
int byval_fdtab_dup(byval_fdtab_t *t, byval_fdproof_t *x, int *dup_p);

/* A fork child: the parent's epoll instance is shared through the
 * inherited fd (changing it would change the parent's): ours goes, and
 * every entry. */
void byval_fdtab_forget(byval_fdtab_t *t);

#endif
