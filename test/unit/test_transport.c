/* SPDX-License-Identifier: MIT */
/*
 * test_transport.c - pid translation (handles/resolve.c) and the
 * transport policy (handles/resolve.c): an exporter in a child pid
 * namespace (needs root), and an importer whose pidfd_getfd a seccomp
 * filter denies, as under Yama or a container profile.
 */
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "handles/broker.h"
#include "handles/fdcheck.h"
#include "handles/resolve.h"
#include "handles/sys.h"
#include "handles/transport.h"
#include "handles/transport.h"

static byval_self_t me;

const char *__tsan_default_options(void);
const char *__tsan_default_options(void)
{
    return "die_after_fork=0";
}

static byval_record_t rec_of(const byval_self_t *self, int fd)
{
    byval_record_t rec = {.kind = BYVAL_KIND_ZE_MEM, .fd = (uint32_t)fd, .size = 8192};
    byval_record_set_exporter(&rec, self);
    rec.fd_ino = (uint32_t)byval_fd_inode(fd);
    return rec;
}

/* The exporter: pid 1 of a new pid namespace (a grandchild), which offers
 * a memfd and sends its record. Returns the intermediate child's pid. */
static pid_t ns_exporter(byval_record_t *rec_p, int *go_p, pid_t *host_pid_p)
{
    /* p: the grandchild's pid from the intermediate; r: the record from
     * the grandchild. One pipe for both would interleave them. */
    int p[2], r[2], go[2];
    assert_int_equal(pipe(p), 0);
    assert_int_equal(pipe(r), 0);
    assert_int_equal(pipe(go), 0);
    pid_t mid = fork();
    if (mid == 0) {
        close(p[0]);
        close(r[0]);
        close(go[1]); /* so that read(go[0]) ends if the test dies */
        if (unshare(CLONE_NEWPID) != 0)
            _exit(77);
        pid_t g = fork();
        if (g == 0) {
            byval_self_t s;
            char c;
            byval_self_reset();
            int fd = memfd_create("nsexp", 0);
            if (fd < 0 || ftruncate(fd, 8192) != 0 || byval_self_get(&s) != 0 ||
                byval_broker_offer(fd) != 0)
                _exit(90);
            byval_record_t rec = rec_of(&s, fd);
            if (write(r[1], &rec, sizeof(rec)) != (ssize_t)sizeof(rec))
                _exit(91);
            _exit(read(go[0], &c, 1) == 1 ? 0 : 92);
        }
        if (write(p[1], &g, sizeof(g)) != (ssize_t)sizeof(g)) /* g: our namespace's pid */
            _exit(93);
        int ws;
        waitpid(g, &ws, 0);
        _exit(WIFEXITED(ws) ? WEXITSTATUS(ws) : 94);
    }
    close(p[1]);
    close(r[1]);
    close(go[0]);
    *go_p = go[1];
    if (read(p[0], host_pid_p, sizeof(*host_pid_p)) != (ssize_t)sizeof(*host_pid_p) ||
        read(r[0], rec_p, sizeof(*rec_p)) != (ssize_t)sizeof(*rec_p)) {
        close(p[0]);
        close(r[0]);
        close(go[1]);
        waitpid(mid, NULL, 0);
        return -1; /* no CAP_SYS_ADMIN: unshare refused */
    }
    close(p[0]);
    close(r[0]);
    return mid;
}

static void reap(pid_t pid, int go)
{
    int ws;
    (void)!write(go, "x", 1);
    close(go);
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
}

static byval_record_t xlate_rec;
static pid_t xlate_want;

static void *translator(void *arg)
{
    for (int i = 0; i < 50; i++) {
        uint32_t local = 0;
        char msg[256];
        if (byval_ns_translate(&xlate_rec, &local, msg, sizeof(msg)) != BYVAL_OK ||
            local != (uint32_t)xlate_want)
            return (void *)1;
    }
    return NULL;
}

static void test_child_namespace(void **state)
{
    byval_record_t rec;
    int go;
    pid_t host_pid;
    pid_t mid = ns_exporter(&rec, &go, &host_pid);
    if (mid < 0) {
        printf("skipped: cannot create a pid namespace here\n");
        skip();
    }
    assert_int_equal(rec.pid, 1);
    assert_int_not_equal(rec.pidns, me.pidns);
    uint32_t local = 0;
    char msg[512];
    assert_int_equal(byval_ns_translate(&rec, &local, msg, sizeof(msg)), BYVAL_OK);
    assert_int_equal(local, host_pid);
    /* Concurrent translations (the NSpid parser shares no state). */
    xlate_rec = rec;
    xlate_want = host_pid;
    pthread_t t[6];
    for (int i = 0; i < 6; i++)
        assert_int_equal(pthread_create(&t[i], NULL, translator, NULL), 0);
    for (int i = 0; i < 6; i++) {
        void *r;
        pthread_join(t[i], &r);
        assert_null(r);
    }
    /* No such pid there, or no such namespace below us. */
    byval_record_t none = rec;
    none.pid = 2;
    assert_int_equal(byval_ns_translate(&none, &local, msg, sizeof(msg)), BYVAL_E_FOREIGN_NS);
    none = rec;
    none.pidns ^= 0x5a5a;
    assert_int_equal(byval_ns_translate(&none, &local, msg, sizeof(msg)), BYVAL_E_FOREIGN_NS);
    assert_non_null(strstr(msg, "not below ours"));
    /* The policy: pidfd only, with translation, twice (then remembered). */
    byval_fetch_info_t info;
    for (int mode = BYVAL_MODE_AUTO; mode <= BYVAL_MODE_PIDFD; mode++) {
        for (int i = 0; i < 2; i++) {
            int fd, pidfd;
            assert_int_equal(byval_transport_fetch_fd(&rec, &me, mode, &fd, &pidfd, &info, msg,
                                                      sizeof(msg)),
                             BYVAL_OK);
            assert_int_equal(info.via, BYVAL_VIA_XLATED);
            assert_int_equal(info.local_pid, host_pid);
            assert_int_equal(byval_fd_inode(fd) & 0xffffffffu, rec.fd_ino);
            close(fd);
            close(pidfd);
        }
    }
    reap(mid, go);
}

