/* SPDX-License-Identifier: MIT */
/*
 * registry_view.c - an importer's view of an exporter's registry: finding
 * the page (at /proc/PID/fd/1000, else in the list of /proc/PID/fd; over
 * the broker's routes where the exporter's /proc is not ours), fetching it
 * and its pipe, checking that it describes the exporter, reading its
 * slots; the proof of export built on it, and short records.
 *
 * Of the page we assume nothing but its seals and size, which the kernel
 * enforces: every value in it is the exporter's to write, and the
 * exporter may be hostile. `high` is clamped, the header only selects
 * what we fetch next (checked again), slots are only compared.
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/mman.h>

#include "handles/broker_internal.h"
#include "handles/registry_internal.h"
#include "handles/rendezvous.h"
#include "handles/sys.h"
#include "handles/transport.h"

#ifndef PIDFD_GET_PID_NAMESPACE
#define PIDFD_GET_PID_NAMESPACE _IO(0xFF, 5)
#endif

/* Is the fd `name` of dirfd (a /proc/PID/fd) our registry? Its link names
 * our memfd and cached attributes show a regular file of the page's size;
 * the fetch proves the rest (fdcheck.c). */
static int registry_at(int dirfd, const char *name, uint32_t *ino_p)
{
    static const char want[] = "/memfd:" BYVAL_REG_NAME " (deleted)";
    char link[128];
    struct statx stx;
    ssize_t n = readlinkat(dirfd, name, link, sizeof(link) - 1);
    if (n != (ssize_t)sizeof(want) - 1 || memcmp(link, want, (size_t)n) != 0 ||
        byval_fdk_stat(dirfd, name, 0, &stx) != 0 || !S_ISREG(stx.stx_mode) ||
        stx.stx_size != BYVAL_REG_BYTES)
        return 0;
    *ino_p = (uint32_t)stx.stx_ino;
    return 1;
}

/* The registry's fd number and inode in pid. With try_hint first at
 * BYVAL_REG_FD_HINT: one statx proves a shmem file of the page's size
 * (what the precheck proves of any object, fdcheck.c), kept in *seen for
 * the check after pidfd_getfd. Else the list of /proc/PID/fd. 0, or an
 * errno: ENOENT (none), EACCES/EPERM (ptrace rules), EMFILE... */
static int find_page(int pid, int try_hint, uint32_t *fd_p, uint32_t *ino_p, byval_fd_seen_t *seen)
{
    char dir[64];
    struct statx stx;
    memset(seen, 0, sizeof(*seen));
    snprintf(dir, sizeof(dir), "/proc/%d/fd/%u", pid, BYVAL_REG_FD_HINT);
    if (try_hint && byval_fdk_stat(AT_FDCWD, dir, 0, &stx) == 0 &&
        stx.stx_size == BYVAL_REG_BYTES && byval_fdk_classify_fast(&stx) == FDK_SHMEM) {
        *fd_p = BYVAL_REG_FD_HINT;
        *ino_p = (uint32_t)stx.stx_ino;
        *seen = (byval_fd_seen_t){byval_fdk_dev(&stx), stx.stx_ino, FDK_SHMEM};
        return 0;
    }
    snprintf(dir, sizeof(dir), "/proc/%d/fd", pid);
    DIR *d = opendir(dir);
    if (!d)
        return errno;
    int rc = ENOENT;
    for (struct dirent *e; rc != 0 && (e = readdir(d)) != NULL;) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9' || !registry_at(dirfd(d), e->d_name, ino_p) ||
            (!try_hint && atoi(e->d_name) == (int)BYVAL_REG_FD_HINT))
            continue;
        *fd_p = (uint32_t)atoi(e->d_name);
        rc = 0;
    }
    closedir(d);
    return rc;
}

/* The first live slot from `from` on (wrapping) whose fields `by` names
 * equal w's, copied into *c; its serial word, or NULL. Seqlock reads
 * (serial, fields, serial again: acquire loads keep the order, which TSan
 * follows where it cannot follow a fence); the header is the exporter's
 * to write, so `high` is clamped to the table. */
enum { BY_KEY = 1, BY_INO = 2, BY_FD = 4, BY_SERIAL32 = 8 };

