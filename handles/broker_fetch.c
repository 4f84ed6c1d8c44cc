/* SPDX-License-Identifier: MIT */
/*
 * broker_fetch.c - the socket fallback, importer side (broker.h): the
 * routes, the request, the answer, and the pidfd_getfd rescue.
 *
 * Bounded: one 2 s deadline covers connect (which blocks only on a full
 * backlog) and the answer; a signal neither ends the wait early nor loses
 * part of an answer; every fd an answer carries beyond the one asked for
 * is closed here.
 *
 * Who answers: any process in the network namespace may bind an abstract
 * name first, so before the request leaves the listener must be the
 * exporter: pidfs records exactly (SO_PEERPIDFD's inode), start-time
 * records through SO_PEERCRED's pid where /proc shows it. A listener we
 * cannot see is accepted on the abstract route (the fd-kind check on
 * what comes back still applies), never in the directory.
 */

#include <errno.h>
#include <fcntl.h>
#include <poll.h>

#include "handles/broker_internal.h"
#include "handles/fdcheck.h"
#include "handles/rendezvous.h"
#include "handles/rescue.h"
#include "handles/transport.h"

/* The status for an answer the exporter gave (rsp.status != 0). */
static byval_status_t refused(const byval_record_t *rec, uint32_t fd, uint32_t fd_ino,
                              int32_t status, char *msg, size_t msglen)
{
    switch (status) {
    case -EAGAIN:
        return byval_fail(
            BYVAL_E_SYS, msg, msglen,
            "exporter pid %u kept telling us to retry for %d ms: it holds as many pending socket "
            "connections from this process (8) or from all peers (64) as it serves at once",
            rec->pid, BROKER_FETCH_MS);
    case -EPERM:
        return byval_fail(BYVAL_E_PERM, msg, msglen,
                          "exporter pid %u refused the socket fallback: it serves one uid (its own "
                          "unless set), and ours is %u (SO_PEERCRED)",
                          rec->pid, (unsigned)geteuid());
    case -EACCES:
        return byval_fail(
            BYVAL_E_PERM, msg, msglen,
            "exporter pid %u refused fd %u to our uid %u: a peer of another uid than the "
            "exporter's (its rendezvous directory's group) must show the tag the handle carries, "
            "and this one was missing or wrong (a handle not made by the exporter, or altered)",
            rec->pid, fd, (unsigned)geteuid());
    case -EBADF:
        return byval_fail(BYVAL_E_BADFD, msg, msglen,
                          "exporter pid %u does not serve fd %u over the socket fallback (not "
                          "exported, or withdrawn and closed)",
                          rec->pid, fd);
    case -ESTALE:
        if (fd_ino == 0) { /* a rescue: the registry's proof failed */
            return byval_fail(BYVAL_E_FDKIND, msg, msglen,
                              "exporter pid %u no longer holds the open file it exported as fd %u "
                              "(closed, or the number reused since)",
                              rec->pid, fd);
        }
        return byval_fail(BYVAL_E_FDKIND, msg, msglen,
                          "exporter pid %u serves fd %u, but it holds another object than the "
                          "handle describes (inode low bits != %u): a stale or forged handle",
                          rec->pid, fd, fd_ino);
    default:
        return byval_fail(
            BYVAL_E_SYS, msg, msglen, "exporter pid %u could not serve fd %u over the socket: %s%s",
            rec->pid, fd, strerror(status < 0 ? -status : EPROTO),
            status == -EMFILE || status == -ENFILE ? " (the exporter is out of fds)" : "");
    }
}

/* Room for more fds than the one answer we expect: whatever a peer
 * attaches is received (up to this many) and closed here, not left open
 * in the application; what does not fit the kernel discards and flags
 * with MSG_CTRUNC. */
#define BROKER_RECV_FDS 16

/* Every fd of SCM_RIGHTS messages in mh into fds (at most max), in order;
 * returns how many. Anything else in the control data is ignored. */
