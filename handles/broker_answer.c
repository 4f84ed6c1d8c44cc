/* SPDX-License-Identifier: MIT */
/*
 * broker_answer.c - the socket fallback, importer side: reading the
 * exporter's answer (see broker.h; the request side is broker_fetch.c).
 *
 * Bounded by the fetch's deadline; a signal neither ends the wait early
 * nor loses part of an answer; every fd an answer carries beyond the one
 * asked for is closed here, never left open in the application.
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "handles/broker_internal.h"

/* The status for an answer the exporter gave (rsp.status != 0). */
static byval_status_t refused(const byval_record_t *rec, uint32_t fd, uint32_t fd_ino,
                              int32_t status, char *msg, size_t msglen)
{
    switch (status) {
    case -EAGAIN:
        byval_msg(msg, msglen,
                  "exporter pid %u kept telling us to retry for %d ms: it holds as many pending "
                  "socket connections from this process (8) or from all peers (64) as it "
                  "serves at once",
                  rec->pid, BROKER_FETCH_MS);
        return BYVAL_E_SYS;
    case -EPERM:
        byval_msg(msg, msglen,
                  "exporter pid %u refused the socket fallback: it serves one uid (its own "
                  "unless set), and ours is %u (SO_PEERCRED)",
                  rec->pid, (unsigned)geteuid());
        return BYVAL_E_PERM;
    case -EACCES:
        byval_msg(msg, msglen,
                  "exporter pid %u refused fd %u to our uid %u: a peer of another uid than the "
                  "exporter's (its rendezvous directory's group) must show the tag the handle "
                  "carries, and this one was missing or wrong (a handle not made by the exporter, "
                  "or altered)",
                  rec->pid, fd, (unsigned)geteuid());
        return BYVAL_E_PERM;
    case -EBADF:
        byval_msg(msg, msglen,
                  "exporter pid %u does not serve fd %u over the socket fallback (not exported, "
                  "or withdrawn and closed)",
                  rec->pid, fd);
        return BYVAL_E_BADFD;
    case -ESTALE:
        if (fd_ino == 0) { /* a rescue: the registry's proof failed */
            byval_msg(msg, msglen,
                      "exporter pid %u no longer holds the open file it exported as fd %u "
                      "(closed, or the number reused since)",
                      rec->pid, fd);
            return BYVAL_E_FDKIND;
        }
        byval_msg(msg, msglen,
                  "exporter pid %u serves fd %u, but it holds another object than the handle "
                  "describes (inode low bits != %u): a stale or forged handle",
                  rec->pid, fd, fd_ino);
        return BYVAL_E_FDKIND;
    default:
        byval_msg(msg, msglen, "exporter pid %u could not serve fd %u over the socket: %s%s",
                  rec->pid, fd, strerror(status < 0 ? -status : EPROTO),
                  status == -EMFILE || status == -ENFILE ? " (the exporter is out of fds)" : "");
        return BYVAL_E_SYS;
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

/* What a peer sent and we do not keep: closed without waiting on it. */
static void close_fds(const int *fds, int n)
{
    for (int i = 0; i < n; i++)
        byval_fd_release(fds[i]);
}

/* Receive the answer; *got_p is the attached fd (or -1). An answer with
 * any other number of fds than its status allows (one with status 0, none
 * otherwise) is refused, and every fd it carried is closed. */
byval_status_t byval_broker_receive(int s, int64_t deadline, const byval_record_t *rec, uint32_t fd,
                                    uint32_t fd_ino, int *got_p, int *busy_p, char *msg,
                                    size_t msglen)
{
    struct broker_rsp rsp = {0, 0};
    union {
        char buf[CMSG_SPACE(sizeof(int) * BROKER_RECV_FDS)];
        struct cmsghdr align;
    } cbuf;
    int fds[BROKER_RECV_FDS];
    int nfds = 0, ctrunc = 0, err = 0;
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
    if (have > 0 && have < sizeof(rsp) && n == 0)
        n = (ssize_t)have; /* a short answer, then end of file */
    else if (have == sizeof(rsp))
        n = (ssize_t)have;
    if (n < 0)
        close_fds(fds, nfds); /* a part of an answer, then nothing */
    if (n < 0 && (err == EAGAIN || err == EWOULDBLOCK)) {
        byval_msg(msg, msglen, "exporter pid %u gave no answer over the socket within %d ms",
                  rec->pid, BROKER_FETCH_MS);
        return BYVAL_E_SYS;
    }
    if (n <= 0) {
        /* Also what a just-forked child of the exporter causes: it held
         * the listening socket for a moment, then closed it (broker_serve.c). */
        byval_msg(msg, msglen,
                  "exporter pid %u closed the connection without an answer (%s): it exited or "
                  "stopped serving meanwhile",
                  rec->pid, n < 0 ? strerror(err) : "end of file");
        return BYVAL_E_SYS;
    }
    if (n != (ssize_t)sizeof(rsp) || rsp.magic != BROKER_MAGIC) {
        close_fds(fds, nfds);
        byval_msg(msg, msglen,
                  "exporter pid %u answered in another protocol over the socket (another "
                  "ipcbyval version?)",
                  rec->pid);
        return BYVAL_E_SYS;
    }
    if (nfds > (rsp.status == 0) || (ctrunc && nfds > 0)) {
        close_fds(fds, nfds);
        byval_msg(msg, msglen,
                  "exporter pid %u answered with %d%s fds attached, not %d: all closed, "
                  "answer refused",
                  rec->pid, nfds, ctrunc ? " or more" : "", rsp.status == 0);
        return BYVAL_E_SYS;
    }
    *busy_p = rsp.status == -EAGAIN;
    if (rsp.status != 0)
        return refused(rec, fd, fd_ino, rsp.status, msg, msglen);
    if (nfds == 0 && ctrunc) {
        /* Nothing installed, yet something was attached: the kernel could
         * not give us a descriptor (EMFILE/ENFILE on receipt). */
        byval_msg(msg, msglen,
                  "fd %u from exporter pid %u was dropped on receipt: this process is out of "
                  "file descriptors",
                  fd, rec->pid);
        return BYVAL_E_NOFD;
    }
    if (nfds == 0) {
        byval_msg(msg, msglen, "exporter pid %u answered without the fd", rec->pid);
        return BYVAL_E_SYS;
    }
    *got_p = fds[0];
    return BYVAL_OK;
}
