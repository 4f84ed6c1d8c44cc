/* SPDX-License-Identifier: MIT */
/*
 * exporters.c - the importer's table of exporters (exporters.h): one
 * pidfd each, polled for exit and lent to cold opens. A pidfd lent out
 * stays open until its loan comes back (closing it would let the number
 * go to another file under the borrower's pidfd_getfd): an exporter that
 * exits with loans out waits in `drain`.
 */
#include "cache/exporters.h"

#include <pthread.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cache/locks.h"
#include "cache/log.h"
#include "cache/stats.h"
#include "handles/registry_view.h"
#include "handles/resolve.h"

/* An importer talks to its peers on one node: a few hundred at most. */
#define EXPORTERS_MAX 1024
#define EXPORTERS_DRAIN 64
#define EXPORTERS_POLL_NS 1000000LL

typedef struct kept {
    byval_exporter_id_t id;
    int pidfd;
    unsigned loans;
} kept_t;

static struct {
    byval_lock_t lock;
    unsigned count;
    kept_t k[EXPORTERS_MAX];
    unsigned ndrain;
    kept_t drain[EXPORTERS_DRAIN]; /* exited, loans out: id unused */
    byval_exporter_exit_fn handler;
    int64_t last_poll_ns;
} ex = {.lock = BYVAL_LOCK_INIT(EXPORTERS)};

/* fork(): the forking thread holds the lock across it (no other thread
 * is inside the table then), the parent lets go, the child starts over. */
BYVAL_LOCK_STATIC(exporters, &ex.lock);

static void fork_child(void)
{
    /* The child did not import anything and borrows nothing (only the
     * forking thread exists): forget the parent's exporters. Closing the
     * inherited pidfds touches no driver state. */
    for (unsigned i = 0; i < ex.count; i++)
        close(ex.k[i].pidfd);
    for (unsigned i = 0; i < ex.ndrain; i++)
        close(ex.drain[i].pidfd);
    ex.ndrain = 0;
    __atomic_store_n(&ex.count, 0, __ATOMIC_RELAXED);
}
BYVAL_FORK_CHILD(exporters, fork_child);

void byval_exporters_on_exit(byval_exporter_exit_fn fn)
{
    __atomic_store_n(&ex.handler, fn, __ATOMIC_RELEASE);
}

/* (locked) The kept entry of id, or NULL. */
static kept_t *find_locked(const byval_exporter_id_t *id)
{
    for (unsigned i = 0; i < ex.count; i++)
        if (memcmp(&ex.k[i].id, id, sizeof(*id)) == 0)
            return &ex.k[i];
    return NULL;
}

int byval_exporters_hold(const byval_exporter_id_t *id)
{
    if (__atomic_load_n(&ex.count, __ATOMIC_RELAXED) == 0)
        return -1;
    int pidfd = -1;
    byval_lock(&ex.lock);
    kept_t *k = find_locked(id);
    if (k) {
        k->loans++;
        pidfd = k->pidfd;
    }
    byval_unlock(&ex.lock);
    return pidfd;
}

void byval_exporters_release(const byval_exporter_id_t *id, int pidfd)
{
    if (pidfd < 0)
        return;
    int close_fd = -1;
    byval_lock(&ex.lock);
    kept_t *k = find_locked(id);
    unsigned d = 0;
    while (!k && d < ex.ndrain && ex.drain[d].pidfd != pidfd)
        d++;
    if (k && k->pidfd == pidfd) {
        k->loans--; /* a loan back: open fds have unique numbers */
    } else if (k) {
        close_fd = pidfd;       /* a second pidfd of a kept exporter */
    } else if (d < ex.ndrain) { /* a loan of an exporter that exited meanwhile */
        if (--ex.drain[d].loans == 0) {
            close_fd = pidfd;
            ex.drain[d] = ex.drain[--ex.ndrain];
        }
    } else if (ex.count < EXPORTERS_MAX) {
        ex.k[ex.count] = (kept_t){*id, pidfd, 0};
        __atomic_store_n(&ex.count, ex.count + 1, __ATOMIC_RELAXED);
    } else {
        close_fd = pidfd;
        BYVAL_LOG_DEBUG("tracking %d exporters already; exit of pid %u not watched", EXPORTERS_MAX,
                        id->pid);
    }
    byval_unlock(&ex.lock);
    if (close_fd >= 0)
        close(close_fd);
}

unsigned byval_exporters_count(void)
{
    return __atomic_load_n(&ex.count, __ATOMIC_RELAXED);
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void poll_now(int64_t now)
{
    byval_exporter_id_t gone[64];
    int to_close[64];
    unsigned ngone = 0, nclose = 0;
    byval_exporter_exit_fn handler = __atomic_load_n(&ex.handler, __ATOMIC_ACQUIRE);
    byval_lock(&ex.lock);
    __atomic_store_n(&ex.last_poll_ns, now, __ATOMIC_RELAXED);
    for (unsigned i = 0; i < ex.count && ngone < 64;) {
        kept_t *k = &ex.k[i];
        /* Loans out and no room to wait: try again at a later poll. */
        if (!byval_pidfd_exited(k->pidfd) || (k->loans && ex.ndrain == EXPORTERS_DRAIN)) {
            i++;
            continue;
        }
        gone[ngone++] = k->id;
        if (k->loans)
            ex.drain[ex.ndrain++] = *k;
        else
            to_close[nclose++] = k->pidfd;
        __atomic_store_n(&ex.count, ex.count - 1, __ATOMIC_RELAXED);
        *k = ex.k[ex.count];
    }
    byval_unlock(&ex.lock);
    for (unsigned c = 0; c < nclose; c++)
        close(to_close[c]);
    for (unsigned g = 0; g < ngone; g++) {
        BYVAL_STAT_INC(exporter_exits);
        BYVAL_LOG_INFO("exporter pid %u exited: releasing its cached mappings", gone[g].pid);
        if (handler)
            handler(&gone[g]);
    }
}

void byval_exporters_poll(void)
{
    if (__atomic_load_n(&ex.count, __ATOMIC_RELAXED) == 0)
        return;
    int64_t now = now_ns();
    if (now - __atomic_load_n(&ex.last_poll_ns, __ATOMIC_RELAXED) < EXPORTERS_POLL_NS)
        return;
    poll_now(now);
}

static void poll_cb(void *arg)
{
    poll_now(now_ns());
}

int byval_exporters_gone(const byval_exporter_id_t *id)
{
    int pidfd = byval_exporters_hold(id);
    if (pidfd < 0)
        return 0;
    /* A process closes its files before it is seen exiting, and a GPU
     * process may take long to close its driver's: no wait here (the
     * watcher thread serves every exporter), the watcher tells us. */
    int exited = byval_pidfd_exited(pidfd);
    if (!exited && byval_reg_watch_exit(pidfd, poll_cb, NULL) != 0)
        BYVAL_LOG_DEBUG("pid %u: cannot watch its exit; its pidfd goes at the next poll", id->pid);
    byval_exporters_release(id, pidfd);
    if (exited)
        poll_now(now_ns());
    return exited;
}
