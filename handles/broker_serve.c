/* SPDX-License-Identifier: MIT */
/*
 * broker_serve.c - the socket fallback, exporter side (broker.h): what it
 * serves, to whom, and the server.
 *
 * Only the object recorded when an fd was offered is ever served: the
 * request must name its inode, and the number must still refer to that
 * open file, proven before and after the duplicate under the lock
 * (fdproof.c): a driver may close an exported fd behind our back and our
 * own socket land on the number. A rescue by number is answered only from
 * the registry of exported fds (registry_fds.c), never from the offers. A
 * peer of another uid than the one served (the directory's group) gets no
 * rescue and must show the object's tag unless the offer is open.
 *
 * No peer can stall the server: one thread waits in epoll_wait and
 * nowhere else; sockets are non-blocking, a request is parsed as its
 * bytes arrive and answered at once, and a connection without a whole
 * request within 500 ms is dropped. Pending connections are bounded, 8
 * per peer process (told apart by its pidfs inode, else its visible pid,
 * else its uid) and 64 in all: a peer over its bound is told to retry, a
 * full table drops the oldest connection of the peer holding the most.
 *
 * fork(): the child forgets the offers and closes the inherited sockets
 * (it would keep the parent's names bound); its own first export starts
 * its own server.
 */

#include <errno.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/stat.h>

#include "cache/locks.h"
#include "handles/bgthread.h"
#include "handles/broker_internal.h"
#include "handles/fdproof.h"
#include "handles/registry.h"
#include "handles/rendezvous.h"
#include "handles/tag.h"

static struct {
    byval_lock_t lock;
    int uid_set;
    uid_t uid;
    uint64_t served, refused, untagged;
    byval_fdtab_t t; /* the offers */
} of = {.lock = BYVAL_LOCK_INIT(BROKER_OFFERS), .t = {.epfd = -1, .max = 65536}};
BYVAL_LOCK_STATIC(broker_offers, &of.lock);

static void offers_fork_child(void)
{
    byval_fdtab_forget(&of.t);
    of.served = of.refused = of.untagged = 0;
}
BYVAL_FORK_CHILD(broker_offers, offers_fork_child);

int32_t byval_broker_lookup(const struct broker_req *req, int own_uid, int *dup_p)
{
    int32_t status = -EBADF;
    *dup_p = -1;
    if (req->magic == BROKER_MAGIC_REGISTRY)
        return byval_reg_dup_page(dup_p);
    /* The rescue stands in for a pidfd_getfd the kernel refused, which a
     * member of the directory's group could never have made. */
    if (req->magic == BROKER_MAGIC_RESCUE)
        return own_uid ? byval_reg_dup_fd((int)req->fd, dup_p) : -EPERM;
    byval_lock(&of.lock);
    byval_fdproof_t *x = req->fd <= INT32_MAX ? byval_fdtab_find(&of.t, (int)req->fd) : NULL;
    if (x && (uint32_t)x->ino != req->fd_ino) {
        status = -ESTALE; /* not the object offered under that number */
    } else if (x && !own_uid && !x->open && !byval_tag_check(req->fd, (uint32_t)x->ino, req->tag)) {
        status = -EACCES; /* a member that holds no handle of it */
        of.untagged++;
    } else if (x) {
        status = byval_fdtab_dup(&of.t, x, dup_p);
    }
    of.served += status == 0;
    byval_unlock(&of.lock);
    return status;
}

/* Is a peer of uid served? count: a refusal is counted. */
static int uid_served(uid_t uid, int count)
{
    byval_lock(&of.lock);
    int served = uid == (of.uid_set ? of.uid : geteuid());
    of.refused += count && !served;
    byval_unlock(&of.lock);
    return served;
}

static int offer(int fd, int open)
{
    if (byval_broker_serve() != 0)
        return -1;
    byval_lock(&of.lock);
    byval_fdproof_t *x = byval_fdtab_add(&of.t, fd);
    int err = x ? 0 : errno; /* ENOSPC is said, not silently left unserved */
    if (x)
        x->open |= open;
    byval_unlock(&of.lock);
    errno = err;
    return x ? 0 : -1;
}

int byval_broker_offer(int fd)
{
    return offer(fd, 0);
}

int byval_broker_offer_open(int fd)
{
    return offer(fd, 1);
}

void byval_broker_withdraw(int fd)
{
    byval_lock(&of.lock);
    byval_fdtab_remove(&of.t, fd);
    byval_unlock(&of.lock);
}

