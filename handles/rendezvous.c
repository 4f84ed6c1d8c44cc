/* SPDX-License-Identifier: MIT */
/*
 * rendezvous.c - the rendezvous directory (rendezvous.h): its checks, the
 * importer's connect, and the exporter's listening socket and peer rule.
 * State is written once by byval_rendezvous_setup (the shim's init) and
 * only read afterwards. The directory is opened once, no symlink followed,
 * and used through that fd; it must be owned by us, root or the group and
 * not writable by others, and a socket there is used only when it is one
 * of our uid (or of that group).
 *
 * A name in the directory is always a listening socket until its process
 * dies: bound and listening under a temporary name first, then renamed
 * over the final one (ours alone, from our pidfs inode: anything found
 * there is stale or planted). So a name nobody listens on (ECONNREFUSED)
 * is stale for sure; exporters remove those of their uid when they start,
 * and the process that made a socket removes it at exit (a fork child
 * closes its inherited copy, broker_serve.c).
 */
#include "handles/rendezvous.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/stat.h>

#include "handles/broker_internal.h"

static struct {
    /* dirfd: O_PATH, the checked directory (-1: none); via_proc:
     * bind/connect through /proc/self/fd/DIRFD/NAME. */
    int dirfd, via_proc;
    long gid;      /* BYVAL_RENDEZVOUS_NO_GID or the trusted group */
    char dir[200]; /* as configured, for messages and the fallback path */
} rdv = {.dirfd = -1, .gid = BYVAL_RENDEZVOUS_NO_GID};

void byval_rendezvous_name(char *buf, size_t len, uint32_t boot, uint64_t identity)
{
    snprintf(buf, len, "ipcbyval-%08x-%016llx.sock", boot, (unsigned long long)identity);
}

/* The address of name in the directory: 0, or -1 when it does not fit. */
static int byval_rdv_addr(struct sockaddr_un *a, const char *name)
{
    memset(a, 0, sizeof(*a));
    a->sun_family = AF_UNIX;
    int n = rdv.via_proc
        ? snprintf(a->sun_path, sizeof(a->sun_path), "/proc/self/fd/%d/%s", rdv.dirfd, name)
        : snprintf(a->sun_path, sizeof(a->sun_path), "%s/%s", rdv.dir, name);
    return n > 0 && (size_t)n < sizeof(a->sun_path) ? 0 : -1;
}

/* Is the directory (fstat'ed) one whose entries we may trust? Only its
 * owner (us or root) and, where the group may write, the group we were
 * told to trust can have put anything there. */
static int dir_ok(const struct stat *st, const char *dir, char *msg, size_t msglen)
{
    long gid = rdv.gid;
    if (!S_ISDIR(st->st_mode))
        return byval_fail(0, msg, msglen, "IPCBYVAL_RENDEZVOUS_DIR %s is not a directory: not used",
                          dir);
    if (st->st_mode & S_IWOTH)
        return byval_fail(0, msg, msglen,
                          "IPCBYVAL_RENDEZVOUS_DIR %s is world-writable (mode %04o): any user "
                          "could plant sockets there, not used (chmod o-w it; share it with a "
                          "group through IPCBYVAL_RENDEZVOUS_GID)",
                          dir, (unsigned)(st->st_mode & 07777));
    int owner = st->st_uid == geteuid() || st->st_uid == 0 ||
        (gid != BYVAL_RENDEZVOUS_NO_GID && st->st_gid == (gid_t)gid);
    if (!owner)
        return byval_fail(
            0, msg, msglen,
            "IPCBYVAL_RENDEZVOUS_DIR %s is owned by uid %u, not by us (uid %u) or root%s: not used",
            dir, (unsigned)st->st_uid, (unsigned)geteuid(),
            gid != BYVAL_RENDEZVOUS_NO_GID ? " or the rendezvous group" : "");
    if ((st->st_mode & S_IWGRP) && (gid == BYVAL_RENDEZVOUS_NO_GID || st->st_gid != (gid_t)gid))
        return byval_fail(0, msg, msglen,
                          "IPCBYVAL_RENDEZVOUS_DIR %s is writable by group %u, which is not "
                          "IPCBYVAL_RENDEZVOUS_GID: not used (set IPCBYVAL_RENDEZVOUS_GID=%u if "
                          "that group is trusted, or chmod g-w it)",
                          dir, (unsigned)st->st_gid, (unsigned)st->st_gid);
    return 1;
}

