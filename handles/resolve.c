/* SPDX-License-Identifier: MIT */
/*
 * resolve.c - from a record to a local duplicate of one of its exporter's
 * fds: the whole resolution, in one sequence (resolve() below).
 *
 *   1. translate   the record's pid is its exporter's in ITS namespace:
 *                  find its pid in ours (remembered, the pidfd's word, or
 *                  NSpid in /proc). Every later step uses this pid.
 *   2. identify    a pidfd of that pid, proven to be the record's
 *                  exporter (self.c); a pidfd kept from an earlier open
 *                  was identified then.
 *   3. prove the export   before anything is duplicated: the exporter's
 *                  registry lists the fd as the export the record names
 *                  (the installed prover, registry_view.c); what no
 *                  registry lists is proven by its kind through /proc
 *                  (fdcheck.c).
 *   4. duplicate   pidfd_getfd, or the broker's socket routes (broker.h),
 *                  whose exporter serves only what it offered. auto takes
 *                  pidfd first, the sockets where the kernel refuses or
 *                  the exporter is out of reach, and remembers per
 *                  exporter what worked.
 *   5. prove the object   the duplicate is of a kind we may use, with the
 *                  record's inode and size (fdcheck.c), and the registry
 *                  entry of step 3 still holds its serial (withdrawn
 *                  before its fd is closed: the number was not reused).
 *
 * Every failure closes what it opened and writes one line naming the
 * syscall, the pid, the fd and strerror.
 */
#include "handles/resolve.h"

#include <ctype.h>
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "cache/locks.h"
#include "handles/broker.h"
#include "handles/fdcheck.h"
#include "handles/sys.h"
#include "handles/transport.h"

/* What the pipeline fetches: fd (inode low bits ino, size
 * bytes when != 0, 0: not checked) of the exporter rec names (NULL: a
 * pidfd's process, no record), to be of kind obj; tag: what the socket
 * routes show for it (rec->tag for rec's own fd, else 0). */
typedef struct byval_want {
    const byval_record_t *rec;
    uint32_t fd, ino;
    uint64_t size;
    byval_obj_t obj;
    uint64_t tag;
} byval_want_t;

/* The exporter as this process reaches it. */
typedef struct byval_exporter {
    uint32_t pid; /* in our pid namespace; 0: not known yet */
    /* pidfd: identified (step 2), or -1; owned: opened by this resolution
     * (else the caller's). */
    int pidfd, owned;
} byval_exporter_t;

/* What auto learnt per exporter (pidns, pid, identity: never a later
 * process with the pid): its pid here (the /proc scan once per exporter)
 * or that its socket serves it. Fixed size, round robin: forgetting costs
 * one retry. True in a fork child too (same exporters). */
#define PEERS 256

typedef struct peer {
    uint32_t pidns, pid;
    uint64_t identity;
    byval_via_t via; /* XLATED or SOCKET; NONE: empty slot */
    uint32_t local_pid;
} peer_t;

static struct {
    byval_lock_t lock;
    unsigned next; /* entries ever written (atomic: read unlocked) */
    peer_t p[PEERS];
} mem = {.lock = BYVAL_LOCK_INIT(TRANSPORT)};
BYVAL_LOCK_STATIC(transport, &mem.lock);

static peer_t *peer_find_locked(const byval_record_t *rec)
{
    for (unsigned i = 0; i < PEERS; i++) {
        peer_t *p = &mem.p[i];
        if (p->via != BYVAL_VIA_NONE && p->pid == rec->pid && p->pidns == rec->pidns &&
            p->identity == rec->identity)
            return p;
    }
    return NULL;
}

static peer_t peer_get(const byval_record_t *rec)
{
    peer_t found = {0}, *p;
    /* Nothing learnt yet (one namespace, pidfd allowed): no lock, no scan. */
    if (!__atomic_load_n(&mem.next, __ATOMIC_ACQUIRE))
        return found;
    byval_lock(&mem.lock);
    if ((p = peer_find_locked(rec)) != NULL)
        found = *p;
    byval_unlock(&mem.lock);
    return found;
}