void byval_broker_set_allowed_uid(uid_t uid)
{
    byval_lock(&of.lock);
    of.uid = uid;
    of.uid_set = 1;
    byval_unlock(&of.lock);
}

void byval_broker_counts(uint64_t *served_p, uint64_t *refused_p)
{
    byval_lock(&of.lock);
    *served_p = of.served;
    *refused_p = of.refused;
    byval_unlock(&of.lock);
}

uint64_t byval_broker_untagged(void)
{
    byval_lock(&of.lock);
    uint64_t n = of.untagged;
    byval_unlock(&of.lock);
    return n;
}

/* Connections waiting for their request. Each costs the exporter one fd,
 * so the table is small; a full table makes room by dropping the oldest
 * connection of the peer that holds the most (never a peer's only one). */
#define BROKER_MAX_CONNS 64
#define BROKER_PEER_CONNS 8 /* per peer process: its excess is told to retry */
#define BROKER_CONN_MS 500  /* a connection's whole life, connect to answer */
#define BROKER_ACCEPT_BATCH 16
/* epoll tags of the two listening sockets (connections use gen << 32 | slot) */
#define BROKER_TAG_LISTEN UINT64_MAX
#define BROKER_TAG_RENDEZVOUS (UINT64_MAX - 1) /* the directory's listener (rendezvous.h) */

/* One connection whose request has not arrived whole yet. */
typedef struct conn {
    int fd;        /* -1: free slot */
    uint64_t peer; /* the peer process (peer_key) */
    /* gen tells a reused slot from the one an event named; have: request
     * bytes received; via_dir: accepted on the directory's socket;
     * own_uid: of the uid served, not only of the directory's group. */
    uint32_t gen, have;
    int64_t deadline; /* ms, CLOCK_MONOTONIC */
    uint8_t via_dir, own_uid;
    uint8_t buf[sizeof(struct broker_req)];
} conn_t;

static struct {
    byval_lock_t lock;
    int listen_fd, rdv_fd, epoll_fd; /* -1: not serving; rdv_fd: the directory's listener */
    conn_t conns[BROKER_MAX_CONNS];  /* the server thread's, under lock for fork */
} br = {.lock = BYVAL_LOCK_INIT(BROKER_SERVE),
        .listen_fd = -1,
        .rdv_fd = -1,
        .epoll_fd = -1,
        .conns = {[0 ... BROKER_MAX_CONNS - 1] = {.fd = -1}}};
BYVAL_LOCK_STATIC(broker_serve, &br.lock);

static void fork_child(void)
{
    byval_close_fd(&br.listen_fd);
    byval_close_fd(&br.epoll_fd);
    byval_close_fd(&br.rdv_fd); /* the parent's name, not ours */
    for (int i = 0; i < BROKER_MAX_CONNS; i++)
        byval_close_fd(&br.conns[i].fd); /* the parent's peers, not ours */
}
BYVAL_FORK_CHILD(broker_serve, fork_child);

/* Answer on a connection that has never been written to: its send buffer
 * is empty, so 8 bytes and one fd fit and MSG_DONTWAIT never waits. What
 * does not fit (a peer that shrank its buffers) is dropped. */
static void answer(int fd, int32_t status, int dup)
{
    struct broker_rsp rsp = {BROKER_MAGIC, status};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } cbuf;
    memset(&cbuf, 0, sizeof(cbuf));
    struct iovec iov = {.iov_base = &rsp, .iov_len = sizeof(rsp)};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    if (dup >= 0) {
        mh.msg_control = cbuf.buf;
        mh.msg_controllen = sizeof(cbuf.buf);
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &dup, sizeof(int));
    }
    (void)sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    byval_close_fd(&dup);
}

/* Release slot i (server thread). status != 0: say it first (-EAGAIN:
 * the peer may retry). */
static void conn_drop(int i, int32_t status)
{
    conn_t *c = &br.conns[i];
    if (status)
        answer(c->fd, status, -1);
    byval_lock(&br.lock);
    close(c->fd); /* also takes it out of the epoll set */
    c->fd = -1;
    c->gen++;
    byval_unlock(&br.lock);
}

/* Read what slot i's peer sent (never past one request, never waiting);
 * answer and release the slot once the request is whole, bad, or the
 * peer gave up. */
