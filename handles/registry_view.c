/* SPDX-License-Identifier: MIT */
/*
 * registry_view.c - an importer's view of an exporter's registry: finding
 * it (registry_find.c: the memfd named "ipcbyval-registry" at
 * /proc/PID/fd/1000, else in the list of /proc/PID/fd), fetching it and
 * its wake-up pipe through the transport, checking that it describes the
 * exporter, reading its slots. The list of views and the watcher thread
 * are registry_watch.c's.
 *
 * What we assume of the page (registry.h, "Trust"): nothing but its seals
 * and its size, which the kernel enforces. Every value in it is the
 * exporter's to write, and the exporter may be hostile (of another uid,
 * for a root importer): `high` is clamped to the table, the header only
 * selects what we fetch next (checked again by the transport), slots are
 * only compared. The seals (checked before mapping) mean no peer can
 * shrink it under us (no SIGBUS) or write it but its exporter.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "handles/fdkind.h"
#include "handles/registry_internal.h"
#include "handles/rendezvous.h"
#include "handles/resolve.h"
#include "handles/resolve_internal.h"
#include "handles/transport.h"

/* Slots the exporter has used, bounded by the table (the header is the
 * exporter's to write, so never trusted beyond it). */
static uint32_t used_slots(const byval_reg_view_t *v)
{
    uint32_t high = __atomic_load_n(&v->hdr->high, __ATOMIC_ACQUIRE);
    return high > BYVAL_REG_SLOTS ? BYVAL_REG_SLOTS : high;
}

const uint64_t *byval_reg_find(byval_reg_view_t *v, uint64_t key, uint32_t ino, uint64_t *serial_p)
{
    uint32_t high = used_slots(v);
    for (uint32_t i = 0; i < high; i++) {
        const byval_reg_slot_t *s = &v->slot[i];
        /* Seqlock read: the serial, the fields, the serial again (acquire
         * loads of the fields keep the second read after them; TSan
         * cannot follow a fence). */
        uint64_t ser = __atomic_load_n(&s->serial, __ATOMIC_ACQUIRE);
        if (!ser || __atomic_load_n(&s->key, __ATOMIC_ACQUIRE) != key ||
            (ino && __atomic_load_n(&s->ino, __ATOMIC_ACQUIRE) != ino))
            continue;
        if (__atomic_load_n(&s->serial, __ATOMIC_RELAXED) != ser)
            continue;
        *serial_p = ser;
        return &s->serial;
    }
    return NULL;
}

const uint64_t *byval_reg_find_serial(byval_reg_view_t *v, uint32_t serial32,
                                      byval_reg_slot_t *slot_p)
{
    uint32_t high = used_slots(v);
    for (uint32_t i = 0; i < high; i++) {
        const byval_reg_slot_t *s = &v->slot[i];
        uint64_t ser = __atomic_load_n(&s->serial, __ATOMIC_ACQUIRE);
        if (!ser || (uint32_t)ser != serial32)
            continue;
        byval_reg_slot_t c;
        c.key = __atomic_load_n(&s->key, __ATOMIC_ACQUIRE); /* as in byval_reg_find */
        c.ino = __atomic_load_n(&s->ino, __ATOMIC_ACQUIRE);
        c.fd = __atomic_load_n(&s->fd, __ATOMIC_ACQUIRE);
        c.size = __atomic_load_n(&s->size, __ATOMIC_ACQUIRE);
        if (__atomic_load_n(&s->serial, __ATOMIC_RELAXED) != ser)
            continue; /* rewritten meanwhile: not the export named */
        c.serial = ser;
        *slot_p = c;
        return &s->serial;
    }
    return NULL;
}

/* ---- attach ------------------------------------------------------------- */

/* Map the registry behind mfd (closed here) and check that it describes
 * the exporter (pid, identity): a view with the list's reference, or
 * NULL. The pipe is fetched with fetch(arg, fd, ino, &fd). */