static int take_fds(struct msghdr *mh, int *fds, int max)
{
    int n = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS || c->cmsg_len < CMSG_LEN(0))
            continue;
        size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
            if (n < max)
                fds[n++] = fd;
            else
                byval_fd_release(fd); /* cannot happen with our buffer; never leak */
        }
    }
    return n;
}

/* Receive the answer; *got_p is the attached fd (or -1). An answer with
 * any other number of fds than its status allows (one with status 0, none
 * otherwise) is refused, and every fd it carried is closed. */
static byval_status_t receive(int s, int64_t deadline, const byval_record_t *rec, uint32_t fd,
                              uint32_t fd_ino, int *got_p, int *busy_p, char *msg, size_t msglen)
{
    struct broker_rsp rsp = {0, 0};
    union {
        char buf[CMSG_SPACE(sizeof(int) * BROKER_RECV_FDS)];
        struct cmsghdr align;
    } cbuf;
    int fds[BROKER_RECV_FDS], nfds = 0, ctrunc = 0, err = 0;
    size_t have = 0;
    ssize_t n = 0;
    *got_p = -1;
    /* A signal ends a wait on a socket with a timeout with EINTR even
     * under SA_RESTART (socket(7)): wait again until the deadline. A
     * signal after part of the answer makes recvmsg return that part:
     * collect the rest (and any fds) by further calls. */
    while (have < sizeof(rsp)) {
        byval_broker_until(s, SO_RCVTIMEO, deadline);
        struct iovec iov = {.iov_base = (char *)&rsp + have, .iov_len = sizeof(rsp) - have};
        struct msghdr mh = {.msg_iov = &iov,
                            .msg_iovlen = 1,
                            .msg_control = cbuf.buf,
                            .msg_controllen = sizeof(cbuf.buf)};
        n = recvmsg(s, &mh, MSG_CMSG_CLOEXEC | MSG_WAITALL);
        err = errno;
        if (n > 0) {
            nfds += take_fds(&mh, fds + nfds, BROKER_RECV_FDS - nfds);
            ctrunc |= (mh.msg_flags & MSG_CTRUNC) != 0;
            have += (size_t)n;
            continue;
        }
        if (n < 0 && err == EINTR && byval_broker_now_ms() < deadline)
            continue;
        if (n < 0 && err == EINTR)
            err = EAGAIN; /* the deadline passed while we were interrupted */
        break;
    }
    byval_status_t st = BYVAL_OK;
    if (have < sizeof(rsp) && (n < 0 || have == 0))
        /* (Also what a just-forked child of the exporter causes: it held
         * the listening socket for a moment, then closed it.) */
        st = n < 0 && (err == EAGAIN || err == EWOULDBLOCK)
            ? byval_fail(BYVAL_E_SYS, msg, msglen,
                         "exporter pid %u gave no answer over the socket within %d ms", rec->pid,
                         BROKER_FETCH_MS)
            : byval_fail(BYVAL_E_SYS, msg, msglen,
                         "exporter pid %u closed the connection without an answer (%s): it exited "
                         "or stopped serving meanwhile",
                         rec->pid, n < 0 ? strerror(err) : "end of file");
    else if (have != sizeof(rsp) || rsp.magic != BROKER_MAGIC) /* maybe short, then end of file */
        st = byval_fail(BYVAL_E_SYS, msg, msglen,
                        "exporter pid %u answered in another protocol over the socket (another "
                        "ipcbyval version?)",
                        rec->pid);
    else if (nfds > (rsp.status == 0) || (ctrunc && nfds > 0))
        st = byval_fail(
            BYVAL_E_SYS, msg, msglen,
            "exporter pid %u answered with %d%s fds attached, not %d: all closed, answer refused",
            rec->pid, nfds, ctrunc ? " or more" : "", rsp.status == 0);
    else if (rsp.status != 0) {
        *busy_p = rsp.status == -EAGAIN;
        st = refused(rec, fd, fd_ino, rsp.status, msg, msglen);
    } else if (nfds == 0 && ctrunc) /* attached, but the kernel could not install it */
        st = byval_fail(BYVAL_E_NOFD, msg, msglen,
                        "fd %u from exporter pid %u was dropped on receipt: this process is out of "
                        "file descriptors",
                        fd, rec->pid);
    else if (nfds == 0)
        st = byval_fail(BYVAL_E_SYS, msg, msglen, "exporter pid %u answered without the fd",
                        rec->pid);
    for (int i = 0; st != BYVAL_OK && i < nfds; i++)
        byval_fd_release(fds[i]); /* what we do not keep: closed without waiting on it */
    if (st == BYVAL_OK)
        *got_p = fds[0];
    return st;
}