static void conn_read(int i)
{
    conn_t *c = &br.conns[i];
    for (;;) {
        ssize_t r = recv(c->fd, c->buf + c->have, sizeof(c->buf) - c->have, MSG_DONTWAIT);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return; /* the rest later (or never: its deadline) */
        /* r <= 0: the peer closed or reset, nobody to answer. */
        struct broker_req req;
        byval_broker_parse_t p = BYVAL_BROKER_BAD;
        if (r > 0 &&
            (p = byval_broker_req_parse(c->buf, c->have += (uint32_t)r, &req)) == BYVAL_BROKER_MORE)
            continue;
        int dup = -1;
        int32_t status = p == BYVAL_BROKER_READY ? byval_broker_lookup(&req, c->own_uid, &dup) : 0;
        if (status == 0 && p == BYVAL_BROKER_READY && c->via_dir)
            byval_rendezvous_served(); /* stats: served to another pod */
        if (p == BYVAL_BROKER_READY)
            answer(c->fd, status, dup);
        conn_drop(i, r > 0 && p == BYVAL_BROKER_BAD ? -EPROTO : 0);
        return;
    }
}

#define PEER_PIDFS (UINT64_C(1) << 63)
#define PEER_PID (UINT64_C(1) << 62)
#define PEER_UID (UINT64_C(1) << 61)

/* What tells the peer process on connection fd from the others (see the
 * top): its pidfs inode, else its pid where we see it, else its uid. */
static uint64_t peer_key(int fd, const struct ucred *cred)
{
    struct stat st;
    int pidfd = -1;
    socklen_t len = sizeof(pidfd);
    uint64_t key = 0;
    if (SO_PEERPIDFD >= 0 && getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &len) == 0 &&
        pidfd >= 0) {
        if (byval_pidfd_is_pidfs(pidfd) && fstat(pidfd, &st) == 0)
            key = PEER_PIDFS | ((uint64_t)st.st_ino & (PEER_PIDFS - 1));
        close(pidfd);
    }
    if (!key)
        key = cred->pid > 0 ? PEER_PID | (uint32_t)cred->pid : PEER_UID | cred->uid;
    return key;
}

/* A slot for a new connection from peer: a free one, or the oldest of the
 * peer that holds the most (told to retry). -1 when peer itself holds its
 * bound. */
static int conn_slot(uint64_t peer)
{
    int free_i = -1, mine = 0, victim = -1, victim_n = 0;
    for (int i = 0; i < BROKER_MAX_CONNS; i++) {
        if (br.conns[i].fd < 0 && free_i < 0)
            free_i = i;
        else if (br.conns[i].fd >= 0)
            mine += br.conns[i].peer == peer;
    }
    if (mine >= BROKER_PEER_CONNS)
        return -1;
    if (free_i >= 0)
        return free_i;
    /* Full (only reached with 8 or more peers): the table is small, so
     * count per slot; the oldest connection wins ties. */
    for (int i = 0; i < BROKER_MAX_CONNS; i++) {
        int n = 0;
        for (int j = 0; j < BROKER_MAX_CONNS; j++)
            n += br.conns[j].peer == br.conns[i].peer;
        if (n > victim_n || (n == victim_n && br.conns[i].deadline < br.conns[victim].deadline))
            victim = i, victim_n = n;
    }
    if (victim_n <= 1)
        return -1; /* 64 peers with one each: the newcomer retries */
    conn_drop(victim, -EAGAIN);
    return victim;
}

/* Take up to a batch of new connections (more wait for the next round,
 * so that accepting cannot starve reading). */