/* Install a filter that answers pidfd_getfd with EPERM (this thread and
 * what it forks). 0, or -1 where seccomp is not available. */
#if defined(__x86_64__)
#define TEST_AUDIT_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define TEST_AUDIT_ARCH AUDIT_ARCH_AARCH64
#endif
static int deny_getfd(void)
{
#ifndef TEST_AUDIT_ARCH
    return -1;
#else
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, TEST_AUDIT_ARCH, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS), /* a compat arch: never guess */
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_pidfd_getfd, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {.len = sizeof(f) / sizeof(f[0]), .filter = f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        return -1;
    return (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) == 0 ? 0 : -1;
#endif
}

/* Steps of the denied importer; its exit code is the first that failed. */
static int denied_importer(const byval_record_t *rec)
{
    byval_self_t s;
    byval_fetch_info_t info;
    char msg[1024];
    int fd, pidfd, more;
    byval_self_reset();
    if (byval_self_get(&s) != 0 || deny_getfd() != 0)
        return 77;
    if (byval_transport_fetch_fd(rec, &s, BYVAL_MODE_PIDFD, &fd, &pidfd, &info, msg,
                                 sizeof(msg)) != BYVAL_E_PERM ||
        !strstr(msg, "hint"))
        return 10; /* pidfd only: refused, with the hint, never the socket */
    if (byval_transport_fetch_fd(rec, &s, BYVAL_MODE_AUTO, &fd, &pidfd, &info, msg,
                                 sizeof(msg)) != BYVAL_OK ||
        info.via != BYVAL_VIA_SOCKET || !info.fell_back || !strstr(info.why, "pidfd_getfd"))
        return 11; /* auto: falls back, says why */
    if (byval_transport_fetch_more_fd(rec, BYVAL_MODE_AUTO, pidfd, rec->fd, rec->fd_ino, rec->size,
                                      &more, msg, sizeof(msg)) != BYVAL_OK)
        return 12; /* more fds: the transport that worked */
    close(more);
    close(fd);
    if (pidfd >= 0)
        close(pidfd);
    if (byval_transport_fetch_fd(rec, &s, BYVAL_MODE_AUTO, &fd, &pidfd, &info, msg,
                                 sizeof(msg)) != BYVAL_OK ||
        info.via != BYVAL_VIA_SOCKET || info.fell_back)
        return 13; /* remembered: straight to the socket */
    close(fd);
    if (pidfd >= 0)
        close(pidfd);
    if (byval_transport_fetch_fd(rec, &s, BYVAL_MODE_SOCKET, &fd, &pidfd, &info, msg,
                                 sizeof(msg)) != BYVAL_OK)
        return 14;
    close(fd);
    return 0;
}

static void test_denied_importer(void **state)
{
    int fd = memfd_create("exp", MFD_CLOEXEC);
    assert_int_equal(ftruncate(fd, 8192), 0);
    assert_int_equal(byval_broker_offer(fd), 0);
    byval_record_t rec = rec_of(&me, fd);
    pid_t c = fork();
    if (c == 0)
        _exit(denied_importer(&rec));
    int ws;
    assert_int_equal(waitpid(c, &ws, 0), c);
    assert_true(WIFEXITED(ws));
    if (WEXITSTATUS(ws) == 77)
        skip();
    assert_int_equal(WEXITSTATUS(ws), 0);
    byval_broker_withdraw(fd);
    close(fd);
}

/* A handle from another host or boot is refused before anything else:
 * no socket is asked, whatever the mode. */
static void test_foreign_host_first(void **state)
{
    int fd = memfd_create("exp", MFD_CLOEXEC);
    assert_int_equal(byval_broker_offer(fd), 0);
    byval_record_t rec = rec_of(&me, fd);
    rec.boot ^= 1;
    uint64_t served0, served1, refused;
    byval_broker_counts(&served0, &refused);
    for (int mode = BYVAL_MODE_AUTO; mode <= BYVAL_MODE_SOCKET; mode++) {
        int got, pidfd;
        char msg[512];
        assert_int_equal(byval_transport_fetch_fd(&rec, &me, mode, &got, &pidfd, NULL, msg,
                                                  sizeof(msg)),
                         BYVAL_E_FOREIGN_HOST);
        assert_int_equal(got, -1);
        assert_non_null(strstr(msg, "another host or boot"));
    }
    byval_broker_counts(&served1, &refused);
    assert_int_equal(served1, served0);
    byval_broker_withdraw(fd);
    close(fd);
}

int main(void)
{
    if (byval_self_get(&me) != 0) {
        fprintf(stderr, "cannot describe this process\n");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_child_namespace),
        cmocka_unit_test(test_denied_importer),
        cmocka_unit_test(test_foreign_host_first),
    };
    return cmocka_run_group_tests_name("transport", tests, NULL, NULL);
}