static byval_status_t impostor(const byval_record_t *rec, const char *name, const char *what,
                               unsigned long long got, char *msg, size_t msglen)
{
    return byval_fail(BYVAL_E_IDENTITY, msg, msglen,
                      "the socket %s of exporter pid %u is held by another process (%s %llu, the "
                      "exporter's is %llu): nothing asked of it",
                      name, rec->pid, what, got, (unsigned long long)rec->identity);
}

/* Is the listener on s the exporter rec describes? On BYVAL_OK, *pidfd_p
 * is its pidfd when that proved it, else -1. */
static byval_status_t check_listener(int s, const byval_record_t *rec, const char *name, int strict,
                                     int *pidfd_p, char *msg, size_t msglen)
{
    int pidfd = -1;
    socklen_t len = sizeof(pidfd);
    struct stat st;
    *pidfd_p = -1;
    if (SO_PEERPIDFD < 0 || getsockopt(s, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &len) != 0)
        pidfd = -1;
    int proven = (rec->flags & BYVAL_FLAG_ID_PIDFS) && pidfd >= 0 && byval_pidfd_is_pidfs(pidfd) &&
        fstat(pidfd, &st) == 0;
    if (proven && (uint64_t)st.st_ino == rec->identity) {
        *pidfd_p = pidfd;
        return BYVAL_OK;
    }
    if (pidfd >= 0)
        close(pidfd); /* not a proof of anything: do not hand it out */
    if (proven)
        return impostor(rec, name, "pidfs inode", (unsigned long long)st.st_ino, msg, msglen);
    /* The directory: nothing else holds across namespaces. */
    if (strict)
        return byval_fail(BYVAL_E_IDENTITY, msg, msglen,
                          "the listener on exporter pid %u's socket in the rendezvous directory "
                          "could not be proven to be it (%s): nothing asked of it",
                          rec->pid,
                          pidfd < 0 ? "the kernel gave no SO_PEERPIDFD (Linux 6.5+)"
                                    : "no pidfs identity to compare");
    struct ucred cred;
    byval_self_t self;
    len = sizeof(cred);
    if (getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || cred.pid <= 0 ||
        byval_self_get(&self) != 0)
        return BYVAL_OK; /* not visible from here: unverifiable, see the top */
    if (rec->pidns == self.pidns && (uint32_t)cred.pid != rec->pid)
        return impostor(rec, name, "pid", (unsigned long long)cred.pid, msg, msglen);
    uint64_t start;
    if (!(rec->flags & BYVAL_FLAG_ID_PIDFS) && byval_proc_start_time(cred.pid, &start) == 0 &&
        start != rec->identity)
        return impostor(rec, name, "start time", (unsigned long long)start, msg, msglen);
    return BYVAL_OK;
}

/* A socket route to an exporter's broker: how to connect s to it by
 * deadline (name: as shown), and whether only a pidfs proof of the
 * listener holds there (nothing else does across namespaces). */
typedef struct route {
    int via, strict; /* via: byval_via_t */
    int (*usable)(void);
    byval_status_t (*connect)(int s, const byval_record_t *rec, int64_t deadline, char *name,
                              size_t namelen, char *msg, size_t msglen);
} route_t;

