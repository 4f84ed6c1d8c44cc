/* SPDX-License-Identifier: MIT */
/*
 * rendezvous_short.c - a short record (an event pool's, wire.h) from a
 * process in another pid namespace, through the rendezvous directory.
 *
 * A short record carries the exporter's pid, the low 32 bits of its
 * identity and a guard of its host and pid namespace: within one pid
 * namespace the pid finds the process (registry_short.c). Across pid
 * namespaces the pid names nothing here; the directory's socket names
 * carry the full identity instead. A candidate is a socket whose name has
 * our boot and the record's 32 bits; its listener must prove that full
 * identity (SO_PEERPIDFD's pidfs inode, as any rendezvous fetch) and, on
 * kernels that tell a pidfd's pid namespace (PIDFD_GET_PID_NAMESPACE,
 * Linux 6.11), match the record's guard. The registry attached then
 * describes that process (its header's identity is checked).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "handles/broker_internal.h"
#include "handles/registry_view.h"
#include "handles/rendezvous_internal.h"
#include "handles/transport.h"

#ifndef PIDFD_GET_PID_NAMESPACE
#define PIDFD_GET_PID_NAMESPACE _IO(0xFF, 5)
#endif

/* The pidfd of the listener on rec's socket when it proves rec's
 * identity, else -1. */
static int proven_pidfd(const byval_record_t *rec, int64_t deadline)
{
    struct stat st;
    int pidfd = -1, s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    socklen_t len = sizeof(pidfd);
    if (s < 0)
        return -1;
    if (byval_rendezvous_connect(s, rec, deadline, NULL, 0) != BYVAL_OK ||
        getsockopt(s, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &len) != 0)
        pidfd = -1;
    close(s); /* the broker sees a connection closed before any request */
    if (pidfd >= 0 &&
        (!byval_pidfd_is_pidfs(pidfd) || fstat(pidfd, &st) != 0 ||
         (uint64_t)st.st_ino != rec->identity)) {
        close(pidfd);
        pidfd = -1;
    }
    return pidfd;
}

/* The pid namespace (its inode) of the process pidfd refers to, or 0
 * when the kernel does not say. */
static uint32_t pidns_of(int pidfd)
{
    struct stat st;
    int ns = ioctl(pidfd, PIDFD_GET_PID_NAMESPACE, 0);
    uint32_t ino = ns >= 0 && fstat(ns, &st) == 0 ? (uint32_t)st.st_ino : 0;
    if (ns >= 0)
        close(ns);
    return ino;
}

/* The next identity named in the directory d with our boot and these 32
 * bits; 0 at the end. */
static int next_candidate(DIR *d, uint32_t boot, uint32_t id32, uint64_t *id_p)
{
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        unsigned b;
        unsigned long long id;
        char tail[8];
        if (sscanf(e->d_name, "ipcbyval-%8x-%16llx%7s", &b, &id, tail) == 3 &&
            !strcmp(tail, ".sock") && b == boot && (uint32_t)id == id32) {
            *id_p = id;
            return 1;
        }
    }
    return 0;
}

byval_status_t byval_rendezvous_attach_short(const byval_short_t *s, const byval_self_t *self,
                                             int mode, byval_reg_view_t **v_p,
                                             byval_record_t *rec_p, int *pidfd_p, char *msg,
                                             size_t msglen)
{
    /* Every name with these 32 bits is tried, each proven by its full
     * identity: names planted by whoever may write the directory cost a
     * connect each (all within one deadline), never hide the exporter. */
    if (!(s->flags & BYVAL_FLAG_ID_PIDFS)) {
        byval_msg(msg, msglen,
                  "event pool of pid %u: its exporter has no pidfs identity (kernel before 6.9): "
                  "the rendezvous directory cannot find it",
                  s->pid);
        return BYVAL_E_IDENTITY;
    }
    int n = 0, fd = openat(byval_rdv.dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    uint64_t id;
    int64_t deadline = byval_broker_now_ms() + BROKER_FETCH_MS;
    if (!d && fd >= 0)
        close(fd);
    while (d && next_candidate(d, self->boot, s->id32, &id) && byval_broker_now_ms() < deadline) {
        n++;
        byval_record_t rec = {0};
        rec.pid = s->pid;
        rec.boot = self->boot;
        rec.identity = id;
        rec.flags = BYVAL_FLAG_ID_PIDFS;
        int pidfd = proven_pidfd(&rec, deadline);
        if (pidfd < 0)
            continue;
        rec.pidns = pidns_of(pidfd);
        if (rec.pidns && byval_short_guard(self->boot, rec.pidns) != s->guard) {
            close(pidfd);
            continue;
        }
        closedir(d);
        /* Its pid names nothing here: the registry's pipe and the pool's
         * fd must come through the socket, not pidfd_getfd with that pid. */
        byval_transport_remember_socket(&rec);
        byval_reg_view_t *v = byval_reg_attach(&rec, mode, pidfd, msg, msglen);
        if (!v) {
            close(pidfd);
            return BYVAL_E_GONE;
        }
        *rec_p = rec;
        *v_p = v;
        *pidfd_p = pidfd;
        return BYVAL_OK;
    }
    if (d)
        closedir(d);
    byval_msg(msg, msglen,
              "event pool of pid %u comes from another pid namespace and no exporter in the "
              "rendezvous directory %s proves to be it (%d named with its identity): it does "
              "not share the directory, or it exited",
              s->pid, byval_rdv.dir, n);
    return BYVAL_E_GONE;
}
