/* SPDX-License-Identifier: MIT */
/* registry_internal.h - what registry_view.c (views, attach) and
 * registry_watch.c (the watcher thread, the list of views) share. */
#ifndef BYVAL_HANDLES_REGISTRY_INTERNAL_H
#define BYVAL_HANDLES_REGISTRY_INTERNAL_H

#include <pthread.h>
#include <sys/epoll.h>

#include "cache/locks.h"
#include "handles/registry_view.h"
#include "handles/fdcheck.h"

/* Reports of one exporter's frees at most once per this (a burst, or a
 * peer writing its pipe in a loop, coalesces into one rescan). */
#define BYVAL_REG_RESCAN_NS 5000000u

/* How often the watcher asks whether each exporter it can see in /proc
 * still holds its registry (registry_watch.c: the pipe's hang-up alone
 * depends on who else holds the pipe). */
#define BYVAL_REG_LIVE_NS 1000000000u

/* What a view's pipe is watched for (edge-triggered: every write). */
#define VIEW_EVENTS (EPOLLIN | EPOLLET | EPOLLRDHUP)

/* What an epoll event points at: a view, a pidfd watched for exit, or the
 * watcher's own kick (an eventfd: views to evict). */
enum { WATCH_VIEW = 1, WATCH_PIDFD = 2, WATCH_KICK = 3 };

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
    int pipe_fd;   /* the pipe's read end: watched, never read (registry_watch.c) */
    uint64_t used; /* LRU tick (w.lock) */
    /* The watcher's alone: the rate limit (BYVAL_REG_RESCAN_NS), and the
     * exporter's seq when the last scan began (set at attach). */
    uint64_t last_ns, due_ns, seen;
    int held; /* disarmed until due_ns */
    int idle; /* wake-ups without a new seq since the last scan or arm */
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

/* The list of views and the watcher's state (registry_views.c). */
struct byval_reg_watch {
    byval_lock_t lock;
    byval_reg_view_t *head;
    pidfd_watch_t *pidfds;
    unsigned count;
    uint64_t tick; /* LRU clock */
    int epfd;
    int kick_fd; /* our eventfd: views to evict */
    int kick_kind;
    int started;         /* the thread (atomic: read unlocked by byval_reg_watch_need) */
    uint32_t live_round; /* the watcher's liveness passes (the watcher's alone) */
    int on_demand;       /* byval_reg_watch_on_demand */
    byval_reg_event_fn on_event;
};
extern struct byval_reg_watch byval_reg_w;

/* byval_reg_w.lock (rank REGISTRY_WATCH, cache/locks.h). */
void byval_reg_w_lock(void);

/* (locked) The epoll set, once per process: 0, or -1 (msg says why). */
int byval_reg_watch_setup(char *msg, size_t msglen);

/* (locked) The epoll set and the thread, once per process: 0, or -1
 * (msg says why). */
int byval_reg_watch_start(char *msg, size_t msglen);

/* (locked, started) Wake the watcher to evict views beyond the bound. */
void byval_reg_watch_kick(void);

/* The seals a registry page must carry on this kernel: F_SEAL_SHRINK |
 * F_SEAL_GROW, and F_SEAL_FUTURE_WRITE where the kernel knows it (5.1
 * and later; exporter and importer share the kernel). Probed once. */
int byval_reg_page_seals(void);

/* A second open file of fd (through /proc/self/fd) with flags: one whose
 * flags no other process can change. -1 with errno. */
int byval_reg_reopen(int fd, int flags);

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
