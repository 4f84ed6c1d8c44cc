/* SPDX-License-Identifier: MIT */
/*
 * test_fdcheck.c - what a fetched fd may be, and that finding out never
 * blocks or disturbs the exporter (handles/fdcheck.c, through
 * byval_resolve_fd and the socket fallback).
 *
 * A forged handle can name any fd of any process the importer may ptrace:
 * a lock file, a file whose offset the exporter shares, a file on a FUSE
 * file system whose daemon stalls. None of them may be duplicated, and no
 * check may wait on a foreign file system. The FUSE cases mount a tiny
 * in-test FUSE daemon (raw /dev/fuse protocol, no libfuse) in a private
 * mount namespace: they need root and /dev/fuse, and skip without.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/fuse.h>
#include <poll.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "handles/broker_internal.h"
#include "handles/transport.h"
#include "handles/fdcheck.h"
#include "handles/resolve.h"
#include "handles/sys.h"
#include "handles/transport.h"
#include "test/unit/test_fdcheck.h"
#include "test/unit/test_skip.h"

static byval_self_t me;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* ---- a process holding one fd, described by a record ---------------- */

typedef struct holder {
    pid_t pid;
    int go; /* a byte (or EOF) lets it exit */
    byval_record_t rec;
} holder_t;

/* Fork a process that opens path (or, path NULL, a memfd of 8192 bytes),
 * seeks to offset 5, takes no lock, and describes that fd in a record of
 * kind ZE_MEM (its inode, its size). */
static void holder_start(holder_t *h, const char *path, int flags)
{
    int p[2], go[2];
    assert_int_equal(pipe(p), 0);
    assert_int_equal(pipe(go), 0);
    h->pid = fork();
    assert_true(h->pid >= 0);
    if (h->pid == 0) {
        byval_self_t s;
        struct stat st;
        char c;
        close(p[0]);
        close(go[1]);
        byval_self_reset();
        int fd = path ? open(path, flags) : memfd_create("holder", 0);
        if (fd < 0 || (!path && ftruncate(fd, 8192) != 0) || fstat(fd, &st) != 0 ||
            byval_self_get(&s) != 0)
            _exit(90);
        (void)lseek(fd, 5, SEEK_SET);
        byval_record_t rec = {.kind = BYVAL_KIND_ZE_MEM, .fd = (uint32_t)fd,
                              .fd_ino = (uint32_t)st.st_ino, .size = 8192};
        byval_record_set_exporter(&rec, &s);
        if (write(p[1], &rec, sizeof(rec)) != (ssize_t)sizeof(rec))
            _exit(91);
        (void)!read(go[0], &c, 1);
        _exit(lseek(fd, 0, SEEK_CUR) == 5 ? 0 : 92); /* its offset untouched */
    }
    close(p[1]);
    close(go[0]);
    h->go = go[1];
    assert_int_equal(read(p[0], &h->rec, sizeof(h->rec)), sizeof(h->rec));
    close(p[0]);
}

/* Let it exit; 0 if its file offset was never moved. */
static int holder_stop(holder_t *h)
{
    int ws;
    close(h->go);
    assert_int_equal(waitpid(h->pid, &ws, 0), h->pid);
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
}

static int nfds(void)
{
    int n = 0;
    for (int fd = 0; fd < 1024; fd++)
        n += fcntl(fd, F_GETFD) >= 0;
    return n;
}

/* ---- regular files: refused before any duplicate --------------------- */

/* The case: a forged handle names another process's lock file.
 * Duplicating it and closing the duplicate would drop OUR POSIX locks on
 * that file; lseek on it would move the holder's shared offset. */
static void test_lock_file_never_duplicated(void **state)
{
    char path[] = "/tmp/byval-lock-XXXXXX", msg[512];
    int lfd = mkstemp(path);
    assert_true(lfd >= 0);
    assert_int_equal(ftruncate(lfd, 8192), 0);
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    assert_int_equal(fcntl(lfd, F_SETLK, &fl), 0); /* our lock */
    holder_t h;
    holder_start(&h, path, O_RDWR);
    int fd = 77, before = nfds();
    byval_status_t st = byval_resolve_fd(&h.rec, &me, &fd, NULL, msg, sizeof(msg));
    print_message("%s: %s\n", byval_status_str(st), msg);
    assert_int_equal(st, BYVAL_E_FDKIND);
    assert_int_equal(fd, -1);
    assert_int_equal(nfds(), before);
    assert_non_null(strstr(msg, path)); /* says what the fd is */
    assert_non_null(strstr(msg, "not duplicated"));
    /* Our lock is still ours: another process cannot take it. */
    pid_t c = fork();
    if (c == 0) {
        int o = open(path, O_RDWR);
        struct flock t = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
        _exit(o >= 0 && fcntl(o, F_SETLK, &t) != 0 ? 0 : 1);
    }
    int ws;
    assert_int_equal(waitpid(c, &ws, 0), c);
    assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
    assert_int_equal(holder_stop(&h), 0); /* its offset was never moved */
    close(lfd);
    unlink(path);
}

