/* SPDX-License-Identifier: MIT */
/*
 * registry_short.c - from a short record (handles/wire.h) to the
 * exporter's registry (registry_view.h).
 *
 * A short record carries the exporter's pid, the low 32 bits of its
 * identity and a guard of its host and pid namespace, not the full
 * identity the transports and the registry are keyed by. Within our own
 * host and pid namespace (the guard says so) the rest comes from the
 * process itself: a pidfd of the pid, its identity read on that pidfd
 * (pidfs inode or start time, as the record's flag says), checked against
 * the record's 32 bits and then race-free against the pidfd
 * (byval_check_identity); the registry must then describe that process
 * (byval_reg_attach checks its header's pid and identity).
 */
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "handles/registry_view.h"
#include "handles/rendezvous.h"
#include "handles/resolve_internal.h"

static byval_status_t identity_of(const byval_short_t *s, int pidfd, uint64_t *id_p, char *msg,
                                  size_t msglen)
{
    if (s->flags & BYVAL_FLAG_ID_PIDFS) {
        struct stat st;
        if (!byval_pidfd_is_pidfs(pidfd) || fstat(pidfd, &st) != 0) {
            byval_msg(msg, msglen,
                      "cannot read pid %u's pidfs identity here (the handle names it by it)",
                      s->pid);
            return BYVAL_E_IDENTITY;
        }
        *id_p = (uint64_t)st.st_ino;
        return BYVAL_OK;
    }
    int e = byval_proc_start_time((pid_t)s->pid, id_p);
    if (e == ENOENT || e == ESRCH) {
        byval_msg(msg, msglen, "exporter pid %u has exited", s->pid);
        return BYVAL_E_GONE;
    }
    if (e) {
        byval_msg(msg, msglen, "cannot read pid %u's start time: %s", s->pid, strerror(e));
        return BYVAL_E_SYS;
    }
    return BYVAL_OK;
}

byval_status_t byval_reg_attach_short(const byval_short_t *s, const byval_self_t *self, int mode,
                                      byval_reg_view_t **v_p, byval_record_t *rec_p, int *pidfd_p,
                                      char *msg, size_t msglen)
{
    *v_p = NULL;
    *pidfd_p = -1;
    memset(rec_p, 0, sizeof(*rec_p));
    /* Another pid namespace: its pid names nothing here; the directory's
     * socket names carry the identity instead. */
    if (s->guard != byval_short_guard(self->boot, self->pidns) && byval_rendezvous_enabled())
        return byval_rendezvous_attach_short(s, self, mode, v_p, rec_p, pidfd_p, msg, msglen);
    if (s->guard != byval_short_guard(self->boot, self->pidns)) {
        byval_msg(msg, msglen,
                  "handle of pid %u comes from another host, boot or pid namespace: "
                  "short by-value handles (event pools) resolve within one pid namespace",
                  s->pid);
        return BYVAL_E_FOREIGN_NS;
    }
    rec_p->pid = s->pid;
    rec_p->pidns = self->pidns;
    rec_p->boot = self->boot;
    rec_p->flags = s->flags;
    uint64_t identity = 0;
    byval_reg_view_t *v = byval_reg_lookup_id32(self->pidns, s->pid, s->id32, &identity);
    if (v) {
        rec_p->identity = identity;
        *v_p = v;
        return BYVAL_OK;
    }
    int pidfd = byval_pidfd_open((pid_t)s->pid, 0);
    if (pidfd < 0) {
        int e = errno;
        byval_msg(msg, msglen, "pidfd_open(%u) failed: %s%s", s->pid, strerror(e),
                  e == ESRCH ? " (the exporter has exited)" : "");
        return e == ESRCH                  ? BYVAL_E_GONE
            : e == ENOSYS                  ? BYVAL_E_NOSYS
            : (e == EMFILE || e == ENFILE) ? BYVAL_E_NOFD
                                           : BYVAL_E_SYS;
    }
    byval_status_t st = identity_of(s, pidfd, &identity, msg, msglen);
    if (st == BYVAL_OK && (uint32_t)identity != s->id32) {
        byval_msg(msg, msglen,
                  "pid %u is not the exporter any more (identity %llu does not end in %u): "
                  "the exporter exited and its pid was reused",
                  s->pid, (unsigned long long)identity, s->id32);
        st = BYVAL_E_IDENTITY;
    }
    if (st == BYVAL_OK) {
        rec_p->identity = identity;
        st = byval_check_identity(rec_p, pidfd, msg, msglen);
    }
    if (st == BYVAL_OK) {
        v = byval_reg_attach(rec_p, mode, pidfd, msg, msglen);
        if (!v)
            st = BYVAL_E_GONE;
    }
    if (st != BYVAL_OK) {
        close(pidfd);
        return st;
    }
    *v_p = v;
    *pidfd_p = pidfd;
    return BYVAL_OK;
}
