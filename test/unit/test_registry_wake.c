/* SPDX-License-Identifier: MIT */
/*
 * test_registry_wake.c - no free's wake-up is lost (issue 22: mappings
 * held after the exporter freed everything, released only at its exit),
 * on handles/ alone with real processes: an exporter (this program's
 * child, publishing through byval_reg_add/remove as the shim does), the
 * importer under test (this process: a view and its watcher thread) and
 * a second importer of the same exporter (this program exec'ed as
 * "importer PID": its own view and watcher, as another rank or a fork
 * child that opened one handle has; it says 'f' or 'l' at each report:
 * the export KEY reads freed or live).
 *
 * The interleaving, made deterministic: our watcher is busy (its event
 * handler blocks) when the exporter's free writes the pipe, so epoll
 * queues our view; the second importer's watcher wakes for the same
 * write and is done with it before ours collects the queued wake-up.
 * When importers drained the pipe, the second one took the byte, epoll
 * found our view no longer readable when we collected it and dropped the
 * event: the free went unreported (its mappings cached until the
 * exporter's exit). Also: a burst of frees is reported, and once it is,
 * the bytes left in the pipe cause no further scans. And (issue 23) the
 * first attach does not wait for the watcher thread to start: held at
 * its start, the attach still returns at once, and a free made before it
 * runs is reported once it does.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "handles/bgthread.h"
#include "handles/registry.h"
#include "handles/registry_view.h"
#include "handles/resolve.h"
#include "handles/transport.h"
#include "test/unit/test_registry_peers.h"
#include "test/unit/test_skip.h"

/* Set: the next report blocks in on_event until `go` is written. */
static int block_next;
static int blocked[2], go[2], pipes_open;
/* The second importer's: it says so at each report. */
static int second;

static void on_event(byval_reg_view_t *v, int gone)
{
    (void)gone;
    peer_event();
    if (second) { /* 'f': KEY reads freed, 'l': live */
        uint64_t serial;
        (void)!write(1, byval_reg_find(v, KEY, 5, &serial) ? "l" : "f", 1);
    }
    if (__atomic_exchange_n(&block_next, 0, __ATOMIC_ACQ_REL)) {
        char c;
        (void)!write(blocked[1], "b", 1);
        (void)!read(go[0], &c, 1);
    }
}

/* One byte c from fd within ms: 0, or -1. */
static int byte_within(int fd, char c, int ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    char r;
    return poll(&p, 1, ms) == 1 && read(fd, &r, 1) == 1 && r == c ? 0 : -1;
}

/* Forget the bytes fd has now, after ms of quiet. */
static void settle(int fd, int ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    char r;
    usleep((useconds_t)ms * 1000);
    while (poll(&p, 1, 0) == 1 && read(fd, &r, 1) == 1)
        ;
}

/* The second importer (main's "importer PID"): a view of PID, every
 * report a byte 'f' or 'l' on stdout ('R' once attached), until stdin
 * closes. */
static int second_importer_main(uint32_t pid)
{
    char msg[512] = "";
    second = 1;
    byval_reg_on_event(on_event);
    byval_reg_view_t *v = byval_reg_attach_pid(pid, msg, sizeof(msg));
    if (!v) {
        fprintf(stderr, "second importer: %s\n", msg);
        return 1;
    }
    (void)!write(1, "R", 1);
    for (char c; read(0, &c, 1) > 0;)
        ;
    byval_reg_view_put(v);
    return 0;
}

typedef struct second {
    pid_t pid;
    int ctl, notify;
} second_t;

static int second_start(second_t *s, pid_t exporter)
{
    char p[16];
    snprintf(p, sizeof(p), "%d", (int)exporter);
    char *argv[] = {"/proc/self/exe", "importer", p, NULL};
    s->pid = peer_spawn(argv, &s->ctl, &s->notify);
    return s->pid > 0 && byte_within(s->notify, 'R', 5000) == 0 ? 0 : -1;
}