static const uint64_t *scan(byval_reg_view_t *v, uint32_t from, int by, const byval_reg_slot_t *w,
                            byval_reg_slot_t *c)
{
    uint32_t high = __atomic_load_n(&v->hdr->high, __ATOMIC_ACQUIRE);
    high = high > BYVAL_REG_SLOTS ? BYVAL_REG_SLOTS : high;
    from = from < high ? from : 0;
    for (uint32_t n = 0, i = from; n < high; n++, i = i + 1 < high ? i + 1 : 0) {
        const byval_reg_slot_t *s = &v->slot[i];
        uint64_t ser = __atomic_load_n(&s->serial, __ATOMIC_ACQUIRE);
        if (!ser)
            continue;
        c->key = __atomic_load_n(&s->key, __ATOMIC_ACQUIRE);
        c->ino = __atomic_load_n(&s->ino, __ATOMIC_ACQUIRE);
        c->fd = __atomic_load_n(&s->fd, __ATOMIC_ACQUIRE);
        c->size = __atomic_load_n(&s->size, __ATOMIC_ACQUIRE);
        if (__atomic_load_n(&s->serial, __ATOMIC_RELAXED) != ser ||
            ((by & BY_KEY) && c->key != w->key) || ((by & BY_INO) && c->ino != w->ino) ||
            ((by & BY_FD) && c->fd != w->fd) ||
            ((by & BY_SERIAL32) && (uint32_t)ser != (uint32_t)w->serial))
            continue;
        c->serial = ser;
        if (by & BY_FD) /* a manifest's chunks were published in order */
            __atomic_store_n(&v->find_from, i + 1, __ATOMIC_RELAXED);
        return &s->serial;
    }
    return NULL;
}

const uint64_t *byval_reg_find(byval_reg_view_t *v, uint64_t key, uint32_t ino, uint64_t *serial_p)
{
    byval_reg_slot_t w = {.key = key, .ino = ino}, c;
    const uint64_t *word = scan(v, 0, BY_KEY | (ino ? BY_INO : 0), &w, &c);
    if (word)
        *serial_p = c.serial;
    return word;
}

const uint64_t *byval_reg_find_serial(byval_reg_view_t *v, uint32_t serial32,
                                      byval_reg_slot_t *slot_p)
{
    byval_reg_slot_t w = {.serial = serial32};
    return scan(v, 0, BY_SERIAL32, &w, slot_p);
}

const uint64_t *byval_reg_find_fd(byval_reg_view_t *v, uint64_t key, uint32_t fd, uint32_t ino,
                                  uint64_t *serial_p)
{
    byval_reg_slot_t w = {.key = key, .ino = ino, .fd = fd}, c;
    const uint64_t *word =
        scan(v, __atomic_load_n(&v->find_from, __ATOMIC_RELAXED), BY_KEY | BY_INO | BY_FD, &w, &c);
    if (word)
        *serial_p = c.serial;
    return word;
}

/* Fetching the registry's fds through the transport that reached the
 * exporter of a record. pid: its pid here (0: none); seen: what find_page
 * proved of the next fd (NULL: nothing). */
typedef struct rec_fetch {
    const byval_record_t *rec;
    int mode, pidfd;
    uint32_t pid;
    const byval_fd_seen_t *seen;
} rec_fetch_t;

/* The short way on the pidfd route for what needs no proof of export: the
 * registry proven at its hint, or the pipe its header names (the
 * exporter's own word): pidfd_getfd, then the check after it. Where not
 * taken, the full pipeline (which says why when it fails). */
static byval_status_t fetch_rec(const rec_fetch_t *f, uint32_t fd, uint32_t ino, byval_obj_t obj,
                                int *fd_p, char *msg, size_t msglen)
{
    int dup = f->mode == BYVAL_MODE_SOCKET || f->pidfd < 0 || !f->pid ||
            (obj == BYVAL_OBJ_REGISTRY && !f->seen)
        ? -1
        : byval_pidfd_getfd(f->pidfd, (int)fd, 0);
    if (dup < 0)
        return byval_transport_fetch_obj(f->rec, f->mode, f->pidfd, fd, ino, 0, obj, fd_p, msg,
                                         msglen);
    byval_status_t st = byval_check_fd_kind(dup, f->pid, fd, ino, 0, obj, f->seen, msg, msglen);
    if (st == BYVAL_OK)
        *fd_p = dup;
    else
        byval_fd_release(dup);
    return st;
}

