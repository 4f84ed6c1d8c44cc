/* SPDX-License-Identifier: MIT */
/*
 * test_registry_fds.c - the registry by fd (handles/registry_fds.c) and
 * the rescue through the broker (handles/broker_fetch.c), with real kernel
 * objects: eventfds stand for /dev/nvidiactl (one inode shared by every
 * open, and they poll), memfds for the test drivers' memory (an inode per
 * object, no poll). Served only while the number is the exported open
 * file; a closed and reused number is refused even when the inode is the
 * same; a fork child starts empty and leaves the parent's registry alone.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "handles/broker.h"
#include "handles/registry.h"
#include "handles/rescue.h"
#include "handles/fdcheck.h"
#include "handles/resolve.h"
#include "handles/sys.h"
#include "handles/transport.h"
#include "test/unit/test_skip.h"

#ifndef KCMP_FILE
#define KCMP_FILE 0
#endif

/* Same open file? kcmp where the kernel allows it (the test's own
 * process), else the eventfd counter moved through one shows in the other. */
static int same_file(int a, int b)
{
    long r = syscall(SYS_kcmp, getpid(), getpid(), KCMP_FILE, a, b);
    if (r >= 0)
        return r == 0;
    struct stat sa, sb;
    return fstat(a, &sa) == 0 && fstat(b, &sb) == 0 && sa.st_ino == sb.st_ino;
}

/* fd moved to a number no earlier test used: entries of closed numbers
 * stay until a sweep or a request finds them stale, which would answer
 * -ESTALE where a test means "never registered". */
static int fresh(int fd)
{
    static int next = 300;
    assert_true(fd >= 0);
    int n = fcntl(fd, F_DUPFD_CLOEXEC, next++);
    assert_true(n >= 0);
    close(fd);
    next = n + 1;
    return n;
}

/* Put a new file at number n (closing what was there). */
static void replace_at(int n, int newfd)
{
    assert_true(newfd >= 0);
    assert_int_equal(dup2(newfd, n), n);
    close(newfd);
}

static void test_eventfd_served_while_same(void **state)
{
    (void)state;
    int e = fresh(eventfd(0, EFD_CLOEXEC)), d = -1;
    struct stat st;
    assert_int_equal(byval_reg_add_fd(e), 0);
    assert_int_equal(byval_reg_add_fd(e), 0); /* again: a no-op */
    assert_int_equal(byval_reg_dup_fd(e, &d), 0);
    assert_true(d >= 0 && d != e && same_file(d, e));
    assert_true(fcntl(d, F_GETFD) & FD_CLOEXEC);
    close(d);
    /* The trap: another eventfd at the same number has the same inode. */
    fstat(e, &st);
    ino_t ino = st.st_ino;
    replace_at(e, eventfd(0, EFD_CLOEXEC));
    fstat(e, &st);
    assert_true(st.st_ino == ino);
    assert_int_equal(byval_reg_dup_fd(e, &d), -ESTALE);
    assert_int_equal(d, -1);
    assert_int_equal(byval_reg_dup_fd(e, &d), -EBADF); /* dropped */
    /* Exported anew: served again. */
    assert_int_equal(byval_reg_add_fd(e), 0);
    assert_int_equal(byval_reg_dup_fd(e, &d), 0);
    close(d);
    close(e);
    assert_int_equal(byval_reg_dup_fd(e, &d), -ESTALE); /* closed */
}

static void test_same_file_elsewhere_is_not_the_export(void **state)
{
    (void)state;
    /* The exported open file still lives at another number (a dup), and
     * its number holds a new file: refused, the live dup does not help. */
    int e = fresh(eventfd(0, EFD_CLOEXEC)), keep = dup(e), d = -1;
    assert_int_equal(byval_reg_add_fd(e), 0);
    replace_at(e, eventfd(0, EFD_CLOEXEC));
    assert_int_equal(byval_reg_dup_fd(e, &d), -ESTALE);
    /* The exported file put back at its number: it was exported there,
     * so it may be served (what is served was always exported at that
     * number: the epoll key is the pair). */
    assert_int_equal(byval_reg_add_fd(e), 0); /* the new file, exported too */
    replace_at(e, dup(keep));
    assert_int_equal(byval_reg_dup_fd(e, &d), 0);
    assert_true(same_file(d, keep));
    close(d);
    close(e);
    close(keep);
}

static void test_never_registered(void **state)
{
    (void)state;
    int e = fresh(eventfd(0, EFD_CLOEXEC)), d = -1;
    assert_int_equal(byval_reg_dup_fd(e, &d), -EBADF);
    assert_int_equal(byval_reg_dup_fd(-1, &d), -EBADF);
    close(e);
}