/* Its abstract name, in our network namespace. */
static byval_status_t connect_abstract(int s, const byval_record_t *rec, int64_t deadline,
                                       char *name, size_t namelen, char *msg, size_t msglen)
{
    struct sockaddr_un a;
    socklen_t alen = byval_broker_addr(&a, rec->boot, rec->pidns, rec->pid, rec->identity);
    snprintf(name, namelen, "@%s", a.sun_path + 1);
    int rc, err = 0;
    byval_broker_until(s, SO_SNDTIMEO, deadline);
    /* An interrupted connect on a Unix socket leaves it unconnected (the
     * wait was for room in the backlog): try again until the deadline. */
    while ((rc = connect(s, (struct sockaddr *)&a, alen)) != 0 && (err = errno) == EINTR &&
           byval_broker_now_ms() < deadline)
        byval_broker_until(s, SO_SNDTIMEO, deadline);
    if (rc == 0 || err == EISCONN)
        return BYVAL_OK;
    if (err == ECONNREFUSED || err == ENOENT)
        return byval_fail(BYVAL_E_GONE, msg, msglen,
                          "exporter pid %u serves no fds over the socket fallback (is it running "
                          "ipcbyval with IPCBYVAL_TRANSPORT=auto|socket, in our network namespace? "
                          "Across network namespaces set IPCBYVAL_RENDEZVOUS_DIR on both sides)",
                          rec->pid);
    return byval_fail(BYVAL_E_SYS, msg, msglen, "connect to %s (exporter pid %u) failed: %s%s",
                      name, rec->pid, strerror(err),
                      err == EAGAIN ? " (its backlog stayed full for 2 s)" : "");
}

/* Its socket in the rendezvous directory. */
static byval_status_t connect_dir(int s, const byval_record_t *rec, int64_t deadline, char *name,
                                  size_t namelen, char *msg, size_t msglen)
{
    char file[64];
    byval_rendezvous_name(file, sizeof(file), rec->boot, rec->identity);
    snprintf(name, namelen, "%s/%s", byval_rendezvous_dir(), file);
    return byval_rendezvous_connect(s, rec, deadline, msg, msglen);
}

static const route_t routes[] = {
    {BYVAL_VIA_SOCKET, 0, NULL, connect_abstract}, /* first: never asked if usable */
    {BYVAL_VIA_RENDEZVOUS, 1, byval_rendezvous_enabled, connect_dir},
};

/* One connection: connect, check the listener, ask, receive. *busy_p: the
 * exporter said to retry (it holds as many connections as it serves). */
