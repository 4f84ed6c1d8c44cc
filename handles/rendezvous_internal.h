/* SPDX-License-Identifier: MIT */
/* rendezvous_internal.h - the rendezvous directory's state and helpers,
 * shared by its checks and connect (rendezvous.c) and the exporter's
 * listening socket (rendezvous_listen.c). */
#ifndef BYVAL_HANDLES_RENDEZVOUS_INTERNAL_H
#define BYVAL_HANDLES_RENDEZVOUS_INTERNAL_H

#include <sys/stat.h>
#include <sys/un.h>

#include "handles/rendezvous.h"

typedef struct byval_rdv {
    int dirfd;     /* O_PATH, the checked directory; -1: none */
    int via_proc;  /* bind/connect through /proc/self/fd/DIRFD/NAME */
    long gid;      /* BYVAL_RENDEZVOUS_NO_GID or the trusted group */
    char dir[200]; /* as configured, for messages and the fallback path */
} byval_rdv_t;

/* Written by byval_rendezvous_setup only. */
extern byval_rdv_t byval_rdv;

/* The address of name in the directory. 0, or -1 when it does not fit. */
int byval_rdv_addr(struct sockaddr_un *a, const char *name);

/* Is a file of this owner one we may use (our uid, or the group's)? */
int byval_rdv_trusted_owner(const struct stat *st);

#endif
