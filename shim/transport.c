/* SPDX-License-Identifier: MIT */
/* transport.c - the IPCBYVAL_TRANSPORT policy (see transport.h). */
#include "shim/transport.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "handles/broker.h"
#include "handles/nsxlate.h"
#include "shim/config.h"
#include "shim/log.h"

/* Exporters that pidfd_getfd could not reach but the socket could. */
#define SOCKET_PEERS 256
static struct {
    pthread_mutex_t lock;
    unsigned next;
    struct {
        uint32_t pidns, pid;
        uint64_t identity;
    } id[SOCKET_PEERS];
} peers = {.lock = PTHREAD_MUTEX_INITIALIZER};

static int peer_uses_socket(const byval_record_t *rec)
{
    int found = 0;
    pthread_mutex_lock(&peers.lock);
    for (unsigned i = 0; i < SOCKET_PEERS && !found; i++)
        found = peers.id[i].pid == rec->pid && peers.id[i].pidns == rec->pidns &&
                peers.id[i].identity == rec->identity && rec->identity;
    pthread_mutex_unlock(&peers.lock);
    return found;
}

static void peer_remember_socket(const byval_record_t *rec)
{
    pthread_mutex_lock(&peers.lock);
    unsigned i = peers.next++ % SOCKET_PEERS;
    peers.id[i].pidns = rec->pidns;
    peers.id[i].pid = rec->pid;
    peers.id[i].identity = rec->identity;
    pthread_mutex_unlock(&peers.lock);
}

static byval_status_t via_socket(const byval_record_t *rec, const byval_self_t *self, int *fd_p,
                                 char *msg, size_t msglen)
{
    if (rec->boot != self->boot) {
        snprintf(msg, msglen,
                 "handle was exported on another host or boot (boot id 0x%08x != local 0x%08x)",
                 rec->boot, self->boot);
        return BYVAL_E_FOREIGN_HOST;
    }
    return byval_broker_fetch(rec, rec->fd, rec->fd_ino, fd_p, msg, msglen);
}

byval_status_t byval_fetch_fd(const byval_record_t *rec, const byval_self_t *self, int *fd_p,
                              int *pidfd_p, char *msg, size_t msglen)
{
    int mode = byval_cfg.transport;
    *pidfd_p = -1;
    if (mode == BYVAL_TRANSPORT_SOCKET || (mode == BYVAL_TRANSPORT_AUTO && peer_uses_socket(rec)))
        return via_socket(rec, self, fd_p, msg, msglen);
    byval_status_t st = byval_resolve_fd(rec, self, fd_p, pidfd_p, msg, msglen);
    if (st == BYVAL_E_FOREIGN_NS && rec->boot == self->boot) {
        /* An exporter below us (a container seen from the host): find its
         * pid here; the identity check on the pidfd proves it is the one. */
        uint32_t local;
        if (byval_ns_translate(rec, &local, msg, msglen) == BYVAL_OK) {
            byval_record_t here = *rec;
            here.pid = local;
            here.pidns = self->pidns;
            st = byval_resolve_fd(&here, self, fd_p, pidfd_p, msg, msglen);
            if (st == BYVAL_E_GONE) {
                /* /proc is another namespace's (not remounted for ours):
                 * the process it shows is not one we can reach. */
                snprintf(msg, msglen,
                         "exporter pid %u lives in pid namespace pid:[%u], which is not below "
                         "ours (found as pid %u in this /proc, not visible to us)",
                         rec->pid, rec->pidns, local);
                st = BYVAL_E_FOREIGN_NS;
            }
        }
    }
    if (mode != BYVAL_TRANSPORT_AUTO ||
        (st != BYVAL_E_PERM && st != BYVAL_E_NOSYS && st != BYVAL_E_FOREIGN_NS))
        return st;
    char why[512];
    snprintf(why, sizeof(why), "%s", msg);
    byval_status_t st2 = via_socket(rec, self, fd_p, msg, msglen);
    if (st2 == BYVAL_OK) {
        peer_remember_socket(rec);
        BYVAL_LOG_INFO("pid %u: %s; using the socket fallback for this exporter", rec->pid, why);
        return BYVAL_OK;
    }
    /* Report both: why pidfd failed and why the socket did. */
    char both[1024];
    snprintf(both, sizeof(both), "%s; socket fallback: %s", why, msg);
    snprintf(msg, msglen, "%s", both);
    return st;
}

byval_status_t byval_fetch_more_fd(const byval_record_t *rec, int pidfd, uint32_t fd,
                                   uint32_t fd_ino, int *fd_p, char *msg, size_t msglen)
{
    if (pidfd >= 0)
        return byval_getfd_more(pidfd, rec->pid, fd, fd_ino, fd_p, msg, msglen);
    return byval_broker_fetch(rec, fd, fd_ino, fd_p, msg, msglen);
}

void byval_export_offer(int fd)
{
    if (byval_cfg.transport != BYVAL_TRANSPORT_PIDFD && byval_broker_offer(fd) != 0)
        BYVAL_LOG_DEBUG("socket fallback unavailable for fd %d: %m", fd);
}

void byval_export_withdraw(int fd)
{
    if (byval_cfg.transport != BYVAL_TRANSPORT_PIDFD)
        byval_broker_withdraw(fd);
}