static void peer_put(const byval_record_t *rec, byval_via_t via, uint32_t local_pid)
{
    byval_lock(&mem.lock);
    peer_t *slot = peer_find_locked(rec);
    int fresh = !slot;
    if (fresh)
        slot = &mem.p[__atomic_load_n(&mem.next, __ATOMIC_RELAXED) % PEERS];
    *slot = (peer_t){rec->pidns, rec->pid, rec->identity, via, local_pid};
    if (fresh) /* after the entry: an unlocked reader that sees it counted looks */
        __atomic_fetch_add(&mem.next, 1, __ATOMIC_RELEASE);
    byval_unlock(&mem.lock);
}

void byval_transport_remember_socket(const byval_record_t *rec)
{
    peer_put(rec, BYVAL_VIA_SOCKET, 0);
}

/* Last field of the NSpid line of /proc/<dir>/status, or 0. */
static uint32_t innermost_pid(const char *dir)
{
    char path[300], buf[4096]; /* NSpid: up to 32 levels of 10 digits */
    snprintf(path, sizeof(path), "/proc/%s/status", dir);
    char *p = byval_read_file(path, buf, sizeof(buf)) > 0 ? strstr(buf, "\nNSpid:") : NULL;
    uint32_t last = 0;
    char *end;
    for (p = p ? p + 7 : NULL; p; p = end) {
        unsigned long v = strtoul(p, &end, 10);
        if (end == p)
            break;
        last = (uint32_t)v;
    }
    return last;
}

byval_status_t byval_ns_translate(const byval_record_t *rec, uint32_t *local_pid_p, char *msg,
                                  size_t msglen)
{
    /* The pids read off /proc must be pids of OUR namespace, or pidfd_open
     * would reach whatever holds that number here. */
    if (!byval_proc_is_ours())
        return byval_fail(BYVAL_E_FOREIGN_NS, msg, msglen,
                          "exporter pid %u lives in pid namespace pid:[%u], not below ours as far "
                          "as we can tell: this /proc belongs to another pid namespace (mount one "
                          "for ours to translate pids)",
                          rec->pid, rec->pidns);
    DIR *d = opendir("/proc");
    if (!d)
        return byval_fail(BYVAL_E_FOREIGN_NS, msg, msglen,
                          "cannot read /proc to find pid %u of pid:[%u]", rec->pid, rec->pidns);
    struct dirent *e;
    byval_status_t st = BYVAL_E_FOREIGN_NS;
    while ((e = readdir(d))) {
        if (!isdigit((unsigned char)e->d_name[0]) || innermost_pid(e->d_name) != rec->pid)
            continue;
        char path[300];
        struct stat sb;
        snprintf(path, sizeof(path), "/proc/%s/ns/pid", e->d_name);
        if (stat(path, &sb) == 0 && (uint32_t)sb.st_ino == rec->pidns) {
            *local_pid_p = (uint32_t)strtoul(e->d_name, NULL, 10);
            st = BYVAL_OK;
            break;
        }
    }
    closedir(d);
    if (st != BYVAL_OK)
        byval_msg(msg, msglen,
                  "exporter pid %u lives in pid namespace pid:[%u], which is not below ours: not "
                  "visible from here",
                  rec->pid, rec->pidns);
    return st;
}

static const byval_prover_t *prover;

void byval_resolve_set_prover(const byval_prover_t *p)
{
    __atomic_store_n(&prover, p, __ATOMIC_RELEASE);
}

static byval_obj_t byval_record_obj(const byval_record_t *rec, uint32_t fd)
{
    /* The record's own fd is of the record's kind; any other fd of the
     * same exporter a record leads to is one a manifest lists: memory. */
    return rec->kind == BYVAL_KIND_CU_VMM_MANIFEST && fd == rec->fd ? BYVAL_OBJ_MANIFEST
                                                                    : BYVAL_OBJ_MEMORY;
}

static byval_status_t translate(const byval_record_t *rec, const byval_self_t *self,
                                byval_exporter_t *x, char *msg, size_t msglen)
{
    /* Not remembered: an identified pidfd has the kernel's word for it. */
    int kernel =
        x->pid || rec->pidns == self->pidns || x->pidfd < 0 ? 0 : byval_pidfd_pid(x->pidfd);
    if (!x->pid)
        x->pid = rec->pidns == self->pidns ? rec->pid : kernel > 0 ? (uint32_t)kernel : 0;
    return x->pid ? BYVAL_OK : byval_ns_translate(rec, &x->pid, msg, msglen);
}

/* ---- 2. identify ---------------------------------------------------- */

