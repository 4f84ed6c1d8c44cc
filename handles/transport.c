/* SPDX-License-Identifier: MIT */
/*
 * transport.c - the transport policy (see transport.h).
 *
 * Memory: a small table of exporters, keyed by (pidns, pid, identity),
 * that says how each was reached when the plain pidfd path did not do: its
 * pid translated into our namespace (so the /proc scan runs once per
 * exporter, not once per open) or its socket (so auto stops paying a
 * failing pidfd_getfd per open). The key includes the identity, so an
 * entry can never describe a later process that reuses the pid; and a
 * remembered translation is still verified on the pidfd at every use.
 * Fixed size, overwritten round robin: forgetting only costs one retry.
 */
#include "handles/transport.h"

#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "cache/locks.h"
#include "handles/broker.h"
#include "handles/nsxlate.h"
#include "handles/resolve_internal.h"

#define PEERS 256

typedef struct peer {
    uint32_t pidns, pid;
    uint64_t identity;
    byval_via_t via; /* XLATED or SOCKET; NONE: empty slot */
    uint32_t local_pid;
} peer_t;

static struct {
    byval_lock_t lock;
    unsigned next;
    peer_t p[PEERS];
} mem = {.lock = BYVAL_LOCK_INIT(TRANSPORT)};
/* The table stays true in a fork child (same exporters, same host): only
 * the lock must not be inherited held. */
BYVAL_LOCK_STATIC(transport, &mem.lock);

static peer_t peer_get(const byval_record_t *rec)
{
    peer_t found = {0};
    byval_lock(&mem.lock);
    for (unsigned i = 0; i < PEERS; i++) {
        const peer_t *p = &mem.p[i];
        if (p->via != BYVAL_VIA_NONE && p->pid == rec->pid && p->pidns == rec->pidns &&
            p->identity == rec->identity) {
            found = *p;
            break;
        }
    }
    byval_unlock(&mem.lock);
    return found;
}

static void peer_put(const byval_record_t *rec, byval_via_t via, uint32_t local_pid)
{
    byval_lock(&mem.lock);
    peer_t *slot = NULL;
    for (unsigned i = 0; i < PEERS && !slot; i++)
        if (mem.p[i].via != BYVAL_VIA_NONE && mem.p[i].pid == rec->pid &&
            mem.p[i].pidns == rec->pidns && mem.p[i].identity == rec->identity)
            slot = &mem.p[i];
    if (!slot)
        slot = &mem.p[mem.next++ % PEERS];
    *slot = (peer_t){rec->pidns, rec->pid, rec->identity, via, local_pid};
    byval_unlock(&mem.lock);
}

void byval_transport_remember_socket(const byval_record_t *rec) /* rendezvous hook */
{
    peer_put(rec, BYVAL_VIA_SOCKET, 0);
}

void byval_transport_forget(void)
{
    byval_lock(&mem.lock);
    memset(mem.p, 0, sizeof(mem.p));
    mem.next = 0;
    byval_unlock(&mem.lock);
}

/* The socket, with the same fd-kind check (inode and size) as pidfd. */
static byval_status_t via_socket(const byval_record_t *rec, int *fd_p, int *pidfd_p,
                                 byval_fetch_info_t *info, char *msg, size_t msglen)
{
    int via_dir = 0;
    byval_status_t st =
        byval_broker_fetch_via(rec, rec->fd, rec->fd_ino, fd_p, pidfd_p, &via_dir, msg, msglen);
    if (st != BYVAL_OK)
        return st;
    info->via = via_dir ? BYVAL_VIA_RENDEZVOUS : BYVAL_VIA_SOCKET; /* rendezvous hook */
    /* Nothing was checked before the exporter sent it: all of it now. */
    st = byval_check_fd_kind(*fd_p, rec->pid, rec->fd, rec->fd_ino, rec->size,
                             byval_record_obj(rec, rec->fd), NULL, msg, msglen);
    if (st != BYVAL_OK) {
        byval_fd_release(*fd_p);
        *fd_p = -1;
        if (*pidfd_p >= 0)
            close(*pidfd_p);
        *pidfd_p = -1;
    }
    return st;
}

/* pidfd_getfd on the exporter's pid in our namespace. */
static byval_status_t via_local_pid(const byval_record_t *rec, const byval_self_t *self,
                                    uint32_t local, int *fd_p, int *pidfd_p, char *msg,
                                    size_t msglen)
{
    byval_record_t here = *rec;
    here.pid = local;
    here.pidns = self->pidns;
    byval_status_t st = byval_resolve_fd(&here, self, fd_p, pidfd_p, msg, msglen);
    if (st == BYVAL_E_GONE)
        /* This /proc is another namespace's (not remounted for ours): the
         * process it shows is not one we can reach. */
        byval_msg(msg, msglen,
                  "exporter pid %u lives in pid namespace pid:[%u], which is not below ours "
                  "(found as pid %u in this /proc, not visible to us)",
                  rec->pid, rec->pidns, local);
    return st == BYVAL_E_GONE ? BYVAL_E_FOREIGN_NS : st;
}

