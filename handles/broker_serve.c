/* SPDX-License-Identifier: MIT */
/*
 * broker_serve.c - the socket fallback, exporter side (see broker.h; the
 * importer side is broker_fetch.c).
 *
 * One request per connection: the importer sends {magic, fd, fd_ino}, the
 * exporter answers {magic, status} (0 or a negative errno) with the fd
 * attached when status is 0. The fd sent is a duplicate made under the
 * lock that checked it, so a withdraw+close+reuse racing the request can
 * never make us send an object that was not offered.
 *
 * fork(): prepare takes the lock, so a child never inherits it held by a
 * thread that does not exist there. The child closes the inherited
 * listening socket (it would keep the parent's name bound after the parent
 * exited, and importers would wait for an answer nobody gives) and forgets
 * the offers: its own first offer starts its own server under its name.
 */
#include "handles/broker.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "handles/broker_internal.h"

#define BROKER_MAX_FDS 65536
#define BROKER_SERVE_MS 500 /* one connection (a stalled peer delays others this long) */

static struct {
    pthread_mutex_t lock;
    int listen_fd; /* -1 when not serving */
    int uid_set;
    uid_t uid;
    uint32_t n;
    uint64_t served, refused;
    int fds[BROKER_MAX_FDS];
} br = {.lock = PTHREAD_MUTEX_INITIALIZER, .listen_fd = -1};
static pthread_once_t br_once = PTHREAD_ONCE_INIT;

static void fork_prepare(void)
{
    pthread_mutex_lock(&br.lock);
}

static void fork_parent(void)
{
    pthread_mutex_unlock(&br.lock);
}

static void fork_child(void)
{
    if (br.listen_fd >= 0)
        close(br.listen_fd);
    br.listen_fd = -1;
    br.n = 0;
    br.served = br.refused = 0;
    pthread_mutex_init(&br.lock, NULL);
}

static void broker_once(void)
{
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}

static int offered_locked(int fd)
{
    for (uint32_t i = 0; i < br.n; i++)
        if (br.fds[i] == fd)
            return 1;
    return 0;
}

/* Status for req, with *dup_p a duplicate of the offered fd when 0. */
static int32_t lookup_dup(const struct broker_req *req, int *dup_p)
{
    struct stat st;
    int32_t status = -EBADF;
    pthread_mutex_lock(&br.lock);
    if (req->fd <= INT32_MAX && offered_locked((int)req->fd) && fstat((int)req->fd, &st) == 0) {
        if ((uint32_t)st.st_ino != req->fd_ino)
            status = -ESTALE;
        else if ((*dup_p = fcntl((int)req->fd, F_DUPFD_CLOEXEC, 0)) < 0)
            status = -errno;
        else
            status = 0;
        br.served += status == 0;
    }
    pthread_mutex_unlock(&br.lock);
    return status;
}

static void serve_one(int conn)
{
    struct ucred cred;
    socklen_t len = sizeof(cred);
    struct broker_req req;
    struct broker_rsp rsp = {BROKER_MAGIC, -EPROTO};
    int dup = -1;
    struct timeval tv = {0, BROKER_SERVE_MS * 1000};
    setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(conn, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
        return;
    pthread_mutex_lock(&br.lock);
    int allowed = cred.uid == (br.uid_set ? br.uid : geteuid());
    br.refused += !allowed;
    pthread_mutex_unlock(&br.lock);
    if (!allowed)
        rsp.status = -EPERM; /* said before reading: the peer learns nothing else */
    else if (recv(conn, &req, sizeof(req), MSG_WAITALL) == (ssize_t)sizeof(req) &&
             byval_broker_req_parse(&req, sizeof(req), &req) == BYVAL_BROKER_READY)
        rsp.status = lookup_dup(&req, &dup);
    char cbuf[CMSG_SPACE(sizeof(int))];
    memset(cbuf, 0, sizeof(cbuf));
    struct iovec iov = {.iov_base = &rsp, .iov_len = sizeof(rsp)};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    if (dup >= 0) {
        mh.msg_control = cbuf;
        mh.msg_controllen = sizeof(cbuf);
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &dup, sizeof(int));
    }
    (void)sendmsg(conn, &mh, MSG_NOSIGNAL);
    if (dup >= 0)
        close(dup);
}

static void *broker_thread(void *arg)
{
    int lfd = (int)(intptr_t)arg;
    for (;;) {
        int conn = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (conn >= 0) {
            serve_one(conn);
            close(conn);
        } else if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
            poll(NULL, 0, 10); /* the connection stays queued: do not spin on it */
        } else if (errno != EINTR && errno != ECONNABORTED) {
            return NULL; /* the listening socket is gone */
        }
    }
}

/* Start the server; br.lock held. */
static int broker_start_locked(void)
{
    byval_self_t self;
    struct sockaddr_un a;
    if (byval_self_get(&self) != 0)
        return -1;
    int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (lfd < 0)
        return -1;
    socklen_t alen = byval_broker_addr(&a, self.boot, self.pidns, self.pid, self.identity);
    if (bind(lfd, (struct sockaddr *)&a, alen) != 0 || listen(lfd, 64) != 0)
        goto err_sock;
    /* The thread must not take the application's signals. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    pthread_t t;
    int rc = pthread_create(&t, &attr, broker_thread, (void *)(intptr_t)lfd);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        errno = rc;
        goto err_sock;
    }
    br.listen_fd = lfd;
    return 0;

err_sock:;
    int err = errno;
    close(lfd);
    errno = err;
    return -1;
}

int byval_broker_offer(int fd)
{
    int rc = 0;
    pthread_once(&br_once, broker_once);
    pthread_mutex_lock(&br.lock);
    if (br.listen_fd < 0 && broker_start_locked() != 0)
        rc = -1;
    if (rc == 0 && !offered_locked(fd)) {
        if (br.n < BROKER_MAX_FDS) {
            br.fds[br.n++] = fd;
        } else {
            rc = -1; /* said, not silently left unserved */
            errno = ENOSPC;
        }
    }
    int err = errno;
    pthread_mutex_unlock(&br.lock);
    errno = err;
    return rc;
}

void byval_broker_withdraw(int fd)
{
    pthread_mutex_lock(&br.lock);
    for (uint32_t i = 0; i < br.n; i++) {
        if (br.fds[i] == fd) {
            br.fds[i] = br.fds[--br.n];
            break;
        }
    }
    pthread_mutex_unlock(&br.lock);
}

void byval_broker_set_allowed_uid(uid_t uid)
{
    pthread_mutex_lock(&br.lock);
    br.uid = uid;
    br.uid_set = 1;
    pthread_mutex_unlock(&br.lock);
}

void byval_broker_counts(uint64_t *served_p, uint64_t *refused_p)
{
    pthread_mutex_lock(&br.lock);
    *served_p = br.served;
    *refused_p = br.refused;
    pthread_mutex_unlock(&br.lock);
}
