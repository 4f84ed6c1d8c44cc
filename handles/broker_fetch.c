/* SPDX-License-Identifier: MIT */
/*
 * broker_fetch.c - the socket fallback, importer side: the request (see
 * broker.h; reading the answer is broker_answer.c).
 *
 * Bounded: one 2 s deadline covers connect (which blocks only on a full
 * backlog) and the answer; nothing else blocks.
 *
 * Who answers: any process in the network namespace may bind an abstract
 * name, and the exporter binds its name only at its first export, so the
 * name can be taken first. The kernel records who called listen(): before
 * the request leaves, the listener must be the exporter. pidfs records are
 * checked exactly (SO_PEERPIDFD's inode); start-time records through
 * SO_PEERCRED's pid where /proc shows it. A listener we cannot see (start
 * time, sibling pid namespace, or a kernel without SO_PEERPIDFD) is
 * accepted: the fd-kind check on what comes back still applies.
 */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "handles/broker_internal.h"
#include "handles/rendezvous.h"

static byval_status_t impostor(const byval_record_t *rec, const char *name, const char *what,
                               unsigned long long got, char *msg, size_t msglen)
{
    byval_msg(msg, msglen,
              "the socket %s of exporter pid %u is held by another process (%s %llu, the "
              "exporter's is %llu): nothing asked of it",
              name, rec->pid, what, got, (unsigned long long)rec->identity);
    return BYVAL_E_IDENTITY;
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
    if ((rec->flags & BYVAL_FLAG_ID_PIDFS) && pidfd >= 0 && byval_pidfd_is_pidfs(pidfd) &&
        fstat(pidfd, &st) == 0) {
        if ((uint64_t)st.st_ino != rec->identity) {
            close(pidfd);
            return impostor(rec, name, "pidfs inode", (unsigned long long)st.st_ino, msg, msglen);
        }
        *pidfd_p = pidfd;
        return BYVAL_OK;
    }
    if (pidfd >= 0)
        close(pidfd); /* not a proof of anything: do not hand it out */
    if (strict) {     /* the directory: nothing else holds across namespaces */
        byval_msg(msg, msglen,
                  "the listener on exporter pid %u's socket in the rendezvous directory could "
                  "not be proven to be it (%s): nothing asked of it",
                  rec->pid,
                  pidfd < 0 ? "the kernel gave no SO_PEERPIDFD (Linux 6.5+)"
                            : "no pidfs identity to compare");
        return BYVAL_E_IDENTITY;
    }
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

/* Connect s to rec's exporter at `at` by deadline: 0, or -1 with *err_p
 * (ECONNREFUSED/ENOENT: nobody listens there) or a status in *st_p with
 * one line in msg (the directory's own refusals). name: as shown. */
static int connect_at(int s, const byval_record_t *rec, byval_broker_at_t at, int64_t deadline,
                      char *name, size_t namelen, int *err_p, byval_status_t *st_p, char *msg,
                      size_t msglen)
{
    struct sockaddr_un a;
    *err_p = 0;
    byval_broker_until(s, SO_SNDTIMEO, deadline);
    if (at == BYVAL_BROKER_DIR) {
        char file[64];
        byval_rendezvous_name(file, sizeof(file), rec->boot, rec->identity);
        snprintf(name, namelen, "%s/%s", byval_rendezvous_dir(), file);
        *st_p = byval_rendezvous_connect(s, rec, deadline, msg, msglen);
        return *st_p == BYVAL_OK ? 0 : -1;
    }
    socklen_t alen = byval_broker_addr(&a, rec->boot, rec->pidns, rec->pid, rec->identity);
    snprintf(name, namelen, "@%s", a.sun_path + 1);
    int rc, err = 0;
    /* An interrupted connect on a Unix socket leaves it unconnected (the
     * wait was for room in the backlog): try again until the deadline. */
    while ((rc = connect(s, (struct sockaddr *)&a, alen)) != 0 && (err = errno) == EINTR &&
           byval_broker_now_ms() < deadline)
        byval_broker_until(s, SO_SNDTIMEO, deadline);
    if (rc != 0 && err == EISCONN)
        rc = 0;
    if (rc == 0)
        return 0;
    *err_p = err;
    *st_p = err == ECONNREFUSED || err == ENOENT ? BYVAL_E_GONE : BYVAL_E_SYS;
    if (*st_p == BYVAL_E_GONE)
        byval_msg(msg, msglen,
                  "exporter pid %u serves no fds over the socket fallback (is it running "
                  "ipcbyval with IPCBYVAL_TRANSPORT=auto|socket, in our network namespace? "
                  "Across network namespaces set IPCBYVAL_RENDEZVOUS_DIR on both sides)",
                  rec->pid);
    else
        byval_msg(msg, msglen, "connect to %s (exporter pid %u) failed: %s%s", name, rec->pid,
                  strerror(err), err == EAGAIN ? " (its backlog stayed full for 2 s)" : "");
    return -1;
}

/* One connection: connect, check the listener, ask, receive. *busy_p: the
 * exporter said to retry (it holds as many connections as it serves). */
static byval_status_t attempt(const byval_record_t *rec, byval_broker_at_t at, uint32_t magic,
                              uint32_t fd, uint32_t fd_ino, uint64_t tag, int64_t deadline,
                              int *got_p, int *pidfd_p, int *busy_p, char *msg, size_t msglen)
{
    int pidfd = -1, got = -1, err;
    byval_status_t st;
    *busy_p = 0;
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) {
        err = errno;
        byval_msg(msg, msglen, "socket() for the fallback failed: %s", strerror(err));
        return err == EMFILE || err == ENFILE ? BYVAL_E_NOFD : BYVAL_E_SYS;
    }
    char name[300]; /* as shown: "@abstract", or the rendezvous path */
    if (connect_at(s, rec, at, deadline, name, sizeof(name), &err, &st, msg, msglen) != 0)
        goto err_sock;
    st = check_listener(s, rec, name, at == BYVAL_BROKER_DIR, &pidfd, msg, msglen);
    if (st != BYVAL_OK)
        goto err_sock;
    struct broker_req req = {magic, fd, fd_ino, tag};
    size_t sent = 0;
    int send_err = 0;
    while (sent < sizeof(req)) {
        ssize_t w = send(s, (char *)&req + sent, sizeof(req) - sent, MSG_NOSIGNAL);
        if (w > 0) {
            sent += (size_t)w;
            continue;
        }
        send_err = w < 0 ? errno : EPIPE;
        if (w < 0 && send_err == EINTR && byval_broker_now_ms() < deadline) {
            byval_broker_until(s, SO_SNDTIMEO, deadline);
            continue;
        }
        break;
    }
    /* Even when the send failed, read: an exporter that refuses our uid
     * (or tells us to retry) answers before reading and may have closed
     * already (EPIPE), and its answer still waits in our queue. */
    st = byval_broker_receive(s, deadline, rec, fd, fd_ino, &got, busy_p, msg, msglen);
    if (sent != sizeof(req) && (st == BYVAL_OK || (st == BYVAL_E_SYS && !*busy_p))) {
        byval_msg(msg, msglen, "send to %s (exporter pid %u) failed: %s", name, rec->pid,
                  send_err ? strerror(send_err) : "short write");
        st = BYVAL_E_SYS;
    }
    if (st != BYVAL_OK)
        goto err_got;
    /* From the cached attributes: a hostile exporter may send a file whose
     * file system never answers (fdcheck.c). A rescue has no claim to check:
     * it gets what the named process holds at that number, as pidfd_getfd. */
    struct statx sst;
    if (magic == BROKER_MAGIC &&
        (statx(got, "", AT_EMPTY_PATH | AT_STATX_DONT_SYNC, STATX_INO, &sst) != 0 ||
         (uint32_t)sst.stx_ino != fd_ino)) {
        byval_msg(msg, msglen,
                  "fd %u from exporter pid %u over the socket is another object than the handle "
                  "describes (inode low bits != %u), not used",
                  fd, rec->pid, fd_ino);
        st = BYVAL_E_FDKIND;
        goto err_got;
    }
    *got_p = got;
    *pidfd_p = pidfd;
    close(s);
    return BYVAL_OK;

err_got:
    if (got >= 0)
        byval_fd_release(got);
    if (pidfd >= 0)
        close(pidfd);
err_sock:
    close(s);
    return st;
}