static void accept_some(int lfd, int efd, int via_dir)
{
    for (int k = 0; k < BROKER_ACCEPT_BATCH; k++) {
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0 && (errno == ECONNABORTED || errno == EINTR))
            continue;
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
                poll(NULL, 0, 10); /* the connection stays queued: do not spin on it */
            return;
        }
        struct ucred cred;
        socklen_t len = sizeof(cred);
        int i = -1, known = getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0;
        /* the directory's peers may also be of its group */
        int allowed = known &&
            ((via_dir && byval_rendezvous_group_peer(fd, &cred)) || uid_served(cred.uid, 1));
        uint64_t peer = allowed ? peer_key(fd, &cred) : 0;
        if (!allowed || (i = conn_slot(peer)) < 0) {
            /* Said before reading: the peer learns nothing else; over its
             * bound, it retries. */
            if (known)
                answer(fd, allowed ? -EAGAIN : -EPERM, -1);
            close(fd);
            continue;
        }
        conn_t *c = &br.conns[i];
        byval_lock(&br.lock);
        c->fd = fd;
        c->peer = peer;
        c->via_dir = (uint8_t)via_dir;
        c->own_uid = (uint8_t)(!via_dir || uid_served(cred.uid, 0));
        c->have = 0;
        c->deadline = byval_broker_now_ms() + BROKER_CONN_MS;
        byval_unlock(&br.lock);
        /* A well-behaved importer has sent its request already: serve it
         * now, and watch only the connections that are not done. */
        conn_read(i);
        if (c->fd == fd) {
            struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP,
                                     .data.u64 = (uint64_t)c->gen << 32 | (uint32_t)i};
            if (epoll_ctl(efd, EPOLL_CTL_ADD, fd, &ev) != 0)
                conn_drop(i, -EAGAIN);
        }
    }
}

/* Drop connections past their deadline; ms until the next one (-1: none). */
static int expire(void)
{
    int64_t now = byval_broker_now_ms(), next = -1;
    for (int i = 0; i < BROKER_MAX_CONNS; i++) {
        conn_t *c = &br.conns[i];
        if (c->fd >= 0 && c->deadline <= now)
            conn_drop(i, 0); /* it never sent a whole request: nothing to say */
        else if (c->fd >= 0 && (next < 0 || c->deadline - now < next))
            next = c->deadline - now;
    }
    return (int)next;
}

/* The server: one thread, nothing blocking but epoll_wait. Every
 * connection is read as its bytes arrive and answered at once, so a peer
 * that connects and sends nothing, or half a request, occupies one slot
 * until its deadline and delays nobody. */
static void *broker_thread(void *arg)
{
    int lfd = (int)(intptr_t)arg;
    byval_lock(&br.lock);
    int efd = br.epoll_fd, rfd = br.rdv_fd;
    byval_unlock(&br.lock);
    for (;;) {
        struct epoll_event evs[32];
        int n = epoll_wait(efd, evs, 32, expire());
        if (n < 0 && errno != EINTR)
            return NULL;
        byval_locks_test_point("broker");
        for (int k = 0; k < n; k++) {
            uint64_t d = evs[k].data.u64;
            int i = (int)(uint32_t)d, dir = d == BROKER_TAG_RENDEZVOUS;
            if (d == BROKER_TAG_LISTEN && (evs[k].events & (EPOLLERR | EPOLLHUP)))
                return NULL; /* the listening socket is gone */
            if (d == BROKER_TAG_LISTEN || dir)
                accept_some(dir ? rfd : lfd, efd, dir);
            else if (i < BROKER_MAX_CONNS && br.conns[i].fd >= 0 &&
                     br.conns[i].gen == (uint32_t)(d >> 32))
                conn_read(i);
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
    int efd = -1, lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (lfd < 0)
        goto err_sock;
    socklen_t alen = byval_broker_addr(&a, self.boot, self.pidns, self.pid, self.identity);
    if (bind(lfd, (struct sockaddr *)&a, alen) != 0 || listen(lfd, 64) != 0)
        goto err_sock;
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = BROKER_TAG_LISTEN};
    efd = epoll_create1(EPOLL_CLOEXEC);
    if (efd < 0 || epoll_ctl(efd, EPOLL_CTL_ADD, lfd, &ev) != 0)
        goto err_sock;
    br.epoll_fd = efd;
    /* A second listener, in the directory, when one is in use. */
    byval_rendezvous_serve(&self, efd, BROKER_TAG_RENDEZVOUS, &br.rdv_fd);
    int rc = byval_bgthread_start(broker_thread, (void *)(intptr_t)lfd, NULL);
    if (rc != 0) {
        errno = rc;
        goto err_sock;
    }
    br.listen_fd = lfd;
    return 0;

err_sock:;
    int err = errno;
    byval_rendezvous_start_failed(err); /* said once by the shim, at warning level */
    br.epoll_fd = -1;
    byval_close_fd(&efd);
    byval_close_fd(&br.rdv_fd);
    byval_close_fd(&lfd);
    errno = err;
    return -1;
}

int byval_broker_serve(void)
{
    byval_lock(&br.lock);
    int rc = br.listen_fd < 0 ? broker_start_locked() : 0, err = errno;
    byval_unlock(&br.lock);
    errno = err;
    return rc;
}
