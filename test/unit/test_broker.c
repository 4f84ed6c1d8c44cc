/* SPDX-License-Identifier: MIT */
/*
 * test_broker.c - the socket fallback (handles/broker*.c): this process is
 * exporter and importer at once (its server thread answers its own
 * fetches), forked exporters where a test needs another identity.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <dirent.h>

#include <cmocka.h>

#include "handles/broker_internal.h"
#include "handles/tag.h"

static byval_self_t me;

/* Forked exporters start their own server thread in a child of this
 * multi-threaded process, which is what the library must support. */
const char *__tsan_default_options(void);
const char *__tsan_default_options(void)
{
    return "die_after_fork=0";
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int new_memfd(void)
{
    int fd = memfd_create("test-broker", MFD_CLOEXEC);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, 8192), 0);
    return fd;
}

/* A record naming fd of the process described by self. */
static byval_record_t rec_of(const byval_self_t *self, int fd)
{
    byval_record_t rec = {.kind = BYVAL_KIND_ZE_MEM, .fd = (uint32_t)fd, .size = 8192};
    byval_record_set_exporter(&rec, self);
    rec.fd_ino = (uint32_t)byval_fd_inode(fd);
    return rec;
}

static byval_status_t fetch(const byval_record_t *rec, int *fd_p, char *msg, size_t len)
{
    return byval_broker_fetch_routes(rec, rec->fd, rec->fd_ino, rec->tag, fd_p, NULL, NULL, msg,
                                     len);
}

static void test_roundtrip_and_pidfd(void **state)
{
    int fd = new_memfd(), got = -1, pidfd = -1;
    assert_int_equal(byval_broker_offer(fd), 0);
    byval_record_t rec = rec_of(&me, fd);
    uint64_t served0, served1, refused;
    byval_broker_counts(&served0, &refused);
    char msg[512];
    assert_int_equal(byval_broker_fetch_routes(&rec, rec.fd, rec.fd_ino, rec.tag, &got, &pidfd,
                                               NULL, msg, sizeof(msg)),
                     BYVAL_OK);
    assert_int_not_equal(got, fd); /* a new fd for the same object */
    assert_int_equal(byval_fd_inode(got), byval_fd_inode(fd));
    assert_true(fcntl(got, F_GETFD) & FD_CLOEXEC);
    /* SO_PEERPIDFD proved the identity: the pidfd is ours (pidfs inode). */
    if (me.id_flags & BYVAL_FLAG_ID_PIDFS)
        assert_int_equal(byval_fd_inode(pidfd), me.identity);
    byval_broker_counts(&served1, &refused);
    assert_int_equal(served1, served0 + 1);
    close(got);
    if (pidfd >= 0)
        close(pidfd);
    byval_broker_withdraw(fd);
    close(fd);
}

static void test_unknown_withdrawn_reused(void **state)
{
    char msg[512];
    int fd = new_memfd(), other = new_memfd(), got = 7;
    byval_record_t rec = rec_of(&me, fd);
    assert_int_equal(fetch(&rec, &got, msg, sizeof(msg)), BYVAL_E_BADFD); /* never offered */
    assert_int_equal(got, -1);
    assert_non_null(strstr(msg, "does not serve fd"));
    assert_int_equal(byval_broker_offer(fd), 0);
    byval_broker_withdraw(fd);
    assert_int_equal(fetch(&rec, &got, msg, sizeof(msg)), BYVAL_E_BADFD); /* withdrawn */
    /* Offered, but the number now holds another object than the record's. */
    assert_int_equal(byval_broker_offer(fd), 0);
    assert_int_equal(dup2(other, fd), fd);
    assert_int_equal(fetch(&rec, &got, msg, sizeof(msg)), BYVAL_E_FDKIND);
    assert_non_null(strstr(msg, "stale or forged"));
    assert_null(strstr(msg, "any more"));
    byval_broker_withdraw(fd);
    close(fd);
    close(other);
}

/* Issue 22 defect 3: the offered object was closed without a withdraw
 * (a driver may close exported fds at zeContextDestroy) and the
 * exporter's own socket landed on its number. A peer asking for that
 * number with the inode of what sits there now (readable in
 * /proc/PID/fd) must be refused: only the object recorded at the offer
 * is ever served, never the exporter's private socket. */