static byval_status_t attempt(const byval_record_t *rec, const route_t *r, uint32_t magic,
                              uint32_t fd, uint32_t fd_ino, uint64_t tag, int64_t deadline,
                              int *got_p, int *pidfd_p, int *busy_p, char *msg, size_t msglen)
{
    int pidfd = -1, got = -1, err;
    byval_status_t st;
    *busy_p = 0;
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) {
        err = errno;
        return byval_fail(err == EMFILE || err == ENFILE ? BYVAL_E_NOFD : BYVAL_E_SYS, msg, msglen,
                          "socket() for the fallback failed: %s", strerror(err));
    }
    char name[300]; /* as shown: "@abstract", or the rendezvous path */
    st = r->connect(s, rec, deadline, name, sizeof(name), msg, msglen);
    if (st == BYVAL_OK)
        st = check_listener(s, rec, name, r->strict, &pidfd, msg, msglen);
    if (st != BYVAL_OK)
        goto err_sock;
    struct broker_req req = {magic, fd, fd_ino, tag};
    size_t sent = 0;
    int send_err = 0;
    while (sent < sizeof(req)) {
        ssize_t w = send(s, (char *)&req + sent, sizeof(req) - sent, MSG_NOSIGNAL);
        send_err = w < 0 ? errno : w == 0 ? EPIPE : 0;
        if (send_err && (send_err != EINTR || byval_broker_now_ms() >= deadline))
            break;
        if (send_err)
            byval_broker_until(s, SO_SNDTIMEO, deadline);
        else
            sent += (size_t)w;
    }
    /* Even when the send failed, read: an exporter that refuses our uid
     * (or tells us to retry) answers before reading and may have closed
     * already (EPIPE), and its answer still waits in our queue. */
    st = receive(s, deadline, rec, fd, fd_ino, &got, busy_p, msg, msglen);
    if (sent != sizeof(req) && (st == BYVAL_OK || (st == BYVAL_E_SYS && !*busy_p)))
        st = byval_fail(BYVAL_E_SYS, msg, msglen, "send to %s (exporter pid %u) failed: %s", name,
                        rec->pid, send_err ? strerror(send_err) : "short write");
    if (st != BYVAL_OK)
        goto err_got;
    /* From the cached attributes: a hostile exporter may send a file whose
     * file system never answers (fdcheck.c). A rescue has no claim to check:
     * it gets what the named process holds at that number, as pidfd_getfd. */
    struct statx sst;
    if (magic == BROKER_MAGIC &&
        (statx(got, "", AT_EMPTY_PATH | AT_STATX_DONT_SYNC, STATX_INO, &sst) != 0 ||
         (uint32_t)sst.stx_ino != fd_ino)) {
        st = byval_fail(BYVAL_E_FDKIND, msg, msglen,
                        "fd %u from exporter pid %u over the socket is another object than the "
                        "handle describes (inode low bits != %u), not used",
                        fd, rec->pid, fd_ino);
        goto err_got;
    }
    *got_p = got;
    *pidfd_p = pidfd;
    close(s);
    return BYVAL_OK;

err_got:
    if (got >= 0)
        byval_fd_release(got);
    byval_close_fd(&pidfd);
err_sock:
    close(s);
    return st;
}

static byval_status_t fetch(const byval_record_t *rec, const route_t *r, uint32_t magic,
                            uint32_t fd, uint32_t fd_ino, uint64_t tag, int *fd_p, int *pidfd_p,
                            char *msg, size_t msglen)
{
    int pidfd = -1, busy;
    *fd_p = -1;
    byval_msg(msg, msglen, "%s", ""); /* no failure yet */
    int64_t deadline = byval_broker_now_ms() + BROKER_FETCH_MS;
    byval_status_t st;
    /* Told to retry: the exporter holds its bound of pending connections
     * from us (other threads of ours, or our own stalled ones) or its table
     * is full. Back off 1, 2, 4 ... 32 ms, within the deadline. */
    for (int wait_ms = 1;; wait_ms = wait_ms < 32 ? 2 * wait_ms : 32) {
        st = attempt(rec, r, magic, fd, fd_ino, tag, deadline, fd_p, &pidfd, &busy, msg, msglen);
        int64_t left = deadline - byval_broker_now_ms();
        if (!busy || left <= 0)
            break;
        poll(NULL, 0, (int)(left < wait_ms ? left : wait_ms)); /* a signal only shortens it */
    }
    if (pidfd_p) /* -1 on failure */
        *pidfd_p = pidfd;
    else
        byval_close_fd(&pidfd);
    return st;
}

/* Every route in turn: a squatter at the abstract name (any process of
 * any uid in our network namespace can bind it first) switches the
 * directory off no more than an absent exporter does. */