/* Map the registry behind mfd (closed here), check that it describes f's
 * exporter and fetch its pipe: a view with the list's reference, or NULL. */

static byval_reg_view_t *view_map(int mfd, rec_fetch_t *f, char *msg, size_t msglen)
{
    uint32_t pid = f->rec->pid;
    struct stat st;
    int seals = fcntl(mfd, F_GET_SEALS), need = byval_reg_page_seals();
    if (seals < 0 || (seals & need) != need || fstat(mfd, &st) != 0 ||
        st.st_size != (off_t)BYVAL_REG_BYTES) {
        byval_msg(msg, msglen,
                  "pid %u's registry is not sealed against resizing and writes (seals 0x%x): "
                  "refused (any holder could make its readers fault)",
                  pid, seals < 0 ? 0 : seals);
        close(mfd);
        return NULL;
    }
    void *m = mmap(NULL, BYVAL_REG_BYTES, PROT_READ, MAP_SHARED, mfd, 0);
    close(mfd);
    if (m == MAP_FAILED)
        return byval_fail_null(msg, msglen, "mmap of pid %u's registry failed: %s", pid,
                               strerror(errno));
    const byval_reg_header_t *h = m;
    int pfd = -1;
    if (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != BYVAL_REG_MAGIC ||
        h->version != BYVAL_REG_VERSION || h->nslots != BYVAL_REG_SLOTS ||
        h->identity != f->rec->identity) { /* proven on our pidfd; not the pid */
        byval_msg(msg, msglen, "pid %u's registry does not describe it", pid);
        goto fail;
    }
    if (fetch_rec(f, h->pipe_fd, h->pipe_ino, BYVAL_OBJ_WAKE_PIPE, &pfd, msg, msglen) != BYVAL_OK)
        goto fail;
    byval_reg_view_t *v = calloc(1, sizeof(*v));
    if (!v) {
        close(pfd);
        goto fail;
    }
    /* The shared open file: we never read it, so no peer's O_NONBLOCK
     * or F_SETPIPE_SZ matters to us (registry_watch.c). */
    *v = (byval_reg_view_t){.kind = WATCH_VIEW,
                            .refs = 1 /* the list's */,
                            .pipe_fd = pfd,
                            .seen = __atomic_load_n(&h->seq, __ATOMIC_ACQUIRE),
                            .pidns = f->rec->pidns,
                            .pid = pid,
                            .identity = h->identity,
                            .page_dev = (uint64_t)st.st_dev,
                            .page_ino = (uint64_t)st.st_ino,
                            .hdr = h,
                            .slot = (const byval_reg_slot_t *)(h + 1)};
    return v;
fail:
    munmap(m, BYVAL_REG_BYTES);
    return NULL;
}