static void second_stop(second_t *s)
{
    close(s->ctl); /* EOF: it exits */
    waitpid(s->pid, NULL, 0);
    close(s->notify);
}

/* Each test's exporter and our view of it (NULL without pidfd_open). */
typedef struct fixture {
    peer_exporter_t e;
    byval_reg_view_t *v;
} fixture_t;

static int setup(void **state)
{
    static fixture_t f;
    f.v = byval_test_no_pidfd() ? NULL : peer_exporter_attached(&f.e, on_event);
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    __atomic_store_n(&block_next, 0, __ATOMIC_RELEASE);
    if (pipes_open) { /* a watcher a failed test left blocked goes on */
        (void)!write(go[1], "g", 1);
        close(blocked[0]);
        close(blocked[1]);
        close(go[0]);
        close(go[1]);
        pipes_open = 0;
    }
    if (!f->v)
        return 0;
    byval_reg_view_put(f->v);
    return peer_exporter_stop(&f->e);
}

/* The interleaving at the top, step by step. */
static void test_wakeup_not_taken_by_another_importer(void **state)
{
    fixture_t *f = *state;
    BYVAL_NEED(byval_test_no_pidfd());
    assert_non_null(f->v);
    assert_int_equal(pipe2(blocked, O_CLOEXEC), 0);
    assert_int_equal(pipe2(go, O_CLOEXEC), 0);
    pipes_open = 1;
    second_t s = {-1, -1, -1};
    assert_int_equal(second_start(&s, f->e.pid), 0);

    /* A first free: our watcher reports it and stays in the handler. */
    __atomic_store_n(&block_next, 1, __ATOMIC_RELEASE);
    assert_int_equal(peer_exporter_cmd(&f->e, 'r', 5000), 0);
    if (byte_within(blocked[0], 'b', 5000) != 0)
        fail_msg("the first free was not reported to us within 5 s (its wake-up lost too)");
    int before = peer_events();
    assert_int_equal(peer_exporter_cmd(&f->e, 'a', 5000), 0);
    uint64_t serial = 0;
    const uint64_t *w = byval_reg_find(f->v, KEY, 5, &serial);
    assert_non_null(w);
    /* The second importer's reports of that are over (both watchers are
     * past the rate limit, BYVAL_REG_RESCAN_NS, by then too). */
    settle(s.notify, 20);

    /* The free that matters: its byte queues our view while our watcher
     * is busy; the second importer's watcher handles it completely. */
    assert_int_equal(peer_exporter_cmd(&f->e, 'r', 5000), 0);
    assert_false(byval_reg_live(w, serial));
    assert_int_equal(byte_within(s.notify, 'f', 5000), 0);

    /* Our watcher goes back to epoll: it must report that free. */
    assert_int_equal(write(go[1], "g", 1), 1);
    int seen = peer_event_after(before, 1000);
    printf("free reported to the importer whose wake-up another importer also had: %s\n",
           seen ? "yes" : "no (lost: its mappings would stay cached until the exporter exits)");
    second_stop(&s);
    assert_true(seen);
}

/* Frees closer together than the rate limit are all reported (the last
 * one at the end of its interval), and the bytes they leave in the pipe
 * cost no scans once reported. */
static void test_burst_reported_then_quiet(void **state)
{
    fixture_t *f = *state;
    BYVAL_NEED(byval_test_no_pidfd());
    assert_non_null(f->v);
    const uint64_t *w = NULL;
    uint64_t serial = 0;
    int before = peer_events(), last = 0;
    for (int i = 0; i < 5; i++) {
        if (i)
            assert_int_equal(peer_exporter_cmd(&f->e, 'a', 5000), 0);
        w = byval_reg_find(f->v, KEY, 5, &serial);
        assert_non_null(w);
        last = peer_events();
        assert_int_equal(peer_exporter_cmd(&f->e, 'r', 5000), 0);
    }
    assert_true(peer_event_after(last, 1000)); /* the last free too */
    usleep(50000); /* every interval of the burst has ended */
    int after = peer_events();
    usleep(100000); /* 20 intervals of nothing freed */
    int idle = peer_events() - after;
    printf("a burst of 5 frees: %d reports; then %d in 100 ms of quiet\n", after - before, idle);
    assert_false(byval_reg_live(w, serial));
    assert_int_equal(idle, 0);
}

