/* SPDX-License-Identifier: MIT */
/*
 * broker_offers.c - what the socket fallback serves, and to whom (see
 * broker.h; the server is broker_serve.c).
 *
 * Two kinds of request (broker_internal.h): by handle, for an fd ipcbyval
 * offered (its own exports, and the registry's memfd and pipe), checked
 * against the inode the handle names; and the pidfd_getfd rescue, by
 * number, answered only from the registry of exported fds, which proves
 * the open file itself (registry_fds.c): never from the offers, which
 * include files that are not GPU memory.
 *
 * A peer of another uid than the one served (a member of the rendezvous
 * directory's group) must also show the object's tag (handles/tag.h),
 * which only a handle carries: the registry page lists every export's
 * fd and inode, and is served to the group. Offers made open (the
 * registry's page and pipe, which hold no secret, and what the short
 * event-pool record names, which has no room for a tag) need none.
 *
 * Only the object recorded when the fd was offered is ever served: its
 * inode must be the one the request names, and the number must still
 * refer to that object, proven before and after the duplicate is made
 * (handles/fdproof.c: the same open file for files that poll, the same
 * inode for regular files), under the lock. What sits at an offered
 * number now is never compared with the request alone: a driver may
 * close an exported fd behind our back (zeContextDestroy may) and the
 * exporter's own socket or pipe land on the number, whose inode any
 * same-uid peer reads in /proc/PID/fd. The export core (cache/exports.h)
 * withdraws an offer before the driver can close the fd; the proof covers
 * what it cannot see.
 *
 * fork(): prepare takes the lock; the child forgets the offers (they are
 * the parent's exports) and its counters.
 */
#include "handles/broker.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "cache/locks.h"
#include "handles/broker_internal.h"
#include "handles/fdproof.h"
#include "handles/registry.h"
#include "handles/rendezvous.h"
#include "handles/tag.h"

#define BROKER_MAX_FDS 65536

typedef struct offer {
    byval_fdproof_t p;
    uint8_t open; /* served to the group without a tag */
} offer_t;

static struct {
    byval_lock_t lock;
    int uid_set;
    uid_t uid;
    uint32_t n;
    uint64_t served, refused, untagged;
    int epfd;     /* the offers' own proofs (-1 until the first) */
    offer_t *fds; /* BROKER_MAX_FDS, allocated at the first offer */
} of = {.lock = BYVAL_LOCK_INIT(BROKER_OFFERS), .epfd = -1};
BYVAL_LOCK_STATIC(broker_offers, &of.lock);

static void fork_child(void)
{
    /* The parent's epoll instance is shared through the inherited fd: an
     * EPOLL_CTL there would change the parent's proofs. */
    if (of.epfd >= 0)
        close(of.epfd);
    of.epfd = -1;
    of.n = 0;
    of.served = of.refused = of.untagged = 0;
}
BYVAL_FORK_CHILD(broker_offers, fork_child);

static void of_lock(void)
{
    byval_lock(&of.lock);
}

static offer_t *offered_locked(int fd)
{
    for (uint32_t i = 0; i < of.n; i++)
        if (of.fds[i].p.fd == fd)
            return &of.fds[i];
    return NULL;
}

static void drop_locked(offer_t *x)
{
    byval_fdproof_drop(of.epfd, &x->p);
    *x = of.fds[--of.n];
}

int32_t byval_broker_lookup(const struct broker_req *req, int own_uid, int *dup_p)
{
    int32_t status = -EBADF;
    *dup_p = -1;
    if (req->magic == BROKER_MAGIC_RESCUE && req->fd == BYVAL_RENDEZVOUS_FD_REGISTRY)
        return byval_rendezvous_registry_dup(dup_p); /* not a number: our registry */
    /* The rescue stands in for a pidfd_getfd the kernel refused, which a
     * peer of another uid (a member of the directory's group) could
     * never have made: by number, it would be every export. */
    if (req->magic == BROKER_MAGIC_RESCUE)
        return own_uid ? byval_reg_dup_fd((int)req->fd, dup_p) : -EPERM;
    of_lock();
    offer_t *x = req->fd <= INT32_MAX && of.fds ? offered_locked((int)req->fd) : NULL;
    if (x && (uint32_t)x->p.ino != req->fd_ino) {
        status = -ESTALE; /* not the object offered under that number */
    } else if (x && !own_uid && !x->open &&
               !byval_tag_check(req->fd, (uint32_t)x->p.ino, req->tag)) {
        status = -EACCES; /* a member that holds no handle of it */
        of.untagged++;
    } else if (x) {
        status = byval_fdproof_dup(of.epfd, &x->p, dup_p);
        if (status == -ESTALE)
            drop_locked(x); /* closed or reused behind the offer: never again */
    }
    of.served += status == 0;
    byval_unlock(&of.lock);
    return status;
}

int byval_broker_uid_served(uid_t uid)
{
    of_lock();
    int served = uid == (of.uid_set ? of.uid : geteuid());
    byval_unlock(&of.lock);
    return served;
}

int byval_broker_uid_allowed(uid_t uid)
{
    of_lock();
    int allowed = uid == (of.uid_set ? of.uid : geteuid());
    of.refused += !allowed;
    byval_unlock(&of.lock);
    return allowed;
}

static int offer(int fd, int open)
{
    if (byval_broker_serve() != 0)
        return -1;
    of_lock();
    int rc = -1, err = 0;
    if (!of.fds && !(of.fds = calloc(BROKER_MAX_FDS, sizeof(*of.fds)))) {
        err = ENOMEM;
        goto out;
    }
    if (of.epfd < 0 && (of.epfd = epoll_create1(EPOLL_CLOEXEC)) < 0) {
        err = errno;
        goto out;
    }
    offer_t *x = offered_locked(fd);
    if (x && byval_fdproof_same(of.epfd, &x->p)) {
        x->open |= (uint8_t)open;
        rc = 0; /* offered already */
        goto out;
    }
    if (x)
        drop_locked(x); /* closed behind its offer: this is another object */
    if (of.n == BROKER_MAX_FDS) {
        err = ENOSPC; /* said, not silently left unserved */
        goto out;
    }
    if (byval_fdproof_take(of.epfd, fd, &of.fds[of.n].p) != 0) {
        err = errno; /* cannot be proven at a request: not served */
        goto out;
    }
    of.fds[of.n++].open = (uint8_t)open;
    rc = 0;
out:
    byval_unlock(&of.lock);
    errno = err;
    return rc;
}

int byval_broker_offer(int fd)
{
    return offer(fd, 0);
}

int byval_broker_offer_open(int fd)
{
    return offer(fd, 1);
}

void byval_broker_withdraw(int fd)
{
    of_lock();
    offer_t *x = of.fds ? offered_locked(fd) : NULL;
    if (x)
        drop_locked(x);
    byval_unlock(&of.lock);
}

void byval_broker_set_allowed_uid(uid_t uid)
{
    of_lock();
    of.uid = uid;
    of.uid_set = 1;
    byval_unlock(&of.lock);
}

void byval_broker_counts(uint64_t *served_p, uint64_t *refused_p)
{
    of_lock();
    *served_p = of.served;
    *refused_p = of.refused;
    byval_unlock(&of.lock);
}

uint64_t byval_broker_untagged(void)
{
    of_lock();
    uint64_t n = of.untagged;
    byval_unlock(&of.lock);
    return n;
}