static byval_reg_view_t *attach_st(const byval_record_t *rec, int mode, int pidfd,
                                   byval_status_t *st_p, char *msg, size_t msglen)
{
    *st_p = BYVAL_OK;
    byval_reg_view_t *v = byval_reg_lookup(rec->pidns, rec->pid, rec->identity, UINT64_MAX);
    if (v)
        return v;
    /* Unlocked from here: fetching fds may wait on the exporter's socket. */
    errno = 0;
    int pid = pidfd >= 0 ? byval_pidfd_pid(pidfd) : -1;
    /* An exporter outside our pid namespace (its pidfd shows pid 0) has no
     * /proc here: its broker's routes bring its registry. */
    int by_proc = pid != 0;
    int e = pid >= 0                         ? 0
        : errno == EMFILE || errno == ENFILE ? errno /* fdinfo not opened */
                                             : ENOENT;
    /* What the hint holds first; where it is not the registry after all
     * (a number the program took for a memfd of that very size), the
     * list of the fd table, as before the hint. */
    for (int hint = 1; !e; hint = 0) {
        uint32_t rfd = 0, rino = 0;
        byval_fd_seen_t seen = {0};
        if (by_proc && (e = find_page(pid, hint, &rfd, &rino, &seen)) != 0)
            break;
        rec_fetch_t f = {rec, mode, pidfd, (uint32_t)pid, seen.kind ? &seen : NULL};
        int mfd = -1;
        if ((*st_p = by_proc ? fetch_rec(&f, rfd, rino, BYVAL_OBJ_REGISTRY, &mfd, msg, msglen)
                             : byval_broker_registry(rec, &mfd, msg, msglen)) != BYVAL_OK) {
            if (seen.kind && *st_p == BYVAL_E_FDKIND)
                continue; /* not the registry after all: list the table */
            return NULL;  /* the transport's refusal (EPERM...): as it says */
        }
        f.seen = NULL; /* the pipe: the registry names it */
        v = view_map(mfd, &f, msg, msglen);
        if (!v && seen.kind)
            continue;
        if (v) {
            v->live_pid = pid;
            v->live_fd = rfd;
            v = byval_reg_publish(v, msg, msglen);
        }
        if (!v)
            *st_p = BYVAL_E_FDKIND;
        return v;
    }
    if (e == EMFILE || e == ENFILE || e == ENOMEM)
        *st_p =
            byval_fail(BYVAL_E_NOFD, msg, msglen,
                       "reading pid %u's /proc/PID/fd for its registry: %s", rec->pid, strerror(e));
    else if (e == EACCES || e == EPERM)
        *st_p = byval_fail(
            BYVAL_E_PERM, msg, msglen,
            "reading pid %u's /proc/PID/fd for its registry: Operation not permitted (hint: ptrace "
            "access denied: it needs the exporter's uid or CAP_SYS_PTRACE, as pidfd_getfd does)",
            rec->pid);
    else
        *st_p = byval_fail(BYVAL_E_FDKIND, msg, msglen,
                           "pid %u publishes no registry that this process can see", rec->pid);
    return NULL;
}

byval_reg_view_t *byval_reg_attach(const byval_record_t *rec, int mode, int pidfd, char *msg,
                                   size_t msglen)
{
    byval_status_t st;
    return attach_st(rec, mode, pidfd, &st, msg, msglen);
}

byval_reg_view_t *byval_reg_attach_pid(uint32_t pid, char *msg, size_t msglen)
{
    byval_self_t self;
    byval_record_t rec;
    byval_status_t st;
    if (!pid || byval_self_get(&self) != 0)
        return NULL;
    int pidfd = byval_pidfd_open((pid_t)pid, 0);
    if (pidfd < 0)
        return byval_fail_null(msg, msglen, "pidfd_open(%u) failed: %s", pid, strerror(errno));
    /* The registry must describe the process behind our pidfd. */
    byval_reg_view_t *v = byval_pidfd_record(pidfd, pid, &self, &rec) == 0
        ? attach_st(&rec, BYVAL_MODE_PIDFD, pidfd, &st, msg, msglen)
        : NULL;
    if (!v && msg && !msg[0])
        byval_msg(msg, msglen, "pid %u exited", pid);
    close(pidfd);
    return v;
}

uint64_t byval_record_key(const byval_record_t *rec, uint32_t fd)
{
    /* The record's own fd is published under its kind and allocation id;
     * any other fd it leads to is a chunk its manifest lists, published
     * under the chunk kind and the same id (shim/cu_export.c). */
    return fd == rec->fd ? BYVAL_REG_KEY(rec->kind, rec->alloc_id)
                         : BYVAL_REG_KEY(BYVAL_KIND_CU_VMM, rec->alloc_id);
}

/* The proof of export (resolve.c's step 3): the exporter's registry lists
 * fd as the export rec names, read as (word, serial). An entry is
 * withdrawn before its fd is closed and serials are never reused, so an
 * unchanged serial after pidfd_getfd proves the number held that open
 * file all along, where an inode cannot (every NVIDIA VMM chunk fd is
 * /dev/nvidiactl). A hostile exporter can only make us duplicate its own
 * files, which step 5 then checks. */