typedef byval_status_t (*fetch_fn)(void *arg, uint32_t fd, uint32_t ino, byval_obj_t obj, int *fd_p,
                                   char *msg, size_t msglen);

static byval_reg_view_t *view_map(int mfd, uint32_t pidns, uint32_t pid, const uint64_t *identity,
                                  fetch_fn fetch, void *arg, char *msg, size_t msglen)
{
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
    if (m == MAP_FAILED) {
        byval_msg(msg, msglen, "mmap of pid %u's registry failed: %s", pid, strerror(errno));
        return NULL;
    }
    const byval_reg_header_t *h = m;
    int pfd = -1;
    if (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != BYVAL_REG_MAGIC ||
        h->version != BYVAL_REG_VERSION || h->nslots != BYVAL_REG_SLOTS ||
        /* With an identity (pidfs inode or start time, checked against our
         * pidfd) the pid is not needed: a translated pid differs from the
         * one the exporter sees itself as. */
        (identity ? h->identity != *identity : h->pid != pid)) {
        byval_msg(msg, msglen, "pid %u's registry does not describe it", pid);
        goto fail;
    }
    if (fetch(arg, h->pipe_fd, h->pipe_ino, BYVAL_OBJ_WAKE_PIPE, &pfd, msg, msglen) != BYVAL_OK)
        goto fail;
    byval_reg_view_t *v = calloc(1, sizeof(*v));
    if (!v) {
        close(pfd);
        goto fail;
    }
    /* The shared open file: we never read it, so no peer's O_NONBLOCK
     * or F_SETPIPE_SZ matters to us (registry_watch.c). */
    v->pipe_fd = pfd;
    v->seen = __atomic_load_n(&h->seq, __ATOMIC_ACQUIRE);
    v->pidns = pidns;
    v->pid = pid;
    v->identity = h->identity;
    v->hdr = h;
    v->page_dev = (uint64_t)st.st_dev;
    v->page_ino = (uint64_t)st.st_ino;
    v->slot = (const byval_reg_slot_t *)(h + 1);
    v->kind = WATCH_VIEW;
    v->refs = 1; /* the list's */
    return v;
fail:
    munmap(m, BYVAL_REG_BYTES);
    return NULL;
}

/* Fetching the registry's fds through the transport that reached the
 * exporter of a record. pid: the exporter's here (0: not reachable by
 * pid); seen: what byval_reg_find_page proved of the next fd (NULL: nothing). */
typedef struct rec_fetch {
    const byval_record_t *rec;
    int mode, pidfd;
    uint32_t pid;
    const byval_fd_seen_t *seen;
} rec_fetch_t;

/* The short way on the pidfd route, for what needs no proof of export
 * from /proc: the registry proven at its hint (seen), or the pipe the
 * proven registry's header names (as proof.c takes the fds its slots
 * name: the exporter's own word, and nothing of another process; its
 * number lives as long as the page). pidfd_getfd, then the check after
 * it (kind from the duplicate itself, inode, and seen's device and
 * inode): a duplicate that is not what was named is refused and closed
 * off our thread where its close could wait (byval_fd_release). -1: not
 * taken (the full pipeline then runs, and says why when it fails). */
static int fetch_short(const rec_fetch_t *f, uint32_t fd, uint32_t ino, byval_obj_t obj, int *fd_p,
                       byval_status_t *st_p, char *msg, size_t msglen)
{
    if (f->mode == BYVAL_MODE_SOCKET || f->pidfd < 0 || !f->pid ||
        (obj == BYVAL_OBJ_REGISTRY && !f->seen))
        return -1;
    int dup = byval_pidfd_getfd(f->pidfd, (int)fd, 0);
    if (dup < 0)
        return -1;
    *st_p = byval_check_fd_kind(dup, f->pid, fd, ino, 0, obj, f->seen, msg, msglen);
    if (*st_p == BYVAL_OK)
        *fd_p = dup;
    else
        byval_fd_release(dup);
    return 0;
}