static void test_stale_number_never_serves_newcomer(void **state)
{
    char msg[512];
    int fd = new_memfd(), sv[2], got = 7;
    assert_int_equal(byval_broker_offer(fd), 0);
    close(fd); /* closed behind the offer */
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    if (sv[0] != fd) {
        assert_int_equal(dup2(sv[0], fd), fd);
        close(sv[0]);
        sv[0] = fd;
    }
    byval_record_t rec = rec_of(&me, fd); /* fd_ino: the socket's, as /proc shows */
    assert_int_not_equal(fetch(&rec, &got, msg, sizeof(msg)), BYVAL_OK);
    assert_int_equal(got, -1);
    /* The same with a pipe on the number. */
    int p[2];
    close(sv[0]);
    assert_int_equal(pipe2(p, O_CLOEXEC), 0);
    if (p[0] != fd) {
        assert_int_equal(dup2(p[0], fd), fd);
        close(p[0]);
    }
    rec = rec_of(&me, fd);
    assert_int_not_equal(fetch(&rec, &got, msg, sizeof(msg)), BYVAL_OK);
    assert_int_equal(got, -1);
    byval_broker_withdraw(fd);
    close(fd);
    close(p[1]);
    close(sv[1]);
}

/* A number offered again after its object was closed behind the offer
 * names the new object from then on: served with the new inode, never
 * with the old one. */
static void test_reoffer_records_new_object(void **state)
{
    char msg[512];
    int fd = new_memfd(), got = -1;
    assert_int_equal(byval_broker_offer(fd), 0);
    byval_record_t old = rec_of(&me, fd);
    int other = new_memfd();
    assert_int_equal(dup2(other, fd), fd); /* closed behind the offer */
    close(other);
    assert_int_equal(byval_broker_offer(fd), 0);
    byval_record_t now = rec_of(&me, fd);
    assert_int_not_equal(old.fd_ino, now.fd_ino);
    assert_int_not_equal(fetch(&old, &got, msg, sizeof(msg)), BYVAL_OK);
    assert_int_equal(got, -1);
    assert_int_equal(fetch(&now, &got, msg, sizeof(msg)), BYVAL_OK);
    assert_true(got >= 0);
    close(got);
    byval_broker_withdraw(fd);
    assert_int_not_equal(fetch(&now, &got, msg, sizeof(msg)), BYVAL_OK); /* withdrawn */
    close(fd);
}

static void test_refused_uid_counted(void **state)
{
    char msg[512];
    int fd = new_memfd(), got;
    uint64_t served, refused0, refused1;
    assert_int_equal(byval_broker_offer(fd), 0);
    byval_record_t rec = rec_of(&me, fd);
    byval_broker_counts(&served, &refused0);
    byval_broker_set_allowed_uid(geteuid() + 1);
    /* The exporter answers a refused peer before reading its request and
     * may close first: the answer must still arrive, every time. */
    int wrong = 0;
    for (int i = 0; i < 50; i++)
        wrong += fetch(&rec, &got, msg, sizeof(msg)) != BYVAL_E_PERM ||
                 !strstr(msg, "refused the socket fallback");
    byval_broker_set_allowed_uid(geteuid()); /* before any assert: later tests need it */
    assert_int_equal(wrong, 0);
    byval_broker_counts(&served, &refused1);
    assert_int_equal(refused1, refused0 + 50);
    assert_int_equal(fetch(&rec, &got, msg, sizeof(msg)), BYVAL_OK);
    close(got);
    byval_broker_withdraw(fd);
    close(fd);
}

/* Fork an exporter; it writes its record and waits for a byte on *go_p.
 * hold: fork a grandchild that outlives it (holding nothing of ours). */
static pid_t exporter(int offer, int hold, byval_record_t *rec_p, int *go_p)
{
    int p[2], go[2];
    assert_int_equal(pipe(p), 0);
    assert_int_equal(pipe(go), 0);
    pid_t pid = fork();
    if (pid == 0) {
        byval_self_t s;
        char c;
        close(p[0]);
        close(go[1]); /* so that read(go[0]) ends if the test dies */
        byval_self_reset();
        int fd = memfd_create("exp", 0);
        if (fd < 0 || ftruncate(fd, 8192) != 0 || byval_self_get(&s) != 0 ||
            (offer && byval_broker_offer(fd) != 0))
            _exit(90);
        byval_record_t rec = rec_of(&s, fd);
        if (hold) {
            int ready[2];
            if (pipe(ready) != 0)
                _exit(91);
            if (fork() == 0) { /* the atfork child handler ran before this line */
                (void)!write(ready[1], "r", 1);
                sleep(5);
                _exit(0);
            }
            if (read(ready[0], &c, 1) != 1)
                _exit(92);
        }
        if (write(p[1], &rec, sizeof(rec)) != (ssize_t)sizeof(rec))
            _exit(93);
        _exit(read(go[0], &c, 1) == 1 ? 0 : 94);
    }
    assert_true(pid > 0);
    close(p[1]);
    close(go[0]);
    assert_int_equal(read(p[0], rec_p, sizeof(*rec_p)), sizeof(*rec_p));
    close(p[0]);
    *go_p = go[1];
    return pid;
}