static byval_status_t prove(const byval_record_t *rec, int pidfd, uint32_t pid, uint32_t fd,
                            uint32_t ino, byval_proof_t *proof, char *msg, size_t msglen)
{
    uint64_t key = byval_record_key(rec, fd);
    char why[384] = "";
    byval_status_t st;
    byval_reg_view_t *v = attach_st(rec, BYVAL_MODE_PIDFD, pidfd, &st, why, sizeof(why));
    if (!v) {
        /* Refused as pidfd_getfd would be: the caller's policy decides. */
        if (st == BYVAL_E_PERM || st == BYVAL_E_NOSYS || st == BYVAL_E_GONE || st == BYVAL_E_NOFD)
            return byval_fail(st, msg, msglen, "%s", why);
        return byval_fail(BYVAL_E_FDKIND, msg, msglen,
                          "fd %u of pid %u is not proven exported (%s): not duplicated", fd, pid,
                          why);
    }
    uint64_t serial = 0;
    const uint64_t *word = byval_reg_find_fd(v, key, fd, ino, &serial);
    if (!word) {
        byval_reg_view_put(v);
        return byval_fail(BYVAL_E_FDKIND, msg, msglen,
                          "pid %u's registry does not list fd %u (inode %u) as the export the "
                          "handle names: freed since, or a stale or forged handle, not duplicated",
                          pid, fd, ino);
    }
    proof->word = word;
    proof->serial = serial;
    proof->hold = v;
    return BYVAL_OK;
}

static void done(byval_proof_t *proof)
{
    byval_reg_view_put(proof->hold);
    proof->word = NULL;
    proof->hold = NULL;
}

const byval_prover_t byval_reg_prover = {prove, done};

/* A short record (wire.h) carries the exporter's pid, its identity's low
 * 32 bits and a guard of its host and pid namespace. From another pid
 * namespace its pid names nothing here; the directory's socket names carry
 * the identity: every name with those 32 bits is tried, each proven by its
 * full identity (planted names cost a connect each, within one deadline),
 * and where the kernel tells a pidfd's pid namespace (6.11) the guard must
 * match. In ours, the identity is read on a pidfd of the pid. */
typedef struct dir_short {
    const byval_short_t *s;
    uint32_t boot;
    int64_t deadline;
    byval_record_t rec;
    int pidfd, n;
} dir_short_t;

static int dir_candidate(const char *name, uint32_t boot, uint64_t id, void *arg)
{
    dir_short_t *a = arg;
    if (boot != a->boot || (uint32_t)id != a->s->id32)
        return 0;
    a->n++;
    if (byval_broker_now_ms() >= a->deadline)
        return 1;
    byval_record_t rec = {
        .pid = a->s->pid, .boot = a->boot, .identity = id, .flags = BYVAL_FLAG_ID_PIDFS};
    int pidfd = byval_broker_dir_pidfd(&rec, a->deadline);
    if (pidfd < 0)
        return 0;
    /* Its pid namespace, where the kernel says (0: it does not). */
    struct stat st;
    int ns = ioctl(pidfd, PIDFD_GET_PID_NAMESPACE, 0);
    rec.pidns = ns >= 0 && fstat(ns, &st) == 0 ? (uint32_t)st.st_ino : 0;
    byval_close_fd(&ns);
    if (rec.pidns && byval_short_guard(a->boot, rec.pidns) != a->s->guard) {
        close(pidfd);
        return 0;
    }
    a->rec = rec;
    a->pidfd = pidfd;
    return 1;
}

static byval_status_t find_short_dir(const byval_short_t *s, const byval_self_t *self,
                                     byval_record_t *rec_p, int *pidfd_p, char *msg, size_t msglen)
{
    if (!byval_rendezvous_enabled())
        return byval_fail(BYVAL_E_FOREIGN_NS, msg, msglen,
                          "handle of pid %u comes from another host, boot or pid namespace: short "
                          "by-value handles (event pools) resolve within one pid namespace",
                          s->pid);
    if (!(s->flags & BYVAL_FLAG_ID_PIDFS))
        return byval_fail(BYVAL_E_IDENTITY, msg, msglen,
                          "event pool of pid %u: its exporter has no pidfs identity (kernel before "
                          "6.9): the rendezvous directory cannot find it",
                          s->pid);
    dir_short_t a = {s, self->boot, byval_broker_now_ms() + BROKER_FETCH_MS, {0}, -1, 0};
    byval_rendezvous_each(dir_candidate, &a);
    if (a.pidfd < 0)
        return byval_fail(BYVAL_E_GONE, msg, msglen,
                          "event pool of pid %u comes from another pid namespace and no exporter "
                          "in the rendezvous directory %s proves to be it (%d named with its "
                          "identity): it does not share the directory, or it exited",
                          s->pid, byval_rendezvous_dir(), a.n);
    /* Its pid names nothing here: the registry's pipe and the pool's fd
     * come through the socket, never pidfd_getfd with that pid. */
    byval_transport_remember_socket(&a.rec);
    *rec_p = a.rec;
    *pidfd_p = a.pidfd;
    return BYVAL_OK;
}