/* Not a regular file either: a pipe, a directory, a socket. */
static void test_other_kinds_refused(void **state)
{
    static const char *paths[] = {"/dev/null", "/tmp", "/proc/self/stat"};
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
        holder_t h;
        char msg[512];
        int fd = 77;
        holder_start(&h, paths[i], O_RDONLY);
        byval_status_t st = byval_resolve_fd(&h.rec, &me, &fd, NULL, msg, sizeof(msg));
        print_message("%s: %s: %s\n", paths[i], byval_status_str(st), msg);
        assert_int_equal(st, BYVAL_E_FDKIND);
        assert_int_equal(fd, -1);
        holder_stop(&h);
    }
}

/* What drivers hand out is accepted: a memfd (the test drivers' memory),
 * its size checked, its offset untouched. */
static void test_memfd_accepted(void **state)
{
    holder_t h;
    char msg[512];
    int fd = -1;
    holder_start(&h, NULL, 0);
    assert_int_equal(byval_resolve_fd(&h.rec, &me, &fd, NULL, msg, sizeof(msg)), BYVAL_OK);
    assert_int_equal(lseek(fd, 0, SEEK_CUR), 5); /* the shared offset, as the holder left it */
    close(fd);
    byval_record_t r = h.rec;
    r.size = 3 * 4096;
    assert_int_equal(byval_resolve_fd(&r, &me, &fd, NULL, msg, sizeof(msg)), BYVAL_E_FDKIND);
    assert_non_null(strstr(msg, "pages"));
    assert_int_equal(holder_stop(&h), 0);
}

/* ---- FUSE: a daemon that stops answering (test_fdcheck_fuse.c) ------ */

static const char *fuse_why;

/* Resolve rec in a child (chrooted into jail when given) while the daemon
 * stalls; a child stuck on the file system is released after 3 s by
 * killing the daemon. Returns ms taken; *st_p the status, *asked_p how
 * many requests reached the stalled daemon. */
static double fuse_resolve(fuse_world_t *w, const byval_record_t *rec, const char *jail,
                           int socket_only, byval_status_t *st_p, int *asked_p, char *msg,
                           size_t msglen)
{
    int p[2], go[2];
    assert_int_equal(pipe(p), 0);
    assert_int_equal(pipe(go), 0);
    pid_t c = fork();
    if (c == 0) {
        char m[512] = "", x;
        int fd = -1;
        close(go[1]);
        if (read(go[0], &x, 1) != 1 || (jail && (chroot(jail) != 0 || chdir("/") != 0)))
            _exit(90);
        int pidfd = -1;
        byval_status_t st =
            socket_only ? byval_transport_fetch_fd(rec, &me, BYVAL_MODE_SOCKET, &fd, &pidfd, NULL,
                                                   m, sizeof(m))
                        : byval_resolve_fd(rec, &me, &fd, NULL, m, sizeof(m));
        if (fd >= 0)
            close(fd);
        if (pidfd >= 0)
            close(pidfd);
        (void)!write(p[1], &st, sizeof(st));
        (void)!write(p[1], m, sizeof(m));
        _exit(0);
    }
    close(p[1]);
    close(go[0]);
    assert_int_equal(write(w->ctl, &c, sizeof(c)), sizeof(c)); /* stall the child from now on */
    usleep(20000);
    double t0 = now_ms();
    assert_int_equal(write(go[1], "g", 1), 1);
    close(go[1]);
    struct pollfd pf = {p[0], POLLIN, 0};
    int released = poll(&pf, 1, 3000) == 0;
    if (released) {
        kill(w->daemon, SIGKILL); /* the child is stuck in the kernel, waiting on it */
        waitpid(w->daemon, NULL, 0);
        w->daemon = -1;
    }
    assert_int_equal(read(p[0], st_p, sizeof(*st_p)), sizeof(*st_p));
    char m[512];
    assert_int_equal(read(p[0], m, sizeof(m)), sizeof(m));
    snprintf(msg, msglen, "%s", m);
    double dt = now_ms() - t0;
    usleep(100000); /* what the child's other threads ask meanwhile */
    *asked_p = 0;
    int k;
    while (poll(&(struct pollfd){w->report, POLLIN, 0}, 1, 0) == 1 &&
           read(w->report, &k, sizeof(k)) == sizeof(k))
        *asked_p = k;
    if (w->daemon > 0) { /* a child thread may wait on it: release it so it can exit */
        kill(w->daemon, SIGKILL);
        waitpid(w->daemon, NULL, 0);
        w->daemon = -1;
    }
    waitpid(c, NULL, 0);
    close(p[0]);
    return dt;
}

/* What the FUSE cases require of a resolve: refused as another kind of
 * file, at once. */
static void fuse_refused(double dt, byval_status_t st)
{
    assert_true(dt < 500);
    assert_int_equal(st, BYVAL_E_FDKIND);
}

/* A process holds a file on FUSE (mounted as mnt) and a handle names it:
 * resolved (through /dmabuf:x inside a chroot when jailed), the open is
 * refused at once and the stalled daemon is never asked anything. */
