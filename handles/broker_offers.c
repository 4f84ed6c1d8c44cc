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
 * An offered fd is withdrawn before it is closed, and the fd sent is a
 * duplicate made under the lock that checked it, so a withdraw+close+reuse
 * racing the request can never make us send an object that was not
 * offered.
 *
 * fork(): prepare takes the lock; the child forgets the offers (they are
 * the parent's exports) and its counters.
 */
#include "handles/broker.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include "handles/broker_internal.h"
#include "handles/registry.h"
#include "handles/rendezvous.h" /* rendezvous hook */

#define BROKER_MAX_FDS 65536

static struct {
    pthread_mutex_t lock;
    int uid_set;
    uid_t uid;
    uint32_t n;
    uint64_t served, refused;
    int fds[BROKER_MAX_FDS];
} of = {.lock = PTHREAD_MUTEX_INITIALIZER};
static pthread_once_t of_once = PTHREAD_ONCE_INIT;

static void fork_prepare(void)
{
    pthread_mutex_lock(&of.lock);
}

static void fork_parent(void)
{
    pthread_mutex_unlock(&of.lock);
}

static void fork_child(void)
{
    of.n = 0;
    of.served = of.refused = 0;
    pthread_mutex_init(&of.lock, NULL);
}

static void offers_once(void)
{
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}

/* The lock, its fork handlers registered first (a fork between a first
 * lock and a later registration would leave the child the lock held). */
static void of_lock(void)
{
    pthread_once(&of_once, offers_once);
    pthread_mutex_lock(&of.lock);
}

static int offered_locked(int fd)
{
    for (uint32_t i = 0; i < of.n; i++)
        if (of.fds[i] == fd)
            return 1;
    return 0;
}

int32_t byval_broker_lookup(const struct broker_req *req, int *dup_p)
{
    struct stat st;
    int32_t status = -EBADF;
    if (req->magic == BROKER_MAGIC_RESCUE && req->fd == BYVAL_RENDEZVOUS_FD_REGISTRY)
        return byval_rendezvous_registry_dup(dup_p); /* rendezvous hook */
    if (req->magic == BROKER_MAGIC_RESCUE)
        return byval_reg_dup_fd((int)req->fd, dup_p);
    of_lock();
    if (req->fd <= INT32_MAX && offered_locked((int)req->fd) && fstat((int)req->fd, &st) == 0) {
        if ((uint32_t)st.st_ino != req->fd_ino)
            status = -ESTALE;
        else if ((*dup_p = fcntl((int)req->fd, F_DUPFD_CLOEXEC, 0)) < 0)
            status = -errno;
        else
            status = 0;
        of.served += status == 0;
    }
    pthread_mutex_unlock(&of.lock);
    return status;
}

int byval_broker_uid_allowed(uid_t uid)
{
    of_lock();
    int allowed = uid == (of.uid_set ? of.uid : geteuid());
    of.refused += !allowed;
    pthread_mutex_unlock(&of.lock);
    return allowed;
}

int byval_broker_offer(int fd)
{
    if (byval_broker_serve() != 0)
        return -1;
    of_lock();
    int rc = 0;
    if (!offered_locked(fd)) {
        if (of.n < BROKER_MAX_FDS) {
            of.fds[of.n++] = fd;
        } else {
            rc = -1; /* said, not silently left unserved */
            errno = ENOSPC;
        }
    }
    int err = errno;
    pthread_mutex_unlock(&of.lock);
    errno = err;
    return rc;
}

void byval_broker_withdraw(int fd)
{
    of_lock();
    for (uint32_t i = 0; i < of.n; i++) {
        if (of.fds[i] == fd) {
            of.fds[i] = of.fds[--of.n];
            break;
        }
    }
    pthread_mutex_unlock(&of.lock);
}

void byval_broker_set_allowed_uid(uid_t uid)
{
    of_lock();
    of.uid = uid;
    of.uid_set = 1;
    pthread_mutex_unlock(&of.lock);
}

void byval_broker_counts(uint64_t *served_p, uint64_t *refused_p)
{
    of_lock();
    *served_p = of.served;
    *refused_p = of.refused;
    pthread_mutex_unlock(&of.lock);
}