/* In our pid namespace: a listed view (*v_p), else a pidfd of s's pid
 * proven to be its exporter. */
static byval_status_t find_short(const byval_short_t *s, const byval_self_t *self,
                                 byval_record_t *rec_p, byval_reg_view_t **v_p, int *pidfd_p,
                                 char *msg, size_t msglen)
{
    uint64_t identity = 0;
    rec_p->pid = s->pid;
    rec_p->pidns = self->pidns;
    rec_p->boot = self->boot;
    rec_p->flags = s->flags;
    if ((*v_p = byval_reg_lookup(self->pidns, s->pid, s->id32, UINT32_MAX)) != NULL) {
        rec_p->identity = (*v_p)->identity;
        return BYVAL_OK;
    }
    int pidfd = *pidfd_p = byval_pidfd_open((pid_t)s->pid, 0);
    if (pidfd < 0) {
        int e = errno;
        byval_msg(msg, msglen, "pidfd_open(%u) failed: %s%s", s->pid, strerror(e),
                  e == ESRCH ? " (the exporter has exited)" : "");
        return e == ESRCH                  ? BYVAL_E_GONE
            : e == ENOSYS                  ? BYVAL_E_NOSYS
            : (e == EMFILE || e == ENFILE) ? BYVAL_E_NOFD
                                           : BYVAL_E_SYS;
    }
    /* Its identity, as the handle names it. */
    struct stat st;
    int pidfs = s->flags & BYVAL_FLAG_ID_PIDFS, e = 0;
    byval_status_t rc = BYVAL_OK;
    if (pidfs && (!byval_pidfd_is_pidfs(pidfd) || fstat(pidfd, &st) != 0))
        rc = byval_fail(BYVAL_E_IDENTITY, msg, msglen,
                        "cannot read pid %u's pidfs identity here (the handle names it by it)",
                        s->pid);
    else if (pidfs)
        identity = (uint64_t)st.st_ino;
    else if ((e = byval_proc_start_time((pid_t)s->pid, &identity)) == ENOENT || e == ESRCH)
        rc = byval_fail(BYVAL_E_GONE, msg, msglen, "exporter pid %u has exited", s->pid);
    else if (e)
        rc = byval_fail(BYVAL_E_SYS, msg, msglen, "cannot read pid %u's start time: %s", s->pid,
                        strerror(e));
    if (rc == BYVAL_OK && (uint32_t)identity != s->id32)
        rc = byval_fail(BYVAL_E_IDENTITY, msg, msglen,
                        "pid %u is not the exporter any more (identity %llu does not end in %u): "
                        "the exporter exited and its pid was reused",
                        s->pid, (unsigned long long)identity, s->id32);
    rec_p->identity = identity;
    return rc == BYVAL_OK ? byval_check_identity(rec_p, pidfd, msg, msglen) : rc;
}

byval_status_t byval_reg_attach_short(const byval_short_t *s, const byval_self_t *self, int mode,
                                      byval_reg_view_t **v_p, byval_record_t *rec_p, int *pidfd_p,
                                      char *msg, size_t msglen)
{
    int pidfd = -1;
    *v_p = NULL;
    *pidfd_p = -1;
    memset(rec_p, 0, sizeof(*rec_p));
    byval_status_t st = s->guard != byval_short_guard(self->boot, self->pidns)
        ? find_short_dir(s, self, rec_p, &pidfd, msg, msglen)
        : find_short(s, self, rec_p, v_p, &pidfd, msg, msglen);
    if (st == BYVAL_OK && !*v_p && !(*v_p = byval_reg_attach(rec_p, mode, pidfd, msg, msglen)))
        st = BYVAL_E_GONE;
    if (st != BYVAL_OK)
        byval_close_fd(&pidfd);
    else
        *pidfd_p = pidfd;
    return st;
}
