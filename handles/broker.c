/* SPDX-License-Identifier: MIT */
/* broker.c - the socket fallback transport (see broker.h). */
#include "handles/broker.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#define BROKER_MAX_FDS 65536
#define BROKER_TIMEOUT_S 2

struct broker_req {
    uint32_t fd;
    uint32_t fd_ino;
};

static struct {
    pthread_mutex_t lock;
    pid_t pid;      /* the process that started the server (fork check) */
    int listen_fd;  /* -1 when not serving */
    uint32_t n;
    int fds[BROKER_MAX_FDS];
    uint64_t served, refused;
} br = {.lock = PTHREAD_MUTEX_INITIALIZER, .listen_fd = -1};

/* "\0ipcbyval-<boot>-<pidns>-<pid>-<identity>": abstract, so nothing on
 * disk, and per network namespace, like the exporter's peers. */
static socklen_t broker_addr(struct sockaddr_un *a, uint32_t boot, uint32_t pidns, uint32_t pid,
                             uint64_t identity)
{
    memset(a, 0, sizeof(*a));
    a->sun_family = AF_UNIX;
    int n = snprintf(a->sun_path + 1, sizeof(a->sun_path) - 1, "ipcbyval-%08x-%u-%u-%llx", boot,
                     pidns, pid, (unsigned long long)identity);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

static int offered_locked(uint32_t fd)
{
    for (uint32_t i = 0; i < br.n; i++)
        if (br.fds[i] == (int)fd)
            return 1;
    return 0;
}

static void serve_one(int conn)
{
    struct ucred cred;
    socklen_t len = sizeof(cred);
    struct broker_req req;
    int32_t status = -EPERM;
    int fd = -1;
    if (getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 ||
        (cred.uid != getuid() && cred.uid != 0)) {
        pthread_mutex_lock(&br.lock);
        br.refused++;
        pthread_mutex_unlock(&br.lock);
    } else if (recv(conn, &req, sizeof(req), 0) == (ssize_t)sizeof(req)) {
        struct stat st;
        pthread_mutex_lock(&br.lock);
        /* Only an fd we offered, and only while it is the same object. */
        if (offered_locked(req.fd) && fstat((int)req.fd, &st) == 0 &&
            (uint32_t)st.st_ino == req.fd_ino) {
            fd = (int)req.fd;
            status = 0;
            br.served++;
        } else {
            status = -EBADF;
        }
        pthread_mutex_unlock(&br.lock);
    }
    char cbuf[CMSG_SPACE(sizeof(int))];
    memset(cbuf, 0, sizeof(cbuf));
    struct iovec iov = {.iov_base = &status, .iov_len = sizeof(status)};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    if (fd >= 0) {
        mh.msg_control = cbuf;
        mh.msg_controllen = sizeof(cbuf);
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &fd, sizeof(int));
    }
    (void)sendmsg(conn, &mh, MSG_NOSIGNAL);
}