int byval_rendezvous_setup(const char *dir, long gid, char *msg, size_t msglen)
{
    struct stat st;
    byval_msg(msg, msglen, "%s", ""); /* no failure yet */
    byval_close_fd(&rdv.dirfd);
    rdv.gid = BYVAL_RENDEZVOUS_NO_GID;
    if (!dir || !*dir)
        return 0;
    if (dir[0] != '/' || strlen(dir) >= sizeof(rdv.dir))
        return byval_fail(
            -1, msg, msglen,
            "IPCBYVAL_RENDEZVOUS_DIR must be an absolute path shorter than %zu bytes: not used",
            sizeof(rdv.dir));
    rdv.gid = gid;
    /* The last component must not be a symlink; the fd is then the
     * directory we checked, whatever is renamed over its path later. */
    int fd = open(dir, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return byval_fail(-1, msg, msglen, "IPCBYVAL_RENDEZVOUS_DIR %s: %s: not used", dir,
                          errno == ELOOP || errno == ENOTDIR ? "a symlink or not a directory"
                                                             : strerror(errno));
    if (fstat(fd, &st) != 0 || !dir_ok(&st, dir, msg, msglen)) {
        close(fd);
        return -1;
    }
    snprintf(rdv.dir, sizeof(rdv.dir), "%s", dir);
    rdv.dirfd = fd;
    rdv.via_proc = access("/proc/self/fd", X_OK) == 0;
    struct sockaddr_un a;
    char name[64];
    byval_rendezvous_name(name, sizeof(name), 0, 0);
    if (byval_rdv_addr(&a, name) != 0) {
        byval_msg(msg, msglen,
                  "IPCBYVAL_RENDEZVOUS_DIR %s: no /proc here and the path is too long for a socket "
                  "address: not used",
                  dir);
        rdv.dirfd = -1;
        close(fd);
        return -1;
    }
    return 0;
}

int byval_rendezvous_enabled(void)
{
    return rdv.dirfd >= 0;
}

const char *byval_rendezvous_dir(void)
{
    return rdv.dirfd >= 0 ? rdv.dir : "";
}

/* Is gid among the supplementary groups of conn's peer? However many it
 * has: on ERANGE the kernel says how many bytes they take. */
static int peer_in_group(int conn, gid_t gid)
{
    gid_t small[64], *groups = small;
    socklen_t len = sizeof(small);
    int in = 0, rc = getsockopt(conn, SOL_SOCKET, SO_PEERGROUPS, groups, &len);
    if (rc != 0 && errno == ERANGE && len > sizeof(small) && (groups = malloc(len)) != NULL)
        rc = getsockopt(conn, SOL_SOCKET, SO_PEERGROUPS, groups, &len);
    for (size_t i = 0; rc == 0 && groups && i < len / sizeof(gid_t); i++)
        in |= groups[i] == gid;
    if (groups != small)
        free(groups);
    return in;
}

int byval_rendezvous_group_peer(int conn, const struct ucred *cred)
{
    long gid = rdv.gid;
    return gid != BYVAL_RENDEZVOUS_NO_GID && cred->uid != geteuid() &&
        (cred->gid == (gid_t)gid || peer_in_group(conn, (gid_t)gid));
}

byval_status_t byval_rendezvous_connect(int s, const byval_record_t *rec, int64_t deadline,
                                        char *msg, size_t msglen)
{
    char name[64];
    struct stat st;
    struct sockaddr_un a;
    if (!byval_rendezvous_enabled())
        return BYVAL_E_GONE;
    if (!(rec->flags & BYVAL_FLAG_ID_PIDFS))
        return byval_fail(
            BYVAL_E_IDENTITY, msg, msglen,
            "exporter pid %u has no pidfs identity (kernel before Linux 6.9): nothing proves a "
            "process across pid namespaces there, so the rendezvous directory is not used",
            rec->pid);
    byval_rendezvous_name(name, sizeof(name), rec->boot, rec->identity);
    if (fstatat(rdv.dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
        int err = errno;
        return byval_fail(err == ENOENT ? BYVAL_E_GONE : BYVAL_E_SYS, msg, msglen,
                          "exporter pid %u has no socket in the rendezvous directory %s (%s): it "
                          "does not run with the same IPCBYVAL_RENDEZVOUS_DIR, it could not listen "
                          "there (its log says why), or it exited",
                          rec->pid, rdv.dir, strerror(err));
    }
    if (!S_ISSOCK(st.st_mode) ||
        (st.st_uid != geteuid() &&
         (rdv.gid == BYVAL_RENDEZVOUS_NO_GID || st.st_gid != (gid_t)rdv.gid)))
        return byval_fail(BYVAL_E_IDENTITY, msg, msglen,
                          "%s/%s is %s owned by uid %u gid %u, not a socket of our uid (%u)%s: "
                          "planted by someone else, not used",
                          rdv.dir, name, S_ISSOCK(st.st_mode) ? "a socket" : "not a socket",
                          (unsigned)st.st_uid, (unsigned)st.st_gid, (unsigned)geteuid(),
                          rdv.gid != BYVAL_RENDEZVOUS_NO_GID ? " or of the rendezvous group" : "");
    if (byval_rdv_addr(&a, name) != 0)
        return byval_fail(BYVAL_E_SYS, msg, msglen, "socket path for %s too long", name);
    int rc, err = 0;
    byval_broker_until(s, SO_SNDTIMEO, deadline);
    /* As for the abstract name: an interrupted connect left s unconnected. */
    while ((rc = connect(s, (struct sockaddr *)&a, sizeof(a))) != 0 && (err = errno) == EINTR &&
           byval_broker_now_ms() < deadline)
        byval_broker_until(s, SO_SNDTIMEO, deadline);
    if (rc == 0 || err == EISCONN)
        return BYVAL_OK;
    if (err == ECONNREFUSED)
        return byval_fail(BYVAL_E_GONE, msg, msglen,
                          "%s/%s is stale (nobody listens: exporter pid %u exited): ignored",
                          rdv.dir, name, rec->pid);
    return byval_fail(BYVAL_E_SYS, msg, msglen, "connect to %s/%s (exporter pid %u) failed: %s%s",
                      rdv.dir, name, rec->pid, strerror(err),
                      err == EAGAIN ? " (its backlog stayed full)" : "");
}

#define SWEEP_MAX 4096 /* entries looked at per start: bounded work */

static struct {
    pid_t owner; /* the process that made the socket; 0: none */
    ino_t ino;   /* its inode, so exit removes only that file */
    char name[64];
} mine;

/* fn(name, boot, identity, arg) for each socket name of ours among the
 * directory's first max entries, until it returns non-zero. */
static void each_name(int max, byval_rdv_each_fn fn, void *arg)
{
    int fd = openat(rdv.dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        byval_close_fd(&fd);
        return;
    }
    struct dirent *e;
    for (int n = 0; n < max && (e = readdir(d)) != NULL; n++) {
        unsigned b;
        unsigned long long id;
        char tail[8];
        if (sscanf(e->d_name, "ipcbyval-%8x-%16llx%7s", &b, &id, tail) == 3 &&
            !strcmp(tail, ".sock") && fn(e->d_name, b, id, arg))
            break;
    }
    closedir(d);
}

void byval_rendezvous_each(byval_rdv_each_fn fn, void *arg)
{
    if (byval_rendezvous_enabled())
        each_name(INT32_MAX, fn, arg);
}

/* Remove name when it is a stale socket of our uid (a killed exporter's). */
static int sweep_one(const char *name, uint32_t b, uint64_t id, void *arg)
{
    struct stat st;
    uint32_t boot = *(uint32_t *)arg;
    (void)id;
    if (strcmp(name, mine.name) == 0 || fstatat(rdv.dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
        !S_ISSOCK(st.st_mode) || st.st_uid != geteuid())
        return 0;         /* not ours to judge: importers refuse or ignore it */
    int dead = b != boot; /* a previous boot's */
    struct sockaddr_un a;
    int s = dead || byval_rdv_addr(&a, name) != 0
        ? -1
        : socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    /* Non-blocking: a full backlog says EAGAIN (alive), never waits. A
     * live exporter sees a connection closed before any request. */
    if (s >= 0) {
        dead = connect(s, (struct sockaddr *)&a, sizeof(a)) != 0 && errno == ECONNREFUSED;
        close(s);
    }
    if (dead)
        unlinkat(rdv.dirfd, name, 0);
    return 0;
}

int byval_rendezvous_listen(const byval_self_t *self, char *msg, size_t msglen)
{
    char tmp[96];
    struct sockaddr_un a;
    struct stat st;
    int err;
    if (!byval_rendezvous_enabled())
        return -1;
    if (!(self->id_flags & BYVAL_FLAG_ID_PIDFS))
        return byval_fail(-1, msg, msglen,
                          "IPCBYVAL_RENDEZVOUS_DIR needs pidfs (Linux 6.9 or later) to name and "
                          "prove this process across pid namespaces: not listening there");
    byval_rendezvous_name(mine.name, sizeof(mine.name), self->boot, self->identity);
    uint32_t boot = self->boot;
    each_name(SWEEP_MAX, sweep_one, &boot);
    snprintf(tmp, sizeof(tmp), ".%s.%u.tmp", mine.name, (unsigned)getpid());
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s < 0 || byval_rdv_addr(&a, tmp) != 0)
        goto err;
    unlinkat(rdv.dirfd, tmp, 0); /* a previous process's, same pid: ours to reuse */
    if (bind(s, (struct sockaddr *)&a, sizeof(a)) != 0)
        goto err;
    /* connect() needs write permission on the socket file: our uid only,
     * or the group's too (which must then own it). */
    int group = rdv.gid != BYVAL_RENDEZVOUS_NO_GID;
    if ((group && fchownat(rdv.dirfd, tmp, (uid_t)-1, (gid_t)rdv.gid, AT_SYMLINK_NOFOLLOW) != 0) ||
        fchmodat(rdv.dirfd, tmp, group ? 0660 : 0600, AT_SYMLINK_NOFOLLOW) != 0 ||
        listen(s, 64) != 0 || renameat(rdv.dirfd, tmp, rdv.dirfd, mine.name) != 0)
        goto err_bound;
    if (fstatat(rdv.dirfd, mine.name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
        mine.ino = st.st_ino;
        mine.owner = getpid();
    }
    return s;

err_bound:
    err = errno;
    unlinkat(rdv.dirfd, tmp, 0);
    errno = err;
err:
    err = errno;
    byval_msg(msg, msglen, "cannot listen in the rendezvous directory %s: %s%s", rdv.dir,
              strerror(err), err == EPERM ? " (the group: are we a member?)" : "");
    byval_close_fd(&s);
    errno = err;
    return -1;
}

/* Why we do not listen: written once under the broker's lock, read by
 * whoever logs it first. */
static char failed[512];
static int failed_unsaid;

void byval_rendezvous_serve(const byval_self_t *self, int efd, uint64_t tag, int *fd_p)
{
    char msg[512];
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = tag};
    *fd_p = -1;
    if (!byval_rendezvous_enabled())
        return;
    int s = byval_rendezvous_listen(self, msg, sizeof(msg));
    if (s >= 0 && epoll_ctl(efd, EPOLL_CTL_ADD, s, &ev) == 0) {
        *fd_p = s;
        return;
    }
    if (s >= 0)
        byval_msg(msg, sizeof(msg), "cannot serve the rendezvous socket: epoll_ctl: %s",
                  strerror(errno));
    byval_close_fd(&s);
    if (!__atomic_load_n(&failed_unsaid, __ATOMIC_ACQUIRE)) {
        memcpy(failed, msg, sizeof(failed));
        __atomic_store_n(&failed_unsaid, 1, __ATOMIC_RELEASE);
    }
}

void byval_rendezvous_start_failed(int err)
{
    static int said; /* every export tries the start again: once is enough */
    if (!byval_rendezvous_enabled() || __atomic_load_n(&failed_unsaid, __ATOMIC_ACQUIRE) ||
        __atomic_exchange_n(&said, 1, __ATOMIC_ACQ_REL))
        return;
    byval_msg(
        failed, sizeof(failed),
        "cannot listen in the rendezvous directory %s: the socket fallback did not start: %s%s",
        rdv.dir, strerror(err), err == EMFILE ? " (raise the open-file limit, ulimit -n)" : "");
    __atomic_store_n(&failed_unsaid, 1, __ATOMIC_RELEASE);
}

int byval_rendezvous_take_error(char *msg, size_t msglen)
{
    if (!__atomic_load_n(&failed_unsaid, __ATOMIC_ACQUIRE) ||
        !__atomic_exchange_n(&failed_unsaid, 0, __ATOMIC_ACQ_REL))
        return 0;
    return byval_fail(1, msg, msglen, "%s", failed);
}

/* At exit the socket goes with its process; only that one removes it,
 * and only the file it made. */
__attribute__((destructor)) static void rendezvous_exit(void)
{
    struct stat st;
    if (mine.owner != getpid() || rdv.dirfd < 0)
        return;
    if (fstatat(rdv.dirfd, mine.name, &st, AT_SYMLINK_NOFOLLOW) == 0 && st.st_ino == mine.ino)
        unlinkat(rdv.dirfd, mine.name, 0);
}

static uint64_t served;

void byval_rendezvous_served(void)
{
    __atomic_fetch_add(&served, 1, __ATOMIC_RELAXED);
}

uint64_t byval_rendezvous_served_count(void)
{
    return __atomic_load_n(&served, __ATOMIC_RELAXED);
}