/* ---- the first attach and the watcher's start (issue 23) ---------------- */

static int hold_pipe[2];

/* Every new thread of ours waits here for a byte (3 s at most), before
 * its start ends. */
static void hold_start(void)
{
    struct pollfd p = {.fd = hold_pipe[0], .events = POLLIN};
    (void)poll(&p, 1, 3000);
}

static long ms_since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (t.tv_sec - t0->tv_sec) * 1000 + (t.tv_nsec - t0->tv_nsec) / 1000000;
}

/* This program exec'ed as "first-attach" (a fresh process: its first
 * attach starts its watcher whatever ran before, and TSan starts no
 * thread in the child of a multi-threaded fork): 0, or which check
 * failed. */
static int first_attach_child(void)
{
    peer_exporter_t e;
    char msg[512] = "";
    byval_reg_on_event(on_event);
    if (peer_exporter_start(&e) != 0 || pipe2(hold_pipe, O_CLOEXEC) != 0)
        return 10;
    __atomic_store_n(&byval_bgthread_test_hook, hold_start, __ATOMIC_RELEASE);
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    byval_reg_view_t *v = peer_attach(&e.rec, NULL, msg, sizeof(msg));
    long ms = ms_since(&t0);
    printf("first attach with the watcher's start held: %ld ms%s%s\n", ms, v ? "" : ", failed: ",
           v ? "" : msg);
    if (!v)
        return 11;
    /* A free while the watcher has not run yet. */
    uint64_t serial = 0;
    const uint64_t *w = byval_reg_find(v, KEY, 5, &serial);
    int before = peer_events();
    if (!w || peer_exporter_cmd(&e, 'r', 5000) != 0)
        return 12;
    int early = peer_events() != before;
    (void)!write(hold_pipe[1], "g", 1); /* the watcher runs now */
    int seen = peer_event_after(before, 2000);
    printf("free made before the watcher ran: %s\n",
           seen ? "reported once it ran" : "not reported (lost)");
    int rc = ms >= 1000 ? 1 : early ? 13 : !seen ? 2 : byval_reg_live(w, serial) ? 14 : 0;
    byval_reg_view_put(v);
    peer_exporter_stop(&e);
    return rc;
}

static void test_first_attach_does_not_wait_for_watcher(void **state)
{
    (void)state;
    BYVAL_NEED(byval_test_no_pidfd());
    fflush(stdout);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        execl("/proc/self/exe", "test_registry_wake", "first-attach", (char *)NULL);
        _exit(127);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    if (WEXITSTATUS(st) == 1)
        fail_msg("the first attach waited for the watcher thread to start");
    if (WEXITSTATUS(st) == 2)
        fail_msg("a free made before the watcher ran was never reported");
    assert_int_equal(WEXITSTATUS(st), 0);
}

int main(int argc, char **argv)
{
    if (argc > 2 && strcmp(argv[1], "importer") == 0)
        return second_importer_main((uint32_t)atoi(argv[2]));
    if (argc > 1 && strcmp(argv[1], "first-attach") == 0) {
        int rc = first_attach_child();
        fflush(stdout);
        return rc;
    }
    if (argc > 1) /* one test by name, or a glob of names */
        cmocka_set_test_filter(argv[1]);
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_wakeup_not_taken_by_another_importer, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_burst_reported_then_quiet, setup, teardown),
        cmocka_unit_test(test_first_attach_does_not_wait_for_watcher),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