static byval_status_t fetch_rec(void *arg, uint32_t fd, uint32_t ino, byval_obj_t obj, int *fd_p,
                                char *msg, size_t msglen)
{
    rec_fetch_t *f = arg;
    byval_status_t st;
    if (fetch_short(f, fd, ino, obj, fd_p, &st, msg, msglen) == 0)
        return st;
    return byval_transport_fetch_obj(f->rec, f->mode, f->pidfd, fd, ino, 0, obj, fd_p, msg, msglen);
}

typedef struct pid_fetch {
    int pidfd;
    uint32_t pid;
} pid_fetch_t;

static byval_status_t fetch_pid(void *arg, uint32_t fd, uint32_t ino, byval_obj_t obj, int *fd_p,
                                char *msg, size_t msglen)
{
    pid_fetch_t *f = arg;
    return byval_getfd_obj(f->pidfd, f->pid, fd, ino, 0, obj, fd_p, msg, msglen);
}

byval_reg_view_t *byval_reg_attach_st(const byval_record_t *rec, int mode, int pidfd,
                                      byval_status_t *st_p, char *msg, size_t msglen)
{
    *st_p = BYVAL_OK;
    byval_reg_view_t *v = byval_reg_lookup(rec->pidns, rec->pid, rec->identity);
    if (v)
        return v;
    /* Unlocked from here: fetching fds may wait on the exporter's socket. */
    errno = 0;
    int pid = pidfd >= 0 ? byval_pidfd_pid(pidfd) : -1;
    /* An exporter outside our pid namespace (its pidfd shows pid 0), reached
     * through the directory, is asked for its registry instead */
    int rdv = pid == 0 && byval_rendezvous_enabled();
    int e = rdv || pid > 0                   ? 0
        : errno == EMFILE || errno == ENFILE ? errno /* fdinfo not opened */
                                             : ENOENT;
    /* What the hint holds first; where it is not the registry after all
     * (a number the program took for a memfd of that very size), the
     * list of the fd table, as before the hint. */
    for (int hint = 1; !e; hint = 0) {
        uint32_t rfd = 0, rino = 0;
        byval_fd_seen_t seen = {0};
        if (!rdv && (e = byval_reg_find_page(pid, hint, &rfd, &rino, &seen)) != 0)
            break;
        rec_fetch_t f = {rec, mode, pidfd, pid > 0 ? (uint32_t)pid : 0, seen.kind ? &seen : NULL};
        int mfd = -1;
        if ((*st_p = rdv
                 ? byval_rendezvous_registry(rec, &mfd, msg, msglen)
                 : fetch_rec(&f, rfd, rino, BYVAL_OBJ_REGISTRY, &mfd, msg, msglen)) != BYVAL_OK) {
            if (seen.kind && *st_p == BYVAL_E_FDKIND)
                continue; /* not the registry after all: list the table */
            return NULL;  /* the transport's refusal (EPERM...): as it says */
        }
        f.seen = NULL; /* the pipe: the registry names it */
        v = view_map(mfd, rec->pidns, rec->pid, &rec->identity, fetch_rec, &f, msg, msglen);
        if (!v && seen.kind)
            continue;
        if (v && !rdv) {
            v->live_pid = pid;
            v->live_fd = rfd;
        }
        if (v)
            v = byval_reg_publish(v, msg, msglen);
        if (!v)
            *st_p = BYVAL_E_FDKIND;
        return v;
    }
    *st_p = e == EACCES || e == EPERM               ? BYVAL_E_PERM
        : e == EMFILE || e == ENFILE || e == ENOMEM ? BYVAL_E_NOFD
                                                    : BYVAL_E_FDKIND;
    if (*st_p == BYVAL_E_NOFD)
        byval_msg(msg, msglen, "reading pid %u's /proc/PID/fd for its registry: %s", rec->pid,
                  strerror(e));
    else if (*st_p == BYVAL_E_PERM)
        byval_msg(msg, msglen,
                  "reading pid %u's /proc/PID/fd for its registry: Operation not permitted "
                  "(hint: ptrace access denied: it needs the exporter's uid or "
                  "CAP_SYS_PTRACE, as pidfd_getfd does)",
                  rec->pid);
    else
        byval_msg(msg, msglen, "pid %u publishes no registry that this process can see", rec->pid);
    return NULL;
}