static byval_status_t fetch(const byval_record_t *rec, byval_broker_at_t at, uint32_t magic,
                            uint32_t fd, uint32_t fd_ino, uint64_t tag, int *fd_p, int *pidfd_p,
                            char *msg, size_t msglen)
{
    int pidfd = -1, busy;
    *fd_p = -1;
    if (pidfd_p)
        *pidfd_p = -1;
    if (msg && msglen)
        msg[0] = '\0';
    int64_t deadline = byval_broker_now_ms() + BROKER_FETCH_MS;
    byval_status_t st;
    /* Told to retry: the exporter holds its bound of pending connections
     * from us (other threads of ours, or our own stalled ones) or its table
     * is full. Back off 1, 2, 4 ... 32 ms, within the deadline. */
    for (int wait_ms = 1;; wait_ms = wait_ms < 32 ? 2 * wait_ms : 32) {
        st = attempt(rec, at, magic, fd, fd_ino, tag, deadline, fd_p, &pidfd, &busy, msg, msglen);
        int64_t left = deadline - byval_broker_now_ms();
        if (!busy || left <= 0)
            break;
        poll(NULL, 0, (int)(left < wait_ms ? left : wait_ms)); /* a signal only shortens it */
    }
    if (st != BYVAL_OK)
        return st;
    if (pidfd_p)
        *pidfd_p = pidfd;
    else if (pidfd >= 0)
        close(pidfd);
    return BYVAL_OK;
}