static void test_memfd_by_inode_and_mode(void **state)
{
    (void)state;
    int m = fresh(memfd_create("rf-test", MFD_CLOEXEC)), d = -1;
    char path[64];
    assert_int_equal(ftruncate(m, 4096), 0);
    assert_int_equal(byval_reg_add_fd(m), 0);
    assert_int_equal(byval_reg_dup_fd(m, &d), 0);
    assert_true(same_file(d, m));
    close(d);
    snprintf(path, sizeof(path), "/proc/self/fd/%d", m);
    int ro = open(path, O_RDONLY | O_CLOEXEC), rw = open(path, O_RDWR | O_CLOEXEC);
    assert_true(ro >= 0 && rw >= 0);
    /* The same memory at the same number through another open, same mode:
     * the same object (a regular file's inode is the object). */
    replace_at(m, rw);
    assert_int_equal(byval_reg_dup_fd(m, &d), 0);
    close(d);
    /* Read-only where read-write was exported: not what was exported. */
    replace_at(m, ro);
    assert_int_equal(byval_reg_dup_fd(m, &d), -ESTALE);
    /* Another memfd: another inode. */
    assert_int_equal(byval_reg_add_fd(m), 0);
    replace_at(m, memfd_create("rf-other", MFD_CLOEXEC));
    assert_int_equal(byval_reg_dup_fd(m, &d), -ESTALE);
    close(m);
}

static void test_unprovable_refused(void **state)
{
    (void)state;
    /* A character device that does not poll: its inode is shared and epoll
     * cannot hold it, so nothing could prove it later. */
    int n = open("/dev/null", O_RDWR | O_CLOEXEC);
    assert_true(n >= 0);
    errno = 0;
    assert_int_equal(byval_reg_add_fd(n), -1);
    assert_int_equal(errno, ENOTSUP);
    close(n);
    assert_int_equal(byval_reg_add_fd(-1), -1);
}

static void test_closed_entries_swept(void **state)
{
    (void)state;
    unsigned before = byval_reg_fds_live();
    for (int round = 0; round < 20; round++) {
        int fds[100];
        for (int i = 0; i < 100; i++) {
            fds[i] = eventfd(0, EFD_CLOEXEC);
            assert_int_equal(byval_reg_add_fd(fds[i]), 0);
        }
        for (int i = 0; i < 100; i++)
            close(fds[i]);
    }
    /* 2000 exports, all closed: the table holds what the last sweep could
     * not know yet, not all of them. */
    assert_true(byval_reg_fds_live() < before + 400);
}

static void test_fork_child_starts_empty(void **state)
{
    (void)state;
    int a = fresh(eventfd(0, EFD_CLOEXEC)), b = fresh(eventfd(0, EFD_CLOEXEC)), d = -1;
    assert_int_equal(byval_reg_add_fd(a), 0);
    pid_t pid = fork();
    if (pid == 0) {
        int ok = byval_reg_dup_fd(a, &d) == -EBADF && /* the parent's export */
                 byval_reg_add_fd(b) == 0 && byval_reg_dup_fd(b, &d) == 0;
        _exit(ok ? 0 : 1);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    /* The child's registration went to its own epoll instance. */
    assert_int_equal(byval_reg_dup_fd(b, &d), -EBADF);
    assert_int_equal(byval_reg_dup_fd(a, &d), 0);
    close(d);
    close(a);
    close(b);
}

/* End to end: a child asks this process's broker for a registered
 * eventfd (the counter it reads proves the object), for one never
 * registered, and through a pidfd that is not one. */
static void test_rescue_through_broker(void **state)
{
    (void)state;
    int e = fresh(eventfd(0, EFD_CLOEXEC)), other = fresh(eventfd(0, EFD_CLOEXEC));
    uint64_t v = 4242;
    assert_int_equal(write(e, &v, sizeof(v)), (ssize_t)sizeof(v));
    assert_int_equal(byval_reg_add_fd(e), 0);
    BYVAL_NEED(byval_broker_serve() != 0 ? "the broker cannot listen here" : NULL);
    pid_t parent = getpid(), pid = fork();
    if (pid == 0) {
        char msg[512];
        uint32_t p;
        int got = -1, rc = 0;
        int pidfd = (int)syscall(SYS_pidfd_open, parent, 0);
        uint64_t back = 0;
        if (pidfd < 0)
            _exit(77);
        if (byval_rescue_getfd(pidfd, e, &got, &p, msg, sizeof(msg)) != BYVAL_OK ||
            p != (uint32_t)parent || read(got, &back, sizeof(back)) != sizeof(back) || back != 4242 ||
            !(fcntl(got, F_GETFD) & FD_CLOEXEC)) {
            fprintf(stderr, "registered: %s\n", msg);
            rc |= 1;
        }
        if (byval_rescue_getfd(pidfd, other, &got, &p, msg, sizeof(msg)) != BYVAL_E_BADFD) {
            fprintf(stderr, "unregistered: %s\n", msg);
            rc |= 2;
        }
        if (byval_rescue_getfd(other, e, &got, &p, msg, sizeof(msg)) == BYVAL_OK)
            rc |= 4; /* an eventfd is no pidfd */
        _exit(rc);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    BYVAL_NEED(WIFEXITED(st) && WEXITSTATUS(st) == 77 ? "no pidfd_open here" : NULL);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    uint64_t served, refused;
    byval_reg_fd_counts(&served, &refused);
    assert_true(served >= 1 && refused >= 1);
    close(e);
    close(other);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_eventfd_served_while_same),
        cmocka_unit_test(test_same_file_elsewhere_is_not_the_export),
        cmocka_unit_test(test_never_registered),
        cmocka_unit_test(test_memfd_by_inode_and_mode),
        cmocka_unit_test(test_unprovable_refused),
        cmocka_unit_test(test_closed_entries_swept),
        cmocka_unit_test(test_fork_child_starts_empty),
        cmocka_unit_test(test_rescue_through_broker),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