byval_reg_view_t *byval_reg_attach(const byval_record_t *rec, int mode, int pidfd, char *msg,
                                   size_t msglen)
{
    byval_status_t st;
    return byval_reg_attach_st(rec, mode, pidfd, &st, msg, msglen);
}

byval_reg_view_t *byval_reg_attach_pid(uint32_t pid, char *msg, size_t msglen)
{
    byval_self_t self;
    uint32_t rfd, rino;
    if (!pid || byval_self_get(&self) != 0)
        return NULL;
    int pidfd = byval_pidfd_open((pid_t)pid, 0);
    if (pidfd < 0) {
        byval_msg(msg, msglen, "pidfd_open(%u) failed: %s", pid, strerror(errno));
        return NULL;
    }
    byval_reg_view_t *v = NULL;
    /* The registry must describe the process behind our pidfd: its
     * identity, checked against the pidfd (not the pid, which a new
     * process may hold by now). */
    byval_record_t rec;
    memset(&rec, 0, sizeof(rec));
    rec.pid = pid;
    rec.pidns = self.pidns;
    rec.boot = self.boot;
    rec.flags = byval_pidfd_is_pidfs(pidfd) ? BYVAL_FLAG_ID_PIDFS : 0;
    int mfd = -1;
    pid_fetch_t f = {pidfd, pid};
    byval_fd_seen_t seen;
    if (byval_reg_find_page((int)pid, 1, &rfd, &rino, &seen) != 0) {
        byval_msg(msg, msglen, "pid %u publishes no registry", pid);
    } else if (fetch_pid(&f, rfd, rino, BYVAL_OBJ_REGISTRY, &mfd, msg, msglen) == BYVAL_OK &&
               (v = view_map(mfd, self.pidns, pid, NULL, fetch_pid, &f, msg, msglen)) != NULL) {
        v->live_pid = (int)pid;
        v->live_fd = rfd;
        rec.identity = v->identity;
        if (byval_check_identity(&rec, pidfd, msg, msglen) != BYVAL_OK) {
            byval_reg_view_free(v);
            v = NULL;
        } else {
            byval_reg_view_t *o = byval_reg_lookup(self.pidns, pid, v->identity);
            if (o) {
                byval_reg_view_free(v);
                v = o;
            } else {
                v = byval_reg_publish(v, msg, msglen);
            }
        }
    }
    close(pidfd);
    return v;
}

const uint64_t *byval_reg_find_fd(byval_reg_view_t *v, uint64_t key, uint32_t fd, uint32_t ino,
                                  uint64_t *serial_p)
{
    uint32_t high = used_slots(v);
    uint32_t from = __atomic_load_n(&v->find_from, __ATOMIC_RELAXED);
    if (from >= high)
        from = 0;
    for (uint32_t n = 0, i = from; n < high; n++, i = i + 1 < high ? i + 1 : 0) {
        const byval_reg_slot_t *s = &v->slot[i];
        uint64_t ser = __atomic_load_n(&s->serial, __ATOMIC_ACQUIRE); /* as in byval_reg_find */
        if (ser && __atomic_load_n(&s->key, __ATOMIC_ACQUIRE) == key &&
            __atomic_load_n(&s->fd, __ATOMIC_ACQUIRE) == fd &&
            __atomic_load_n(&s->ino, __ATOMIC_ACQUIRE) == ino &&
            __atomic_load_n(&s->serial, __ATOMIC_RELAXED) == ser) {
            __atomic_store_n(&v->find_from, i + 1, __ATOMIC_RELAXED);
            *serial_p = ser;
            return &s->serial;
        }
    }
    return NULL;
}
