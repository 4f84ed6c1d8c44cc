/* SPDX-License-Identifier: MIT */
/*
 * registry_fds.c - the exporter's registry, by fd: which fd numbers this
 * process handed out as exported GPU memory (its own exports and the
 * application's: cuMemExportToShareableHandle, Level Zero handles of either
 * layout), so that the socket broker may serve exactly those to a peer
 * whose own pidfd_getfd the kernel refused (see registry.h).
 *
 * The rule this file enforces: serve fd N only while N still refers to the
 * open file that was exported (handles/fdproof.c: the private epoll
 * interest list for files that poll, the inode for regular files; any
 * other file cannot be proven and is not registered). Served under one
 * lock, checked both before and after the duplicate is made, so a close
 * and reuse racing the request is refused rather than served.
 *
 * Who registers and withdraws: the export core (cache/exports.h) for
 * ipcbyval's own exports, withdrawn with the export before the driver can
 * close the fd; the shim for the application's own exports (opaque layout
 * handles, cuMemExportToShareableHandle, zeMemGetFileDescriptor...),
 * whose closes ipcbyval does not see: those entries go when the proof
 * fails (at a request or a sweep).
 */
#include "handles/registry.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "cache/locks.h"
#include "handles/fdproof.h"

#define FDS_MAX 16384 /* registered numbers at once: at most one per fd */

typedef byval_fdproof_t fd_entry_t;

static struct {
    byval_lock_t lock;
    int epfd; /* -1 until the first registration */
    uint32_t n, sweep_at;
    uint64_t served, refused;
    fd_entry_t *e; /* FDS_MAX entries, allocated at the first registration */
} rf = {.lock = BYVAL_LOCK_INIT(REGISTRY_FDS), .epfd = -1, .sweep_at = 64};

BYVAL_LOCK_STATIC(registry_fds, &rf.lock);

static void fork_child(void)
{
    /* The child shares the parent's epoll instance through the inherited
     * fd (an EPOLL_CTL there would change the parent's set) and exported
     * nothing itself: it starts with an empty registry. */
    if (rf.epfd >= 0)
        close(rf.epfd);
    rf.epfd = -1;
    rf.n = 0;
    rf.sweep_at = 64;
    rf.served = rf.refused = 0;
}
BYVAL_FORK_CHILD(registry_fds, fork_child);

static void rf_lock(void)
{
    byval_lock(&rf.lock);
}

static fd_entry_t *find_locked(int fd)
{
    for (uint32_t i = 0; i < rf.n; i++)
        if (rf.e[i].fd == fd)
            return &rf.e[i];
    return NULL;
}

static void drop_locked(fd_entry_t *x)
{
    *x = rf.e[--rf.n];
}

static int same_locked(const fd_entry_t *x)
{
    return byval_fdproof_same(rf.epfd, x);
}

/* Forget entries whose fd was closed or reused: they can never be served
 * again (their epoll items went with their files). Amortised: runs when
 * the table doubled since the last sweep. */
static void sweep_locked(void)
{
    for (uint32_t i = 0; i < rf.n;) {
        if (!same_locked(&rf.e[i]))
            drop_locked(&rf.e[i]);
        else
            i++;
    }
    rf.sweep_at = rf.n * 2 > 64 ? rf.n * 2 : 64;
}

int byval_reg_add_fd(int fd)
{
    if (fd < 0) {
        errno = EBADF;
        return -1;
    }
    rf_lock();
    int rc = -1, err = 0;
    if (!rf.e && !(rf.e = calloc(FDS_MAX, sizeof(*rf.e)))) {
        err = ENOMEM;
        goto out;
    }
    if (rf.epfd < 0 && (rf.epfd = epoll_create1(EPOLL_CLOEXEC)) < 0) {
        err = errno;
        goto out;
    }
    fd_entry_t *x = find_locked(fd);
    if (x && same_locked(x)) {
        rc = 0; /* exported again: nothing new */
        goto out;
    }
    if (x)
        drop_locked(x); /* the number was reused: a new export */
    if (rf.n >= rf.sweep_at || rf.n == FDS_MAX)
        sweep_locked();
    if (rf.n == FDS_MAX) {
        err = ENOSPC;
        goto out;
    }
    fd_entry_t e;
    if (byval_fdproof_take(rf.epfd, fd, &e) != 0) {
        err = errno; /* cannot be proven later */
        goto out;
    }
    rf.e[rf.n++] = e;
    rc = 0;
out:
    byval_unlock(&rf.lock);
    errno = err;
    return rc;
}

void byval_reg_drop_fd(int fd)
{
    rf_lock();
    fd_entry_t *x = rf.e ? find_locked(fd) : NULL;
    if (x) {
        byval_fdproof_drop(rf.epfd, x);
        drop_locked(x);
    }
    byval_unlock(&rf.lock);
}

int byval_reg_dup_fd(int fd, int *dup_p)
{
    int status = -EBADF;
    *dup_p = -1;
    rf_lock();
    fd_entry_t *x = rf.e ? find_locked(fd) : NULL;
    if (x) {
        status = byval_fdproof_dup(rf.epfd, x, dup_p);
        if (status == -ESTALE)
            drop_locked(x); /* closed, or its number reused: never again */
    }
    rf.served += status == 0;
    rf.refused += status != 0;
    byval_unlock(&rf.lock);
    return status;
}

unsigned byval_reg_fds_live(void)
{
    rf_lock();
    unsigned n = rf.n;
    byval_unlock(&rf.lock);
    return n;
}

void byval_reg_fd_counts(uint64_t *served_p, uint64_t *refused_p)
{
    rf_lock();
    *served_p = rf.served;
    *refused_p = rf.refused;
    byval_unlock(&rf.lock);
}