static void reap(pid_t pid, int go)
{
    int ws;
    (void)!write(go, "x", 1);
    close(go);
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
}

static void test_no_listener_fast_and_clear(void **state)
{
    byval_record_t rec;
    int go, got;
    char msg[512];
    pid_t pid = exporter(0, 0, &rec, &go); /* alive, never offers */
    double t0 = now_ms();
    assert_int_equal(fetch(&rec, &got, msg, sizeof(msg)), BYVAL_E_GONE);
    assert_true(now_ms() - t0 < 100);
    assert_non_null(strstr(msg, "serves no fds over the socket fallback"));
    assert_non_null(strstr(msg, "IPCBYVAL_TRANSPORT=auto|socket"));
    reap(pid, go);
}

/* The exporter forked a child that outlives it: the child must not keep
 * the exporter's name bound (importers would wait for a dead server). */
static void test_fork_child_drops_parents_socket(void **state)
{
    byval_record_t rec;
    int go, got;
    char msg[512];
    pid_t pid = exporter(1, 1, &rec, &go);
    assert_int_equal(fetch(&rec, &got, msg, sizeof(msg)), BYVAL_OK);
    close(got);
    reap(pid, go);
    double t0 = now_ms();
    assert_int_equal(fetch(&rec, &got, msg, sizeof(msg)), BYVAL_E_GONE);
    assert_true(now_ms() - t0 < 100);
}

static volatile int churn_stop;

static void *churn(void *arg)
{
    int fd = *(int *)arg;
    while (!__atomic_load_n(&churn_stop, __ATOMIC_RELAXED)) {
        byval_broker_offer(fd);
        byval_broker_withdraw(fd);
    }
    return NULL;
}

/* fork() while another thread holds the broker's lock: the child's own
 * first offer must start its own server, not hang on the parent's lock. */
static void test_fork_while_busy(void **state)
{
    int fd = new_memfd(), hung = 0;
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, churn, &fd), 0);
    for (int i = 0; i < 50; i++) {
        pid_t c = fork();
        if (c == 0) {
            alarm(5);
            byval_self_reset();
            int f = memfd_create("child", 0);
            _exit(f >= 0 && byval_broker_offer(f) == 0 ? 0 : 1);
        }
        int ws;
        assert_int_equal(waitpid(c, &ws, 0), c);
        hung += !WIFEXITED(ws) || WEXITSTATUS(ws) != 0;
    }
    __atomic_store_n(&churn_stop, 1, __ATOMIC_RELAXED);
    pthread_join(t, NULL);
    assert_int_equal(hung, 0);
    close(fd);
}

/* Someone bound the exporter's name first: refused before any request. */
static void test_impostor_refused_unasked(void **state)
{
    if (!(me.id_flags & BYVAL_FLAG_ID_PIDFS))
        skip();
    byval_record_t rec;
    int go, got;
    char msg[512];
    pid_t pid = exporter(0, 0, &rec, &go);
    struct sockaddr_un a;
    socklen_t alen = byval_broker_addr(&a, rec.boot, rec.pidns, rec.pid, rec.identity);
    int l = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_int_equal(bind(l, (struct sockaddr *)&a, alen), 0);
    assert_int_equal(listen(l, 4), 0);
    assert_int_equal(fetch(&rec, &got, msg, sizeof(msg)), BYVAL_E_IDENTITY);
    assert_non_null(strstr(msg, "held by another process"));
    int c = accept4(l, NULL, NULL, SOCK_CLOEXEC);
    char buf[16];
    assert_int_equal(recv(c, buf, sizeof(buf), MSG_DONTWAIT), 0); /* closed, nothing sent */
    close(c);
    close(l);
    reap(pid, go);
}