static void *broker_thread(void *arg)
{
    int lfd = (int)(intptr_t)arg;
    for (;;) {
        int conn = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (conn < 0) {
            if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE || errno == ENFILE)
                continue;
            return NULL; /* the listening socket is gone */
        }
        struct timeval tv = {BROKER_TIMEOUT_S, 0};
        setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        setsockopt(conn, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
        serve_one(conn);
        close(conn);
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
    socklen_t alen = broker_addr(&a, self.boot, self.pidns, self.pid, self.identity);
    if (bind(lfd, (struct sockaddr *)&a, alen) != 0 || listen(lfd, 64) != 0) {
        close(lfd);
        return -1;
    }
    /* The thread must not take the application's signals. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t t;
    int rc = pthread_create(&t, &attr, broker_thread, (void *)(intptr_t)lfd);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        close(lfd);
        return -1;
    }
    br.listen_fd = lfd;
    br.pid = getpid();
    return 0;
}

int byval_broker_offer(int fd)
{
    int rc = 0;
    pthread_mutex_lock(&br.lock);
    if (br.pid != getpid()) {
        /* A forked child: the parent's thread does not exist here and its
         * socket carries the parent's name; start afresh under ours. */
        if (br.listen_fd >= 0)
            close(br.listen_fd);
        br.listen_fd = -1;
        br.n = 0;
        br.pid = getpid();
    }
    if (br.listen_fd < 0 && broker_start_locked() != 0)
        rc = -1;
    if (rc == 0 && !offered_locked((uint32_t)fd) && br.n < BROKER_MAX_FDS)
        br.fds[br.n++] = fd;
    pthread_mutex_unlock(&br.lock);
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

void byval_broker_counts(uint64_t *served_p, uint64_t *refused_p)
{
    pthread_mutex_lock(&br.lock);
    *served_p = br.served;
    *refused_p = br.refused;
    pthread_mutex_unlock(&br.lock);
}

#define MSG(...) (msg ? (void)snprintf(msg, msglen, __VA_ARGS__) : (void)0)

byval_status_t byval_broker_fetch(const byval_record_t *rec, uint32_t fd, uint32_t fd_ino,
                                  int *fd_p, char *msg, size_t msglen)
{
    struct sockaddr_un a;
    *fd_p = -1;
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) {
        MSG("socket() for the fallback failed: %s", strerror(errno));
        return errno == EMFILE || errno == ENFILE ? BYVAL_E_NOFD : BYVAL_E_SYS;
    }
    struct timeval tv = {BROKER_TIMEOUT_S, 0};
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    socklen_t alen = broker_addr(&a, rec->boot, rec->pidns, rec->pid, rec->identity);
    byval_status_t st = BYVAL_E_SYS;
    if (connect(s, (struct sockaddr *)&a, alen) != 0) {
        MSG("exporter pid %u serves no fds over the socket fallback (connect: %s; is it "
            "running ipcbyval with IPCBYVAL_TRANSPORT=auto or socket, in this network "
            "namespace?)",
            rec->pid, strerror(errno));
        st = errno == ECONNREFUSED || errno == ENOENT ? BYVAL_E_GONE : BYVAL_E_SYS;
        goto out;
    }
    struct broker_req req = {fd, fd_ino};
    int32_t status = 0;
    char cbuf[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {.iov_base = &status, .iov_len = sizeof(status)};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
                        .msg_controllen = sizeof(cbuf)};
    if (send(s, &req, sizeof(req), MSG_NOSIGNAL) != (ssize_t)sizeof(req) ||
        recvmsg(s, &mh, MSG_CMSG_CLOEXEC) != (ssize_t)sizeof(status)) {
        MSG("exporter pid %u refused the socket fallback (uid not allowed, or no answer "
            "within %d s)",
            rec->pid, BROKER_TIMEOUT_S);
        st = BYVAL_E_PERM;
        goto out;
    }
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    if (status == -EPERM) {
        MSG("exporter pid %u refused the socket fallback: it serves its own uid only "
            "(SO_PEERCRED uid %u)",
            rec->pid, (unsigned)getuid());
        st = BYVAL_E_PERM;
        goto out;
    }
    if (status != 0 || !c || c->cmsg_type != SCM_RIGHTS) {
        MSG("exporter pid %u does not serve fd %u (closed or not exported): %s", rec->pid, fd,
            strerror(status ? -status : EBADF));
        st = BYVAL_E_BADFD;
        goto out;
    }
    int got;
    memcpy(&got, CMSG_DATA(c), sizeof(int));
    struct stat sst;
    if (fstat(got, &sst) != 0 || (uint32_t)sst.st_ino != fd_ino) {
        MSG("fd %u from pid %u over the socket is not the exported object", fd, rec->pid);
        close(got);
        st = BYVAL_E_FDKIND;
        goto out;
    }
    *fd_p = got;
    st = BYVAL_OK;
out:
    close(s);
    return st;
}