/* The pidfd path: the record's pid, or its translation (found once). */
static byval_status_t via_pidfd(const byval_record_t *rec, const byval_self_t *self,
                                const peer_t *known, int *fd_p, int *pidfd_p,
                                byval_fetch_info_t *info, char *msg, size_t msglen)
{
    uint32_t local = 0;
    if (known->via == BYVAL_VIA_XLATED) {
        info->via = BYVAL_VIA_XLATED;
        info->local_pid = known->local_pid;
        return via_local_pid(rec, self, known->local_pid, fd_p, pidfd_p, msg, msglen);
    }
    info->via = BYVAL_VIA_PIDFD;
    info->local_pid = rec->pidns == self->pidns ? rec->pid : 0;
    byval_status_t st = byval_resolve_fd(rec, self, fd_p, pidfd_p, msg, msglen);
    if (st != BYVAL_E_FOREIGN_NS || byval_ns_translate(rec, &local, msg, msglen) != BYVAL_OK)
        return st;
    /* Found below us (a container seen from the host): the identity check
     * on the pidfd of the translated pid proves it is the exporter. */
    info->via = BYVAL_VIA_XLATED;
    info->local_pid = local;
    st = via_local_pid(rec, self, local, fd_p, pidfd_p, msg, msglen);
    if (st == BYVAL_OK)
        peer_put(rec, BYVAL_VIA_XLATED, local);
    return st;
}

byval_status_t byval_transport_fetch_fd(const byval_record_t *rec, const byval_self_t *self,
                                        int mode, int *fd_p, int *pidfd_p,
                                        byval_fetch_info_t *info, char *msg, size_t msglen)
{
    byval_fetch_info_t scratch;
    if (!info)
        info = &scratch;
    memset(info, 0, sizeof(*info));
    if (msg && msglen)
        msg[0] = '\0';
    if (!rec || !self || !fd_p || !pidfd_p) {
        byval_msg(msg, msglen, "byval_transport_fetch_fd: invalid arguments");
        return BYVAL_E_INVALID;
    }
    *fd_p = *pidfd_p = -1;
    if (rec->boot != self->boot) {
        byval_msg(msg, msglen,
                  "handle was exported on another host or boot (boot id 0x%08x != local 0x%08x)",
                  rec->boot, self->boot);
        return BYVAL_E_FOREIGN_HOST;
    }
    peer_t known = peer_get(rec);
    if (mode == BYVAL_MODE_SOCKET || (mode == BYVAL_MODE_AUTO && known.via == BYVAL_VIA_SOCKET)) {
        info->via = BYVAL_VIA_SOCKET;
        return via_socket(rec, fd_p, pidfd_p, info, msg, msglen);
    }
    byval_status_t st = via_pidfd(rec, self, &known, fd_p, pidfd_p, info, msg, msglen);
    if (mode != BYVAL_MODE_AUTO ||
        (st != BYVAL_E_PERM && st != BYVAL_E_NOSYS && st != BYVAL_E_FOREIGN_NS))
        return st;
    char why[512];
    snprintf(why, sizeof(why), "%s", msg ? msg : byval_status_str(st));
    byval_fetch_info_t got = *info;
    byval_status_t st2 = via_socket(rec, fd_p, pidfd_p, &got, msg, msglen);
    if (st2 == BYVAL_OK) {
        peer_put(rec, BYVAL_VIA_SOCKET, info->local_pid);
        info->via = got.via;
        info->fell_back = 1;
        memcpy(info->why, why, sizeof(why));
        return BYVAL_OK;
    }
    /* Both failed: say why each did. Nothing listening on the socket says
     * less than pidfd's reason; any answer from the exporter says more. */
    if (msg && msglen) {
        char sock[512];
        snprintf(sock, sizeof(sock), "%s", msg);
        snprintf(msg, msglen, "%s; socket fallback: %s", why, sock);
    }
    return st2 == BYVAL_E_GONE ? st : st2;
}

byval_status_t byval_transport_fetch_more_fd(const byval_record_t *rec, int mode, int pidfd,
                                             uint32_t fd, uint32_t fd_ino, uint64_t size,
                                             int *fd_p, char *msg, size_t msglen)
{
    return byval_transport_fetch_obj(rec, mode, pidfd, fd, fd_ino, size, byval_record_obj(rec, fd),
                                     fd_p, msg, msglen);
}

byval_status_t byval_transport_fetch_obj(const byval_record_t *rec, int mode, int pidfd,
                                         uint32_t fd, uint32_t fd_ino, uint64_t size,
                                         byval_obj_t obj, int *fd_p, char *msg, size_t msglen)
{
    int sock = mode == BYVAL_MODE_SOCKET ||
               (mode == BYVAL_MODE_AUTO && (pidfd < 0 || peer_get(rec).via == BYVAL_VIA_SOCKET));
    if (!sock) {
        /* Our own objects (registry, pipe) prove themselves; memory and
         * manifests must be exported ones. */
        byval_status_t st = obj == BYVAL_OBJ_MEMORY || obj == BYVAL_OBJ_MANIFEST
                                ? byval_export_evidence(rec, pidfd, fd, fd_ino, msg, msglen)
                                : BYVAL_OK;
        if (st != BYVAL_OK)
            return st;
        st = byval_getfd_obj(pidfd, rec->pid, fd, fd_ino, size, obj, fd_p, msg, msglen);
        /* auto forgot the exporter meanwhile (table overwritten): the
         * pidfd came from the socket, which still serves. */
        if (mode != BYVAL_MODE_AUTO || (st != BYVAL_E_PERM && st != BYVAL_E_NOSYS))
            return st;
    }
    byval_status_t st = byval_broker_fetch(rec, fd, fd_ino, fd_p, msg, msglen);
    if (st != BYVAL_OK)
        return st;
    st = byval_check_fd_kind(*fd_p, rec->pid, fd, fd_ino, size, obj, NULL, msg, msglen);
    if (st != BYVAL_OK) {
        byval_fd_release(*fd_p);
        *fd_p = -1;
    }
    return st;
}