byval_status_t byval_broker_fetch_pidfd(const byval_record_t *rec, uint32_t fd, uint32_t fd_ino,
                                        int *fd_p, int *pidfd_p, char *msg, size_t msglen)
{
    return fetch(rec, BYVAL_BROKER_ABSTRACT, BROKER_MAGIC, fd, fd_ino, fd == rec->fd ? rec->tag : 0,
                 fd_p, pidfd_p, msg, msglen);
}

byval_status_t byval_broker_fetch_at(const byval_record_t *rec, byval_broker_at_t at, uint32_t fd,
                                     uint32_t fd_ino, uint64_t tag, int *fd_p, int *pidfd_p,
                                     char *msg, size_t msglen)
{
    return fetch(rec, at, BROKER_MAGIC, fd, fd_ino, tag, fd_p, pidfd_p, msg, msglen);
}

byval_status_t byval_broker_fetch(const byval_record_t *rec, uint32_t fd, uint32_t fd_ino,
                                  int *fd_p, char *msg, size_t msglen)
{
    return fetch(rec, BYVAL_BROKER_ABSTRACT, BROKER_MAGIC, fd, fd_ino, fd == rec->fd ? rec->tag : 0,
                 fd_p, NULL, msg, msglen);
}

byval_status_t byval_broker_rescue(const byval_record_t *rec, uint32_t fd, int *fd_p, char *msg,
                                   size_t msglen)
{
    /* Not a step of the pipeline (resolve.h): the process named has no
     * record, so both of its sockets are asked here, the directory's when
     * nobody answers at the abstract name (another network namespace). */
    byval_status_t st =
        fetch(rec, BYVAL_BROKER_ABSTRACT, BROKER_MAGIC_RESCUE, fd, 0, 0, fd_p, NULL, msg, msglen);
    /* A squatter at the abstract name switches the directory off no more
     * than an absent exporter does (resolve_socket.c). */
    if ((st == BYVAL_E_GONE || st == BYVAL_E_IDENTITY) && byval_rendezvous_enabled()) {
        char first[512] = "";
        if (st == BYVAL_E_IDENTITY && msg)
            snprintf(first, sizeof(first), "%s", msg);
        st = fetch(rec, BYVAL_BROKER_DIR, BROKER_MAGIC_RESCUE, fd, 0, 0, fd_p, NULL, msg, msglen);
        if (st != BYVAL_OK && first[0])
            byval_msg_prefix(msg, msglen, first);
    }
    return st;
}