/* A listener that never answers: the fetch gives up at its deadline. */
static void test_bounded_by_deadline(void **state)
{
    int p[2], go[2];
    char c;
    assert_int_equal(pipe(p), 0);
    assert_int_equal(pipe(go), 0);
    pid_t pid = fork();
    if (pid == 0) {
        byval_self_t s;
        struct sockaddr_un a;
        close(p[0]);
        close(go[1]);
        byval_self_reset();
        if (byval_self_get(&s) != 0)
            _exit(90);
        int l = socket(AF_UNIX, SOCK_STREAM, 0);
        if (bind(l, (struct sockaddr *)&a, byval_broker_addr(&a, s.boot, s.pidns, s.pid,
                                                             s.identity)) != 0 ||
            listen(l, 4) != 0)
            _exit(91);
        byval_record_t rec = rec_of(&s, l);
        (void)!write(p[1], &rec, sizeof(rec));
        _exit(read(go[0], &c, 1) == 1 ? 0 : 92);
    }
    byval_record_t rec;
    assert_int_equal(read(p[0], &rec, sizeof(rec)), sizeof(rec));
    int got;
    char msg[512];
    double t0 = now_ms();
    assert_int_equal(fetch(&rec, &got, msg, sizeof(msg)), BYVAL_E_SYS);
    double dt = now_ms() - t0;
    assert_true(dt > 1500 && dt < 3000);
    assert_non_null(strstr(msg, "no answer"));
    reap(pid, go[1]);
    close(p[0]);
    close(go[0]);
    close(p[1]);
}

static int count_fds(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    assert_non_null(d);
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

/* A hostile exporter: a forked process that binds its own name (so the
 * listener check passes) and answers every request with status 0 and
 * nfds fds attached (duplicates of the memfd the record names). */
static pid_t fake_exporter(int nfds, byval_record_t *rec_p)
{
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t pid = fork();
    if (pid == 0) {
        byval_self_t s;
        struct sockaddr_un a;
        close(p[0]);
        byval_self_reset();
        int fd = memfd_create("fake", 0);
        if (fd < 0 || ftruncate(fd, 8192) != 0 || byval_self_get(&s) != 0)
            _exit(90);
        int l = socket(AF_UNIX, SOCK_STREAM, 0);
        if (bind(l, (struct sockaddr *)&a,
                 byval_broker_addr(&a, s.boot, s.pidns, s.pid, s.identity)) != 0 ||
            listen(l, 16) != 0)
            _exit(91);
        byval_record_t rec = rec_of(&s, fd);
        (void)!write(p[1], &rec, sizeof(rec));
        close(p[1]);
        for (;;) {
            int c = accept(l, NULL, NULL);
            if (c < 0)
                continue;
            struct broker_req req;
            struct broker_rsp rsp = {BROKER_MAGIC, 0};
            (void)!recv(c, &req, sizeof(req), MSG_WAITALL);
            int fds[32];
            union {
                char buf[CMSG_SPACE(sizeof(fds))];
                struct cmsghdr align;
            } u;
            memset(&u, 0, sizeof(u));
            for (int i = 0; i < nfds; i++)
                fds[i] = fd;
            struct iovec iov = {.iov_base = &rsp, .iov_len = sizeof(rsp)};
            struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
            if (nfds) {
                mh.msg_control = u.buf;
                mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
                struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
                cm->cmsg_level = SOL_SOCKET;
                cm->cmsg_type = SCM_RIGHTS;
                cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
                memcpy(CMSG_DATA(cm), fds, sizeof(int) * (size_t)nfds);
            }
            (void)!sendmsg(c, &mh, MSG_NOSIGNAL);
            close(c);
        }
    }
    assert_true(pid > 0);
    close(p[1]);
    assert_int_equal(read(p[0], rec_p, sizeof(*rec_p)), sizeof(*rec_p));
    close(p[0]);
    return pid;
}

static void kill_reap(pid_t pid)
{
    kill(pid, SIGKILL);
    assert_int_equal(waitpid(pid, NULL, 0), pid);
}

/* An answer with more fds than the one asked for: every one of them is
 * closed and the answer refused, whatever the count (the control buffer
 * may hold only some: MSG_CTRUNC). 100 fetches leave no fd behind. */
static void test_extra_fds_closed(void **state)
{
    static const int counts[] = {0, 2, 3, 8, 16, 20, 32};
    for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
        byval_record_t rec;
        char msg[512];
        pid_t pid = fake_exporter(counts[k], &rec);
        int before = count_fds(), wrong = 0, got = -1;
        for (int i = 0; i < 100; i++) {
            byval_status_t st = fetch(&rec, &got, msg, sizeof(msg));
            wrong += st == BYVAL_OK || got != -1 || !strstr(msg, "exporter pid");
        }
        int after = count_fds();
        kill_reap(pid);
        print_message("%d fds per answer: %d fds more, last: %s\n", counts[k], after - before,
                      msg);
        assert_int_equal(after, before);
        assert_int_equal(wrong, 0);
        assert_null(strstr(msg, "out of file descriptors"));
    }
    /* One fd, the right one: still served. */
    byval_record_t rec;
    int got = -1;
    pid_t pid = fake_exporter(1, &rec);
    assert_int_equal(fetch(&rec, &got, NULL, 0), BYVAL_OK);
    close(got);
    kill_reap(pid);
}