static void fuse_held(const char *mnt, int jailed, const char *what)
{
    fuse_world_t w;
    fuse_why = fuse_up(&w, mnt);
    BYVAL_NEED(fuse_why);
    char path[128], msg[512];
    snprintf(path, sizeof(path), "%s/f", w.mnt);
    holder_t h;
    holder_start(&h, path, O_RDWR);
    byval_status_t st;
    int asked;
    double dt = fuse_resolve(&w, &h.rec, jailed ? w.root : NULL, 0, &st, &asked, msg, sizeof(msg));
    print_message("%s: %.2f ms, %s, %d requests to the daemon: %s\n", what, dt,
                  byval_status_str(st), asked, msg);
    holder_stop(&h);
    fuse_down(&w);
    fuse_refused(dt, st);
    assert_int_equal(asked, 0);
}

/* A forged handle names a file on FUSE whose daemon then stops answering. */
static void test_fuse_stalled_daemon(void **state)
{
    fuse_held("mnt", 0, "FUSE, stalled daemon");
}

/* The same file seen through a path that reads like a dma-buf's
 * ("/dmabuf:x/f" inside a chroot): the link text is no proof, the checks
 * after it never reach the daemon either. */
static void test_fuse_posing_as_dmabuf(void **state)
{
    fuse_held("dmabuf:x", 1, "FUSE posing as /dmabuf:x/f");
}

/* A hostile exporter of our uid answers over the socket fallback with an
 * fd on that FUSE file system: the importer refuses it without asking the
 * daemon, and closes it off its own thread (the FLUSH of a close waits
 * uninterruptibly for a daemon that never answers). */
static void test_fuse_fd_over_socket(void **state)
{
    fuse_world_t w;
    fuse_why = fuse_up(&w, "mnt");
    BYVAL_NEED(fuse_why);
    char path[128], msg[512];
    snprintf(path, sizeof(path), "%s/f", w.mnt);
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t broker = fork();
    if (broker == 0) {
        byval_self_t s;
        struct sockaddr_un a;
        struct stat st;
        close(p[0]);
        byval_self_reset();
        int fd = open(path, O_RDWR);
        int l = socket(AF_UNIX, SOCK_STREAM, 0);
        if (fd < 0 || fstat(fd, &st) != 0 || byval_self_get(&s) != 0 ||
            bind(l, (struct sockaddr *)&a,
                 byval_broker_addr(&a, s.boot, s.pidns, s.pid, s.identity)) != 0 ||
            listen(l, 4) != 0)
            _exit(90);
        byval_record_t rec = {.kind = BYVAL_KIND_ZE_MEM, .fd = (uint32_t)fd,
                              .fd_ino = (uint32_t)st.st_ino, .size = 8192};
        byval_record_set_exporter(&rec, &s);
        (void)!write(p[1], &rec, sizeof(rec));
        for (;;) {
            int c = accept(l, NULL, NULL);
            struct broker_req req;
            struct broker_rsp rsp = {BROKER_MAGIC, 0};
            union {
                char buf[CMSG_SPACE(sizeof(int))];
                struct cmsghdr align;
            } u;
            memset(&u, 0, sizeof(u));
            (void)!recv(c, &req, sizeof(req), MSG_WAITALL);
            struct iovec iov = {.iov_base = &rsp, .iov_len = sizeof(rsp)};
            struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                                .msg_controllen = sizeof(u.buf)};
            struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
            cm->cmsg_level = SOL_SOCKET;
            cm->cmsg_type = SCM_RIGHTS;
            cm->cmsg_len = CMSG_LEN(sizeof(int));
            memcpy(CMSG_DATA(cm), &fd, sizeof(int));
            (void)!sendmsg(c, &mh, MSG_NOSIGNAL);
            close(c);
        }
    }
    close(p[1]);
    byval_record_t rec;
    assert_int_equal(read(p[0], &rec, sizeof(rec)), sizeof(rec));
    close(p[0]);
    byval_status_t st;
    int asked;
    double dt = fuse_resolve(&w, &rec, NULL, 1, &st, &asked, msg, sizeof(msg));
    print_message("FUSE fd sent over the socket: %.2f ms, %s, %d requests to the daemon (off "
                  "the caller's thread): %s\n", dt, byval_status_str(st), asked, msg);
    kill(broker, SIGKILL);
    waitpid(broker, NULL, 0);
    fuse_down(&w);
    fuse_refused(dt, st);
}

int main(void)
{
    if (byval_self_get(&me) != 0) {
        fprintf(stderr, "cannot describe this process\n");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_memfd_accepted),
        cmocka_unit_test(test_lock_file_never_duplicated),
        cmocka_unit_test(test_other_kinds_refused),
        cmocka_unit_test(test_fuse_stalled_daemon),
        cmocka_unit_test(test_fuse_posing_as_dmabuf),
        cmocka_unit_test(test_fuse_fd_over_socket),
    };
    return cmocka_run_group_tests_name("fdcheck", tests, NULL, NULL);
}