static byval_status_t identify(const byval_record_t *rec, byval_exporter_t *x, char *msg,
                               size_t msglen)
{
    if (x->pidfd >= 0)
        return BYVAL_OK;
    byval_status_t st = byval_open_exporter(rec, x->pid, &x->pidfd, msg, msglen);
    x->owned = st == BYVAL_OK;
    /* Translated through a /proc that is another namespace's (not
     * remounted for ours): the process it shows is not ours to reach. */
    if (st == BYVAL_E_GONE && x->pid != rec->pid)
        return byval_fail(BYVAL_E_FOREIGN_NS, msg, msglen,
                          "exporter pid %u lives in pid namespace pid:[%u], which is not below "
                          "ours (found as pid %u in this /proc, not visible to us)",
                          rec->pid, rec->pidns, x->pid);
    return st;
}

/* ---- 5. prove the object -------------------------------------------- */

static byval_status_t prove_object(const byval_want_t *w, const byval_exporter_t *x,
                                   const byval_proof_t *proof, const byval_fd_seen_t *seen, int dup,
                                   char *msg, size_t msglen)
{
    /* Withdrawn between the proof and the duplicate: the number may
     * hold anything now, so the duplicate is not even looked at. */
    if (proof->word && __atomic_load_n(proof->word, __ATOMIC_ACQUIRE) != proof->serial)
        return byval_fail(BYVAL_E_BADFD, msg, msglen,
                          "fd %u of pid %u was withdrawn from its registry while it was duplicated "
                          "(freed, and the number possibly reused): not used",
                          w->fd, x->pid);
    return byval_check_fd_kind(dup, x->pid, w->fd, w->ino, w->size, w->obj,
                               seen->kind ? seen : NULL, msg, msglen);
}

/* ---- the sequence ----------------------------------------------------- */

/* Steps 3-5 of an identified exporter on the pidfd route. */
static byval_status_t fetch_proven(const byval_want_t *w, const byval_exporter_t *x, int *fd_p,
                                   char *msg, size_t msglen)
{
    const byval_prover_t *p = __atomic_load_n(&prover, __ATOMIC_ACQUIRE);
    byval_proof_t proof = {0};
    byval_fd_seen_t seen = {0};
    int dup = -1, err;
    const char *note;
    /* 3: the installed prover for a record's memory, else /proc shows the kind. */
    byval_status_t st = p && w->rec && (w->obj == BYVAL_OBJ_MEMORY || w->obj == BYVAL_OBJ_MANIFEST)
        ? p->prove(w->rec, x->pidfd, x->pid, w->fd, w->ino, &proof, msg, msglen)
        : byval_fd_precheck(x->pidfd, x->pid, w->fd, w->ino, w->size, w->obj, &seen, msg, msglen);
    /* 4: pidfd_getfd (the kernel sets O_CLOEXEC). */
    if (st == BYVAL_OK && (dup = byval_pidfd_getfd(x->pidfd, (int)w->fd, 0)) < 0) {
        err = errno;
        st = byval_getfd_status(err, x->pidfd, &note);
        byval_msg(msg, msglen, "pidfd_getfd(pid %u, fd %u) failed: %s%s", x->pid, w->fd,
                  strerror(err), note);
    }
    if (st == BYVAL_OK)
        st = prove_object(w, x, &proof, &seen, dup, msg, msglen);
    if (proof.word) /* what the prover holds */
        p->done(&proof);
    if (st != BYVAL_OK && dup >= 0)
        byval_fd_release(dup); /* maybe not what we asked for: never block on it */
    else if (st == BYVAL_OK)
        *fd_p = dup;
    return st;
}

/* Step 4 on the socket routes (broker.h), then step 5 with no registry
 * proof (the broker checked its own): *fd_p the proven duplicate; x keeps
 * the listener's pidfd when it proved the identity and x had none. */
static byval_status_t fetch_socket(const byval_want_t *w, byval_exporter_t *x, int *fd_p,
                                   byval_fetch_info_t *info, char *msg, size_t msglen)
{
    int via, *pidfd_p = x->pidfd >= 0 ? NULL : &x->pidfd;
    x->pid = w->rec->pid; /* as the exporter named itself: the broker's name */
    byval_status_t st =
        byval_broker_fetch_routes(w->rec, w->fd, w->ino, w->tag, fd_p, pidfd_p, &via, msg, msglen);
    if (pidfd_p)
        x->owned = x->pidfd >= 0;
    if (st != BYVAL_OK)
        return st;
    info->via = (byval_via_t)via;
    byval_fd_seen_t none = {0};
    byval_proof_t no_proof = {0};
    st = prove_object(w, x, &no_proof, &none, *fd_p, msg, msglen);
    if (st != BYVAL_OK) {
        byval_fd_release(*fd_p);
        *fd_p = -1;
    }
    return st;
}