static volatile sig_atomic_t alarms;

static void on_alarm(int sig)
{
    alarms++;
}

/* A fast interval timer (SA_RESTART, as applications install theirs):
 * sockets with a receive or send timeout are not restarted by the kernel,
 * so every interrupted wait must be retried within the deadline. */
static void test_signals_retried(void **state)
{
    int fd = new_memfd(), got, failed = 0, rounds = 2000;
    char msg[512], last[512] = "";
    assert_int_equal(byval_broker_offer(fd), 0);
    byval_record_t rec = rec_of(&me, fd);
    struct sigaction sa = {.sa_handler = on_alarm, .sa_flags = SA_RESTART}, old;
    sigemptyset(&sa.sa_mask);
    assert_int_equal(sigaction(SIGALRM, &sa, &old), 0);
    struct itimerval it = {{0, 200}, {0, 200}}, off = {{0, 0}, {0, 0}};
    assert_int_equal(setitimer(ITIMER_REAL, &it, NULL), 0);
    for (int i = 0; i < rounds; i++) {
        if (fetch(&rec, &got, msg, sizeof(msg)) == BYVAL_OK)
            close(got);
        else
            failed++, memcpy(last, msg, sizeof(last));
    }
    setitimer(ITIMER_REAL, &off, NULL);
    sigaction(SIGALRM, &old, NULL);
    print_message("%d of %d fetches failed under %d SIGALRMs%s%s\n", failed, rounds,
                  (int)alarms, failed ? ", last: " : "", last);
    assert_true(alarms > 0);
    assert_int_equal(failed, 0);
    byval_broker_withdraw(fd);
    close(fd);
}

/* The request parser (pure): decided at the first wrong byte, READY only
 * for a whole request with a possible fd number. */
static void test_request_parser(void **state)
{
    struct broker_req req = {BROKER_MAGIC, 7, 1234, 0}, out;
    uint8_t b[sizeof(req) + 1];
    memcpy(b, &req, sizeof(req));
    for (size_t len = 0; len < sizeof(req); len++)
        assert_int_equal(byval_broker_req_parse(b, len, &out), BYVAL_BROKER_MORE);
    assert_int_equal(byval_broker_req_parse(b, sizeof(req), &out), BYVAL_BROKER_READY);
    assert_int_equal(out.fd, 7);
    assert_int_equal(out.fd_ino, 1234);
    assert_int_equal(byval_broker_req_parse(b, sizeof(b), &out), BYVAL_BROKER_BAD);
    req.tag = BYVAL_WIRE_MAX_TAG; /* the largest tag, then one past it */
    memcpy(b, &req, sizeof(req));
    assert_int_equal(byval_broker_req_parse(b, sizeof(req), &out), BYVAL_BROKER_READY);
    assert_true(out.tag == BYVAL_WIRE_MAX_TAG);
    req.tag = BYVAL_WIRE_MAX_TAG + 1;
    memcpy(b, &req, sizeof(req));
    assert_int_equal(byval_broker_req_parse(b, sizeof(req), &out), BYVAL_BROKER_BAD);
    req.tag = 0;
    b[0] ^= 0xff;
    assert_int_equal(byval_broker_req_parse(b, 1, &out), BYVAL_BROKER_BAD);
    req.fd = 0x80000000u;
    memcpy(b, &req, sizeof(req));
    assert_int_equal(byval_broker_req_parse(b, sizeof(req), &out), BYVAL_BROKER_BAD);
    /* A rescue names a number and nothing else. */
    struct broker_req rescue = {BROKER_MAGIC_RESCUE, 9, 0, 0};
    memcpy(b, &rescue, sizeof(rescue));
    for (size_t len = 0; len < sizeof(rescue); len++)
        assert_int_equal(byval_broker_req_parse(b, len, &out), BYVAL_BROKER_MORE);
    assert_int_equal(byval_broker_req_parse(b, sizeof(rescue), &out), BYVAL_BROKER_READY);
    assert_int_equal(out.magic, BROKER_MAGIC_RESCUE);
    assert_int_equal(out.fd, 9);
    rescue.fd_ino = 1;
    memcpy(b, &rescue, sizeof(rescue));
    assert_int_equal(byval_broker_req_parse(b, sizeof(rescue), &out), BYVAL_BROKER_BAD);
    rescue.fd_ino = 0;
    rescue.tag = 1;
    memcpy(b, &rescue, sizeof(rescue));
    assert_int_equal(byval_broker_req_parse(b, sizeof(rescue), &out), BYVAL_BROKER_BAD);
    b[3] = 0x77; /* neither magic's last byte */
    assert_int_equal(byval_broker_req_parse(b, 4, &out), BYVAL_BROKER_BAD);
}

