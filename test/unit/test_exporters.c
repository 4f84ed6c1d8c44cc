/* SPDX-License-Identifier: MIT */
/*
 * test_exporters.c - cache/exporters.c: the importer's table of exporters'
 * pidfds, kept for exit polling and lent to later cold opens. Exporters
 * are forked children that wait on a pipe; their pidfds come from
 * pidfd_open. The log and statistics the table writes are stubbed here.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "cache/exporters.h"
#include "cache/stats.h"
#include "test/unit/test_skip.h"

/* ---- stubs for what exporters.c logs and counts ------------------------ */
int byval_log_level = 0;
byval_stats_t byval_stats[BYVAL_STRIPES];
void byval_log(int level, const char *func, const char *fmt, ...)
{
}

/* ---- exporters: children that live until killed ------------------------ */
typedef struct child {
    pid_t pid;
    byval_exporter_id_t id;
} child_t;

static child_t child_start(uint64_t identity)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        for (;;)
            pause();
    }
    return (child_t){pid, {1, (uint32_t)pid, identity}};
}

static void child_stop(child_t *c)
{
    kill(c->pid, SIGKILL);
    waitpid(c->pid, NULL, 0);
}

static int pidfd_of(const child_t *c)
{
    int fd = (int)syscall(SYS_pidfd_open, c->pid, 0);
    assert_true(fd >= 0);
    return fd;
}

static int fd_open(int fd)
{
    return fcntl(fd, F_GETFD) != -1 || errno != EBADF;
}

/* Polls are rate-limited to one a millisecond: wait past it. */
static void poll_now(void)
{
    struct timespec ts = {0, 5 * 1000 * 1000};
    nanosleep(&ts, NULL);
    byval_exporters_poll();
}

static byval_exporter_id_t exited[16];
static int nexited;
static void on_exit_cb(const byval_exporter_id_t *id)
{
    if (nexited < 16)
        exited[nexited++] = *id;
}

/* Drop every kept exporter (their children were stopped by the test). */
static void drain_all(void)
{
    for (int i = 0; i < 100 && byval_exporters_count(); i++)
        poll_now();
    assert_int_equal(byval_exporters_count(), 0);
    nexited = 0;
}

static const char *skip_reason;
#define NEED_PIDFD() BYVAL_NEED(skip_reason)

static int setup(void **state)
{
    int fd = (int)syscall(SYS_pidfd_open, getpid(), 0);
    if (fd < 0)
        skip_reason = "pidfd_open unavailable (kernel before 5.3, or a sandbox)";
    else
        close(fd);
    byval_exporters_on_exit(on_exit_cb);
    return 0;
}

/* ---- tests --------------------------------------------------------------- */

static void test_keep_and_lend(void **state)
{
    NEED_PIDFD();
    child_t c = child_start(7);
    assert_int_equal(byval_exporters_hold(&c.id), -1); /* unknown */
    int pidfd = pidfd_of(&c);
    byval_exporters_release(&c.id, pidfd); /* a new pidfd: kept */
    assert_int_equal(byval_exporters_count(), 1);
    assert_int_equal(byval_exporters_hold(&c.id), pidfd);
    assert_int_equal(byval_exporters_hold(&c.id), pidfd);
    byval_exporters_release(&c.id, pidfd);
    byval_exporters_release(&c.id, pidfd);
    assert_true(fd_open(pidfd));
    /* Another identity on the same pid is another process: not lent. */
    byval_exporter_id_t other = c.id;
    other.identity++;
    assert_int_equal(byval_exporters_hold(&other), -1);
    /* A second pidfd for a kept exporter is closed, the first stays. */
    int second = pidfd_of(&c);
    byval_exporters_release(&c.id, second);
    assert_false(fd_open(second));
    assert_true(fd_open(pidfd));
    assert_int_equal(byval_exporters_count(), 1);
    child_stop(&c);
    drain_all();
    assert_false(fd_open(pidfd));
}