/* The policy over the routes: what mode asks, what auto learnt about
 * this exporter before (one read of its memory), and what it learns now (at
 * most one write). */
static byval_status_t resolve(const byval_want_t *w, const byval_self_t *self, int mode,
                              byval_exporter_t *x, int *fd_p, byval_fetch_info_t *info, char *msg,
                              size_t msglen)
{
    *fd_p = -1;
    byval_msg(msg, msglen, "%s", ""); /* no failure yet */
    if (w->rec->boot != self->boot)
        return byval_fail(
            BYVAL_E_FOREIGN_HOST, msg, msglen,
            "handle was exported on another host or boot (boot id 0x%08x != local 0x%08x)",
            w->rec->boot, self->boot);
    peer_t known = peer_get(w->rec);
    if (mode == BYVAL_MODE_SOCKET || (mode == BYVAL_MODE_AUTO && known.via == BYVAL_VIA_SOCKET)) {
        info->via = BYVAL_VIA_SOCKET;
        return fetch_socket(w, x, fd_p, info, msg, msglen);
    }
    if (known.via == BYVAL_VIA_XLATED && !x->pid)
        x->pid = known.local_pid;
    /* Steps 1-5 on the pidfd route; x keeps the exporter's pid and pidfd
     * either way. */
    byval_status_t st = translate(w->rec, self, x, msg, msglen);
    if (st == BYVAL_OK)
        st = identify(w->rec, x, msg, msglen);
    if (st == BYVAL_OK)
        st = fetch_proven(w, x, fd_p, msg, msglen);
    info->via = x->pid == w->rec->pid ? BYVAL_VIA_PIDFD : BYVAL_VIA_XLATED;
    info->local_pid = x->pid;
    if (mode != BYVAL_MODE_AUTO ||
        (st != BYVAL_E_PERM && st != BYVAL_E_NOSYS && st != BYVAL_E_FOREIGN_NS)) {
        if (st == BYVAL_OK && info->via == BYVAL_VIA_XLATED && known.via != BYVAL_VIA_XLATED)
            peer_put(w->rec, BYVAL_VIA_XLATED, x->pid);
        return st;
    }
    /* auto: the kernel refused pidfd_getfd, or the exporter is not
     * reachable by pid: its socket, remembered if it serves. */
    char why[512];
    snprintf(why, sizeof(why), "%s", msg ? msg : byval_status_str(st));
    if (x->owned && x->pidfd >= 0)
        close(x->pidfd);
    *x = (byval_exporter_t){.pidfd = x->owned ? -1 : x->pidfd};
    byval_fetch_info_t got = *info;
    byval_status_t st2 = fetch_socket(w, x, fd_p, &got, msg, msglen);
    if (st2 == BYVAL_OK) {
        peer_put(w->rec, BYVAL_VIA_SOCKET, info->local_pid);
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

/* ---- the entries -------------------------------------------------------- */

byval_status_t byval_transport_fetch_fd(const byval_record_t *rec, const byval_self_t *self,
                                        int mode, int *fd_p, int *pidfd_p, byval_fetch_info_t *info,
                                        char *msg, size_t msglen)
{
    return byval_transport_fetch(rec, self, mode, -1, fd_p, pidfd_p, info, msg, msglen);
}

byval_status_t byval_transport_fetch(const byval_record_t *rec, const byval_self_t *self, int mode,
                                     int kept, int *fd_p, int *pidfd_p, byval_fetch_info_t *info,
                                     char *msg, size_t msglen)
{
    byval_fetch_info_t scratch;
    if (!info)
        info = &scratch;
    memset(info, 0, sizeof(*info));
    if (fd_p)
        *fd_p = -1;
    if (pidfd_p)
        *pidfd_p = -1;
    if (!rec || !self || !fd_p)
        return byval_fail(BYVAL_E_INVALID, msg, msglen,
                          "byval_resolve_fd: invalid arguments (NULL record, self or fd_p)");
    /* Fields a decoded record always has in range; a hand-made one may not,
     * and pid_t/int casts must not turn them into -1 or 0. */
    if (rec->pid == 0 || rec->pid > INT32_MAX || rec->fd > INT32_MAX || rec->kind < 1 ||
        rec->kind > BYVAL_KIND_MAX_ || (rec->flags & ~BYVAL_FLAG_MASK))
        return byval_fail(BYVAL_E_INVALID, msg, msglen,
                          "invalid record: pid %u, fd %u, kind %u, flags 0x%x out of range",
                          rec->pid, rec->fd, rec->kind, rec->flags);
    byval_want_t w = {rec,     rec->fd, rec->fd_ino, rec->size, byval_record_obj(rec, rec->fd),
                      rec->tag};
    byval_exporter_t x = {.pidfd = kept};
    byval_status_t st = resolve(&w, self, mode, &x, fd_p, info, msg, msglen);
    if (x.owned && (st != BYVAL_OK || !pidfd_p))
        byval_close_fd(&x.pidfd);
    if (pidfd_p) /* ours to keep, or the caller's lent back */
        *pidfd_p = x.owned || kept >= 0 ? x.pidfd : -1;
    return st;
}

byval_status_t byval_resolve_fd(const byval_record_t *rec, const byval_self_t *self, int *fd_p,
                                int *pidfd_p, char *msg, size_t msglen)
{
    return byval_transport_fetch_fd(rec, self, BYVAL_MODE_PIDFD, fd_p, pidfd_p, NULL, msg, msglen);
}

byval_status_t byval_transport_fetch_obj(const byval_record_t *rec, int mode, int pidfd,
                                         uint32_t fd, uint32_t fd_ino, uint64_t size,
                                         byval_obj_t obj, int *fd_p, char *msg, size_t msglen)
{
    byval_self_t self;
    byval_fetch_info_t info = {0};
    if (fd_p)
        *fd_p = -1;
    if (!rec || !fd_p || fd > INT32_MAX || byval_self_get(&self) != 0)
        return byval_fail(BYVAL_E_INVALID, msg, msglen,
                          "byval_transport_fetch_obj: invalid arguments");
    /* A record's own fd shows the record's tag (a manifest's chunk comes
     * as a record of its own, its tag from the manifest). */
    byval_want_t w = {rec, fd, fd_ino, size, obj, fd == rec->fd ? rec->tag : 0};
    /* The pidfd was identified when it was opened; its pid here is
     * found by step 1 like any other. */
    byval_exporter_t x = {.pidfd = pidfd};
    if (pidfd < 0 && mode == BYVAL_MODE_AUTO)
        mode = BYVAL_MODE_SOCKET; /* reached over the socket: no pidfd to use */
    byval_status_t st = resolve(&w, &self, mode, &x, fd_p, &info, msg, msglen);
    if (x.owned && x.pidfd >= 0)
        close(x.pidfd);
    return st;
}

byval_status_t byval_transport_fetch_more_fd(const byval_record_t *rec, int mode, int pidfd,
                                             uint32_t fd, uint32_t fd_ino, uint64_t size, int *fd_p,
                                             char *msg, size_t msglen)
{
    return byval_transport_fetch_obj(rec, mode, pidfd, fd, fd_ino, size,
                                     rec ? byval_record_obj(rec, fd) : BYVAL_OBJ_MEMORY, fd_p, msg,
                                     msglen);
}

byval_status_t byval_getfd_obj(int pidfd, uint32_t pid, uint32_t fd, uint32_t fd_ino, uint64_t size,
                               byval_obj_t obj, int *fd_p, char *msg, size_t msglen)
{
    if (fd_p)
        *fd_p = -1;
    byval_msg(msg, msglen, "%s", ""); /* no failure yet */
    if (!fd_p || pidfd < 0 || fd > INT32_MAX)
        return byval_fail(BYVAL_E_INVALID, msg, msglen,
                          "byval_getfd_obj: invalid arguments (pidfd %d, pid %u, fd %u)", pidfd,
                          pid, fd);
    /* No record: nothing a registry could list, so /proc proves the kind;
     * pid is ours (the caller's pidfd was opened on it). */
    byval_want_t w = {NULL, fd, fd_ino, size, obj, 0};
    byval_exporter_t x = {.pid = pid, .pidfd = pidfd};
    return fetch_proven(&w, &x, fd_p, msg, msglen);
}