/* Open n connections to rec's socket: even ones idle, odd ones with half
 * a valid request sent (half != 0). Returns how many are still pending
 * (no answer, not closed) after settle_ms. */
static int stall_open(const byval_record_t *rec, int *c, int n, int half, int settle_ms)
{
    struct sockaddr_un a;
    socklen_t alen = byval_broker_addr(&a, rec->boot, rec->pidns, rec->pid, rec->identity);
    struct broker_req req = {BROKER_MAGIC, rec->fd, rec->fd_ino, rec->tag};
    for (int i = 0; i < n; i++) {
        c[i] = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (c[i] < 0 || connect(c[i], (struct sockaddr *)&a, alen) != 0)
            return -1;
        if (half && (i & 1))
            (void)!send(c[i], &req, sizeof(req) / 2, MSG_NOSIGNAL);
    }
    poll(NULL, 0, settle_ms);
    int pending = 0;
    for (int i = 0; i < n; i++) {
        char b[16];
        ssize_t r = recv(c[i], b, sizeof(b), MSG_DONTWAIT);
        pending += r < 0 && errno == EAGAIN;
    }
    return pending;
}

/* Fork nproc stallers, each holding n connections; *pending_p: how many
 * of them all the exporter still holds open after 100 ms. */
static void stallers(const byval_record_t *rec, int nproc, int n, pid_t *pids, int *go_p,
                     int *pending_p)
{
    int p[2], go[2];
    assert_int_equal(pipe(p), 0);
    assert_int_equal(pipe(go), 0);
    for (int k = 0; k < nproc; k++) {
        pids[k] = fork();
        if (pids[k] == 0) {
            int c[64];
            char x;
            close(p[0]);
            close(go[1]);
            int pending = stall_open(rec, c, n, 1, 100);
            (void)!write(p[1], &pending, sizeof(pending));
            _exit(read(go[0], &x, 1) >= 0 ? 0 : 1); /* hold them until told */
        }
        assert_true(pids[k] > 0);
    }
    close(p[1]);
    close(go[0]);
    *pending_p = 0;
    for (int k = 0; k < nproc; k++) {
        int pending;
        assert_int_equal(read(p[0], &pending, sizeof(pending)), sizeof(pending));
        assert_true(pending >= 0);
        *pending_p += pending;
    }
    close(p[0]);
    *go_p = go[1];
}

static void stallers_end(pid_t *pids, int nproc, int go)
{
    close(go);
    for (int k = 0; k < nproc; k++)
        assert_int_equal(waitpid(pids[k], NULL, 0), pids[k]);
}

/* 20 fetches by a legitimate importer: all served, none slower than
 * max_ms. */
static void legit_fetches(const byval_record_t *rec, double max_ms)
{
    double worst = 0;
    char msg[512];
    for (int i = 0; i < 20; i++) {
        int got = -1;
        double t0 = now_ms();
        byval_status_t st = fetch(rec, &got, msg, sizeof(msg));
        double dt = now_ms() - t0;
        if (st != BYVAL_OK)
            print_message("fetch %d: %s\n", i, msg);
        assert_int_equal(st, BYVAL_OK);
        close(got);
        worst = dt > worst ? dt : worst;
    }
    print_message("20 fetches, slowest %.1f ms\n", worst);
    assert_true(worst < max_ms);
}