static void test_exit_with_loan_out(void **state)
{
    NEED_PIDFD();
    child_t c = child_start(8);
    int pidfd = pidfd_of(&c);
    byval_exporters_release(&c.id, pidfd);
    int lent = byval_exporters_hold(&c.id);
    assert_int_equal(lent, pidfd);
    child_stop(&c);
    poll_now();
    /* Seen exiting: out of the table, handler run, but the loan's fd is
     * still the pidfd (closing it would let the number be reused under
     * the borrower). */
    assert_int_equal(byval_exporters_count(), 0);
    assert_int_equal(nexited, 1);
    assert_memory_equal(&exited[0], &c.id, sizeof(c.id));
    assert_int_equal(byval_exporters_hold(&c.id), -1);
    assert_true(fd_open(pidfd));
    errno = 0;
    assert_true(syscall(SYS_pidfd_getfd, pidfd, 0, 0) < 0); /* still a pidfd: ESRCH */
    assert_int_equal(errno, ESRCH);
    byval_exporters_release(&c.id, pidfd); /* the last loan closes it */
    assert_false(fd_open(pidfd));
    nexited = 0;
}

static void test_exit_without_loans(void **state)
{
    NEED_PIDFD();
    child_t a = child_start(9), b = child_start(10);
    int pa = pidfd_of(&a), pb = pidfd_of(&b);
    byval_exporters_release(&a.id, pa);
    byval_exporters_release(&b.id, pb);
    assert_int_equal(byval_exporters_count(), 2);
    child_stop(&a);
    poll_now();
    assert_int_equal(byval_exporters_count(), 1);
    assert_int_equal(nexited, 1);
    assert_int_equal(exited[0].pid, a.id.pid);
    assert_false(fd_open(pa));
    assert_int_equal(byval_exporters_hold(&b.id), pb); /* the other one stays */
    byval_exporters_release(&b.id, pb);
    child_stop(&b);
    drain_all();
}

/* Borrowers use the pidfd while a poller drops exited exporters: every
 * lent pidfd must still be a pidfd of its exporter (never closed under a
 * borrower, never another file). */
#define THREADS 4
#define ROUNDS 2000
static child_t kids[2];
static volatile int stop_poll;

static void *borrower(void *arg)
{
    intptr_t bad = 0;
    for (int r = 0; r < ROUNDS; r++) {
        child_t *c = &kids[r & 1];
        int fd = byval_exporters_hold(&c->id);
        if (fd < 0)
            continue;
        /* F_GETFD proves the fd is open; pidfd_send_signal(0) that it is a
         * pidfd of that child (ESRCH once the child has exited). */
        if (fcntl(fd, F_GETFD) == -1 ||
            (syscall(SYS_pidfd_send_signal, fd, 0, NULL, 0) != 0 && errno != ESRCH))
            bad++;
        byval_exporters_release(&c->id, fd);
    }
    return (void *)bad;
}

static void *poller(void *arg)
{
    while (!__atomic_load_n(&stop_poll, __ATOMIC_RELAXED))
        poll_now();
    return NULL;
}

static void test_threads(void **state)
{
    NEED_PIDFD();
    pthread_t t[THREADS], p;
    kids[0] = child_start(11);
    kids[1] = child_start(12);
    byval_exporters_release(&kids[0].id, pidfd_of(&kids[0]));
    byval_exporters_release(&kids[1].id, pidfd_of(&kids[1]));
    stop_poll = 0;
    assert_int_equal(pthread_create(&p, NULL, poller, NULL), 0);
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, borrower, NULL), 0);
    child_stop(&kids[0]); /* exits while borrowers hold its pidfd */
    intptr_t bad = 0;
    for (int i = 0; i < THREADS; i++) {
        void *r;
        pthread_join(t[i], &r);
        bad += (intptr_t)r;
    }
    __atomic_store_n(&stop_poll, 1, __ATOMIC_RELAXED);
    pthread_join(p, NULL);
    assert_int_equal(bad, 0);
    child_stop(&kids[1]);
    drain_all();
}

static void test_fork_child_forgets(void **state)
{
    NEED_PIDFD();
    child_t c = child_start(13);
    byval_exporters_release(&c.id, pidfd_of(&c));
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) /* the child imported nothing: nothing kept, nothing lent */
        _exit(byval_exporters_count() == 0 && byval_exporters_hold(&c.id) == -1 ? 0 : 1);
    int st = 0;
    waitpid(pid, &st, 0);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    assert_int_equal(byval_exporters_count(), 1); /* the parent's is intact */
    child_stop(&c);
    drain_all();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keep_and_lend),
        cmocka_unit_test(test_exit_with_loan_out),
        cmocka_unit_test(test_exit_without_loans),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_fork_child_forgets),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
