/* SPDX-License-Identifier: MIT */
/* registry_internal.h - a registry view, as registry_view.c (attach,
 * reads) and registry_watch.c (the list, the watcher) share it; what
 * registry.c and registry_view.c share of the page. */
#ifndef BYVAL_HANDLES_REGISTRY_INTERNAL_H
#define BYVAL_HANDLES_REGISTRY_INTERNAL_H

#include "handles/fdcheck.h"
#include "handles/registry_view.h"

/* What a watcher's epoll event points at (the first int of each). */
enum { WATCH_VIEW = 1, WATCH_PIDFD = 2, WATCH_KICK = 3 };

struct byval_reg_view {
    int kind; /* WATCH_VIEW */
    struct byval_reg_view *next;
    unsigned refs; /* the list's one while listed, plus one per user */
    /* pipe_fd: the pipe's read end, watched, never read (registry_watch.c) */
    int gone, pipe_fd;
    uint64_t used; /* LRU tick (w.lock) */
    /* The watcher's alone: the rate limit (BYVAL_REG_RESCAN_NS), the
     * exporter's seq when the last scan began (set at attach); held:
     * disarmed until due_ns; idle: wake-ups without a new seq since the
     * last scan or arm. */
    uint64_t last_ns, due_ns, seen;
    int held, idle;
    uint32_t pidns, pid;
    uint64_t identity;
    /* Where the exporter holds its registry, for the watcher's liveness
     * check: its pid here (0: not visible, no check), the fd number in
     * it and the page's inode. live_round: the watcher's alone. */
    int live_pid;
    uint32_t live_fd, live_round;
    uint64_t page_dev, page_ino;
    const byval_reg_header_t *hdr;
    const byval_reg_slot_t *slot;
    /* Where byval_reg_find_fd starts (relaxed, any thread): the slot after
     * its last find. A manifest's chunks were published in order, so a
     * reservation's fds are found in one pass, not one scan each. Only a
     * start: what is found is checked in full. */
    uint32_t find_from;
};

/* The seals a registry page must carry on this kernel: F_SEAL_SHRINK |
 * F_SEAL_GROW, and F_SEAL_FUTURE_WRITE where the kernel knows it (5.1
 * and later; exporter and importer share the kernel). Probed once. */
int byval_reg_page_seals(void);

/* A view with the list's reference (not listed yet): registry_view.c
 * makes it, byval_reg_publish lists and watches it. */
void byval_reg_view_free(byval_reg_view_t *v);

/* The listed view of (pidns, pid) whose identity matches under mask
 * (UINT32_MAX: a short record's id32), not gone, referenced; or NULL. */
byval_reg_view_t *byval_reg_lookup(uint32_t pidns, uint32_t pid, uint64_t identity, uint64_t mask);

/* List v and watch it (starting the watcher), or use a twin another
 * thread listed meanwhile (v is freed then). The result is referenced for
 * the caller; NULL (v freed, msg says why) when it cannot be watched. */
byval_reg_view_t *byval_reg_publish(byval_reg_view_t *v, char *msg, size_t msglen);

#endif