/* Idle and half-sent connections of another process of our uid (20 from
 * one, then 10 from each of 10) stall nobody: the exporter serves every
 * connection as its bytes arrive, holds at most 8 pending per peer process
 * and 64 in all, and drops the others at once. */
static void test_stalled_peers_stall_nobody(void **state)
{
    int fd = new_memfd(), go, pending;
    pid_t pids[10];
    assert_int_equal(byval_broker_offer(fd), 0);
    byval_record_t rec = rec_of(&me, fd);

    stallers(&rec, 1, 20, pids, &go, &pending);
    print_message("one peer, 20 stalled connections: %d held by the exporter\n", pending);
    legit_fetches(&rec, 250);
    stallers_end(pids, 1, go);
    assert_true(pending <= 8);

    stallers(&rec, 10, 10, pids, &go, &pending);
    print_message("10 peers, 10 stalled connections each: %d held by the exporter\n", pending);
    legit_fetches(&rec, 250);
    stallers_end(pids, 10, go);
    assert_true(pending <= 64);

    byval_broker_withdraw(fd);
    close(fd);
}

/* A process that stalls its own connections delays only itself, and no
 * longer than the exporter's per-connection deadline: its fetch is told
 * to retry, and is served once its stalled connections expire. */
static void test_own_stalls_delay_only_self(void **state)
{
    int fd = new_memfd(), c[20];
    assert_int_equal(byval_broker_offer(fd), 0);
    byval_record_t rec = rec_of(&me, fd);
    int pending = stall_open(&rec, c, 20, 1, 50);
    print_message("own 20 stalled connections: %d held by the exporter\n", pending);
    assert_true(pending <= 8);
    int got = -1;
    char msg[512];
    double t0 = now_ms();
    byval_status_t st = fetch(&rec, &got, msg, sizeof(msg));
    double dt = now_ms() - t0;
    print_message("fetch behind own stalls: %.0f ms: %s\n", dt, st == BYVAL_OK ? "ok" : msg);
    assert_int_equal(st, BYVAL_OK);
    assert_true(dt < 1500);
    close(got);
    for (int i = 0; i < 20; i++)
        close(c[i]);
    byval_broker_withdraw(fd);
    close(fd);
}

/* Importers on several threads while another offers and withdraws. */
static int shared_fd;

static void *importer(void *arg)
{
    byval_record_t rec = rec_of(&me, shared_fd);
    for (int i = 0; i < 100; i++) {
        int got;
        if (fetch(&rec, &got, NULL, 0) != BYVAL_OK)
            return (void *)1;
        close(got);
    }
    return NULL;
}

static void test_threads(void **state)
{
    shared_fd = new_memfd();
    int other = new_memfd();
    assert_int_equal(byval_broker_offer(shared_fd), 0);
    churn_stop = 0;
    pthread_t t[4], ch;
    assert_int_equal(pthread_create(&ch, NULL, churn, &other), 0);
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&t[i], NULL, importer, NULL), 0);
    for (int i = 0; i < 4; i++) {
        void *r;
        pthread_join(t[i], &r);
        assert_null(r);
    }
    __atomic_store_n(&churn_stop, 1, __ATOMIC_RELAXED);
    pthread_join(ch, NULL);
    byval_broker_withdraw(shared_fd);
    close(shared_fd);
    close(other);
}

/* SipHash-2-4's reference vector (key 00..0f, message 00..0e), and the
 * tags: stable in one process, another key in a fork child, 40 bits. */
static void test_tags(void **state)
{
    (void)state;
    uint8_t k[16], m[15];
    for (int i = 0; i < 16; i++)
        k[i] = (uint8_t)i;
    for (int i = 0; i < 15; i++)
        m[i] = (uint8_t)i;
    assert_true(byval_siphash24(k, m, 15) == 0xa129ca6149be45e5ULL);
    assert_true(byval_siphash24(k, m, 0) == 0x726fdb47dd0e0e31ULL);
    uint64_t t, again, other;
    assert_int_equal(byval_tag_make(7, 1234, &t), 0);
    assert_int_equal(byval_tag_make(7, 1234, &again), 0);
    assert_int_equal(byval_tag_make(8, 1234, &other), 0);
    assert_true(t == again && t != other && t != 0 && t <= BYVAL_WIRE_MAX_TAG);
    assert_true(byval_tag_check(7, 1234, t));
    assert_false(byval_tag_check(7, 1235, t));
    assert_false(byval_tag_check(7, 1234, 0));
    assert_false(byval_tag_check(7, 1234, t ^ 1));
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t pid = fork();
    if (pid == 0) {
        uint64_t c = 0;
        int ok = !byval_tag_check(7, 1234, t) && byval_tag_make(7, 1234, &c) == 0 && c != t;
        _exit(write(p[1], &ok, sizeof(ok)) == sizeof(ok) ? 0 : 1);
    }
    int ok = 0;
    close(p[1]);
    assert_int_equal(read(p[0], &ok, sizeof(ok)), (ssize_t)sizeof(ok));
    close(p[0]);
    waitpid(pid, NULL, 0);
    assert_true(ok); /* the child's key is its own */
}

