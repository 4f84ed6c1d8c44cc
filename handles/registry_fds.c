/* SPDX-License-Identifier: MIT */
/*
 * registry_fds.c - which fd numbers this process handed out as exported
 * GPU memory (its own exports and the application's), so that the broker
 * may serve exactly those to a peer whose pidfd_getfd the kernel refused
 * (registry.h), only while the number still refers to the exported open
 * file (fdproof.c), checked before and after the duplicate under one
 * lock. The export core withdraws its own entries with the export; the
 * application's go when their proof fails (closes we do not see).
 */
#include "handles/registry.h"

#include <errno.h>

#include "cache/locks.h"
#include "handles/fdproof.h"

static struct {
    byval_lock_t lock;
    uint32_t sweep_at;
    uint64_t served, refused;
    byval_fdtab_t t; /* at most one entry per fd */
} rf = {.lock = BYVAL_LOCK_INIT(REGISTRY_FDS), .sweep_at = 64, .t = {.epfd = -1, .max = 16384}};
BYVAL_LOCK_STATIC(registry_fds, &rf.lock);

static void fork_child(void)
{
    byval_fdtab_forget(&rf.t); /* the child exported nothing itself */
    rf.sweep_at = 64;
    rf.served = rf.refused = 0;
}
BYVAL_FORK_CHILD(registry_fds, fork_child);

int byval_reg_add_fd(int fd)
{
    if (fd < 0) {
        errno = EBADF;
        return -1;
    }
    byval_lock(&rf.lock);
    /* Entries whose fd was closed or reused go when the table doubled
     * since the last sweep (amortised), or when it is full. */
    if (rf.t.n >= rf.sweep_at || rf.t.n == rf.t.max) {
        byval_fdtab_sweep(&rf.t);
        rf.sweep_at = rf.t.n * 2 > 64 ? rf.t.n * 2 : 64;
    }
    int rc = byval_fdtab_add(&rf.t, fd) ? 0 : -1, err = rc ? errno : 0;
    byval_unlock(&rf.lock);
    errno = err;
    return rc;
}

void byval_reg_drop_fd(int fd)
{
    byval_lock(&rf.lock);
    byval_fdtab_remove(&rf.t, fd);
    byval_unlock(&rf.lock);
}

int byval_reg_dup_fd(int fd, int *dup_p)
{
    *dup_p = -1;
    byval_lock(&rf.lock);
    byval_fdproof_t *x = byval_fdtab_find(&rf.t, fd);
    int status = x ? byval_fdtab_dup(&rf.t, x, dup_p) : -EBADF;
    rf.served += status == 0;
    rf.refused += status != 0;
    byval_unlock(&rf.lock);
    return status;
}

unsigned byval_reg_fds_live(void)
{
    byval_lock(&rf.lock);
    unsigned n = rf.t.n;
    byval_unlock(&rf.lock);
    return n;
}

void byval_reg_fd_counts(uint64_t *served_p, uint64_t *refused_p)
{
    byval_lock(&rf.lock);
    *served_p = rf.served;
    *refused_p = rf.refused;
    byval_unlock(&rf.lock);
}