static byval_status_t fetch_routes(const byval_record_t *rec, uint32_t magic, uint32_t fd,
                                   uint32_t fd_ino, uint64_t tag, int *fd_p, int *pidfd_p,
                                   int *via_p, char *msg, size_t msglen)
{
    char first[512] = "";
    byval_status_t st = BYVAL_E_GONE;
    for (const route_t *r = routes; r < routes + sizeof(routes) / sizeof(routes[0]); r++) {
        if (r != routes && ((st != BYVAL_E_GONE && st != BYVAL_E_IDENTITY) || !r->usable()))
            break;
        if (st == BYVAL_E_IDENTITY && msg)
            snprintf(first, sizeof(first), "%s", msg);
        if (via_p)
            *via_p = r->via;
        st = fetch(rec, r, magic, fd, fd_ino, tag, fd_p, pidfd_p, msg, msglen);
    }
    if (st != BYVAL_OK && first[0]) { /* msg is set: first was copied from it */
        char both[1024];
        snprintf(both, sizeof(both), "%s; then the rendezvous directory: %s", first, msg);
        byval_msg(msg, msglen, "%s", both);
    }
    return st;
}

byval_status_t byval_broker_fetch_routes(const byval_record_t *rec, uint32_t fd, uint32_t fd_ino,
                                         uint64_t tag, int *fd_p, int *pidfd_p, int *via_p,
                                         char *msg, size_t msglen)
{
    return fetch_routes(rec, BROKER_MAGIC, fd, fd_ino, tag, fd_p, pidfd_p, via_p, msg, msglen);
}

byval_status_t byval_broker_registry(const byval_record_t *rec, int *mfd_p, char *msg,
                                     size_t msglen)
{
    struct stat st;
    byval_status_t s =
        fetch_routes(rec, BROKER_MAGIC_REGISTRY, 0, 0, 0, mfd_p, NULL, NULL, msg, msglen);
    if (s == BYVAL_OK)
        s = fstat(*mfd_p, &st) != 0 ? BYVAL_E_SYS
                                    : byval_check_fd_kind(*mfd_p, rec->pid, 0, (uint32_t)st.st_ino,
                                                          0, BYVAL_OBJ_REGISTRY, NULL, msg, msglen);
    if (s != BYVAL_OK && *mfd_p >= 0) {
        byval_fd_release(*mfd_p);
        *mfd_p = -1;
    }
    return s;
}

int byval_broker_dir_pidfd(const byval_record_t *rec, int64_t deadline)
{
    char name[300];
    int pidfd = -1, s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        return -1;
    if (connect_dir(s, rec, deadline, name, sizeof(name), NULL, 0) != BYVAL_OK ||
        check_listener(s, rec, name, 1, &pidfd, NULL, 0) != BYVAL_OK)
        pidfd = -1;
    close(s); /* the broker sees a connection closed before any request */
    return pidfd;
}

byval_status_t byval_rescue_getfd(int pidfd, int fd, int *fd_p, uint32_t *pid_p, char *msg,
                                  size_t msglen)
{
    byval_self_t self;
    byval_record_t rec;
    *fd_p = -1;
    *pid_p = 0;
    if (fd < 0)
        return byval_fail(BYVAL_E_BADFD, msg, msglen, "fd %d is no fd number", fd);
    int pid = byval_pidfd_pid(pidfd);
    if (pid == -2)
        return byval_fail(BYVAL_E_SYS, msg, msglen, "fd %d is not a pidfd", pidfd);
    if (pid == -1)
        return byval_fail(BYVAL_E_GONE, msg, msglen, "the process of pidfd %d exited", pidfd);
    if (pid == 0)
        return byval_fail(BYVAL_E_GONE, msg, msglen,
                          "the process of pidfd %d is outside our pid namespace: its broker is not "
                          "reachable by name from here",
                          pidfd);
    *pid_p = (uint32_t)pid;
    if (byval_self_get(&self) != 0)
        return byval_fail(BYVAL_E_SYS, msg, msglen, "cannot read this process's own identity");
    if (byval_pidfd_record(pidfd, (uint32_t)pid, &self, &rec) != 0)
        return byval_fail(BYVAL_E_GONE, msg, msglen, "pid %d exited while we read its start time",
                          pid);
    /* What it registered as exported under that number (rescue.h). */
    return fetch_routes(&rec, BROKER_MAGIC_RESCUE, (uint32_t)fd, 0, 0, fd_p, NULL, NULL, msg,
                        msglen);
}