/* The group rule: a peer not of the uid served gets an export only with
 * its tag (-EACCES without, nothing else); an open offer needs none; a
 * peer of our uid needs none. */
static void test_group_needs_tag(void **state)
{
    (void)state;
    int fd = new_memfd(), reg = new_memfd(), dup;
    byval_record_t rec = rec_of(&me, fd);
    assert_int_equal(byval_record_tag(&rec), 0);
    assert_int_equal(byval_broker_offer(fd), 0);
    assert_int_equal(byval_broker_offer_open(reg), 0);
    uint64_t before = byval_broker_untagged();
    struct broker_req req = {BROKER_MAGIC, rec.fd, rec.fd_ino, 0};
    assert_int_equal(byval_broker_lookup(&req, 0, &dup), -EACCES);
    req.tag = rec.tag ^ 0x10;
    assert_int_equal(byval_broker_lookup(&req, 0, &dup), -EACCES);
    assert_int_equal(dup, -1);
    assert_true(byval_broker_untagged() == before + 2);
    req.tag = rec.tag;
    assert_int_equal(byval_broker_lookup(&req, 0, &dup), 0);
    close(dup);
    req.tag = 0;
    assert_int_equal(byval_broker_lookup(&req, 1, &dup), 0); /* our uid */
    close(dup);
    struct broker_req open_req = {BROKER_MAGIC, (uint32_t)reg, (uint32_t)byval_fd_inode(reg), 0};
    assert_int_equal(byval_broker_lookup(&open_req, 0, &dup), 0);
    close(dup);
    /* A tag is for its own (fd, inode): another export's is refused. */
    int fd2 = new_memfd();
    byval_record_t rec2 = rec_of(&me, fd2);
    assert_int_equal(byval_record_tag(&rec2), 0);
    assert_int_equal(byval_broker_offer(fd2), 0);
    req = (struct broker_req){BROKER_MAGIC, rec2.fd, rec2.fd_ino, rec.tag};
    assert_int_equal(byval_broker_lookup(&req, 0, &dup), -EACCES);
    byval_broker_withdraw(fd);
    byval_broker_withdraw(fd2);
    byval_broker_withdraw(reg);
    close(fd);
    close(fd2);
    close(reg);
}

int main(void)
{
    if (byval_self_get(&me) != 0) {
        fprintf(stderr, "cannot describe this process\n");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_request_parser),
        cmocka_unit_test(test_tags),
        cmocka_unit_test(test_group_needs_tag),
        cmocka_unit_test(test_roundtrip_and_pidfd),
        cmocka_unit_test(test_unknown_withdrawn_reused),
        cmocka_unit_test(test_stale_number_never_serves_newcomer),
        cmocka_unit_test(test_reoffer_records_new_object),
        cmocka_unit_test(test_refused_uid_counted),
        cmocka_unit_test(test_no_listener_fast_and_clear),
        cmocka_unit_test(test_fork_child_drops_parents_socket),
        cmocka_unit_test(test_fork_while_busy),
        cmocka_unit_test(test_impostor_refused_unasked),
        cmocka_unit_test(test_bounded_by_deadline),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_extra_fds_closed),
        cmocka_unit_test(test_signals_retried),
        cmocka_unit_test(test_stalled_peers_stall_nobody),
        cmocka_unit_test(test_own_stalls_delay_only_self),
    };
    /* A server for the tests that expect an answer from this process. */
    int keep = memfd_create("keep", MFD_CLOEXEC);
    if (keep < 0 || byval_broker_offer(keep) != 0) {
        fprintf(stderr, "cannot start the broker: %s\n", strerror(errno));
        return 1;
    }
    return cmocka_run_group_tests_name("broker", tests, NULL, NULL);
}
