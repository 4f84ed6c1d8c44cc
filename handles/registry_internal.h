/* SPDX-License-Identifier: MIT */
/* registry_internal.h - what registry_view.c (views, attach) and
 * registry_watch.c (the watcher thread, the list of views) share. */
#ifndef BYVAL_HANDLES_REGISTRY_INTERNAL_H
#define BYVAL_HANDLES_REGISTRY_INTERNAL_H

#include <pthread.h>

#include "handles/registry_view.h"

#define REG_BYTES (sizeof(byval_reg_header_t) + BYVAL_REG_SLOTS * sizeof(byval_reg_slot_t))

/* What an epoll event points at: a view, or a pidfd watched for exit. */
enum { WATCH_VIEW = 1, WATCH_PIDFD = 2 };

typedef struct pidfd_watch {
    int kind; /* WATCH_PIDFD */
    int fd;
    void (*fn)(void *arg);
    void *arg;
    struct pidfd_watch *next; /* w.pidfds, under w.lock */
} pidfd_watch_t;

struct byval_reg_view {
    int kind; /* WATCH_VIEW */
    struct byval_reg_view *next;
    unsigned refs; /* the list's one while listed, plus one per user */
    int gone;
    int pipe_fd;
    uint32_t pidns, pid;
    uint64_t identity;
    const byval_reg_header_t *hdr;
    const byval_reg_slot_t *slot;
};

/* A view with the list's reference (not listed yet): registry_view.c
 * makes it, byval_reg_publish lists and watches it. */
void byval_reg_view_free(byval_reg_view_t *v);

/* The listed view of (pidns, pid, identity) not gone, referenced, or NULL. */
byval_reg_view_t *byval_reg_lookup(uint32_t pidns, uint32_t pid, uint64_t identity);

/* List v and watch it (starting the watcher), or use a twin another
 * thread listed meanwhile (v is freed then). The result is referenced for
 * the caller; NULL (v freed, msg says why) when it cannot be watched. */
byval_reg_view_t *byval_reg_publish(byval_reg_view_t *v, char *msg, size_t msglen);

#endif
