/* SPDX-License-Identifier: MIT */
/*
 * test_registry_wake.c - no free's wake-up is lost (issue 22: mappings
 * held after the exporter freed everything, released only at its exit),
 * on handles/ alone with real processes: an exporter (this program's
 * child, publishing through byval_reg_add/remove as the shim does), the
 * importer under test (this process: a view and its watcher thread) and
 * a second importer of the same exporter (this program exec'ed as
 * "importer PID FD": its own view and watcher, as another rank or a fork
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
 * the bytes left in the pipe cause no further scans.
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
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "handles/registry.h"
#include "handles/registry_view.h"
#include "handles/resolve.h"
#include "handles/transport.h"
#include "test/unit/test_registry_peers.h"
#include "test/unit/test_skip.h"

static int events;
/* Set: the next report blocks in on_event until `go` is written. */
static int block_next;
static int blocked[2], go[2];
/* The second importer's: where it says it saw a report. */
static int notify_fd = -1;

static void on_event(byval_reg_view_t *v, int gone)
{
    (void)gone;
    __atomic_add_fetch(&events, 1, __ATOMIC_RELEASE);
    if (notify_fd >= 0) { /* 'f': KEY reads freed, 'l': live */
        uint64_t serial;
        (void)!write(notify_fd, byval_reg_find(v, KEY, 5, &serial) ? "l" : "f", 1);
    }
    if (__atomic_exchange_n(&block_next, 0, __ATOMIC_ACQ_REL)) {
        char c;
        (void)!write(blocked[1], "b", 1);
        (void)!read(go[0], &c, 1);
    }
}

static int nevents(void)
{
    return __atomic_load_n(&events, __ATOMIC_ACQUIRE);
}

/* Reports after `before` within ms: 1 when there was one. */
static int event_after(int before, int ms)
{
    for (int i = 0; i < ms * 10 && nevents() <= before; i++)
        usleep(100);
    return nevents() > before;
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

static byval_reg_view_t *attach(const byval_record_t *rec, char *msg, size_t msglen)
{
    int pidfd = (int)syscall(SYS_pidfd_open, (pid_t)rec->pid, 0);
    if (pidfd < 0) {
        snprintf(msg, msglen, "pidfd_open: %s", strerror(errno));
        return NULL;
    }
    byval_reg_view_t *v = byval_reg_attach(rec, BYVAL_MODE_PIDFD, pidfd, msg, msglen);
    close(pidfd);
    return v;
}

static const char *no_pidfd(void)
{
    int fd = (int)syscall(SYS_pidfd_open, getpid(), 0);
    if (fd < 0)
        return "pidfd_open is not available";
    close(fd);
    return NULL;
}

/* The second importer (main's "importer PID FD"): a view of PID, every
 * report a byte 'f' or 'l' on FD ('R' once attached), until stdin
 * closes. */
static int second_importer_main(uint32_t pid, int fd)
{
    char msg[512] = "";
    notify_fd = fd;
    byval_reg_on_event(on_event);
    byval_reg_view_t *v = byval_reg_attach_pid(pid, msg, sizeof(msg));
    if (!v) {
        fprintf(stderr, "second importer: %s\n", msg);
        return 1;
    }
    (void)!write(fd, "R", 1);
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
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) != 0 || pipe(out) != 0)
        return -1;
    s->pid = fork();
    if (s->pid == 0) {
        char p[16], f[16];
        dup2(in[0], 0);
        snprintf(p, sizeof(p), "%d", (int)exporter);
        snprintf(f, sizeof(f), "%d", out[1]);
        execl("/proc/self/exe", "test_registry_wake", "importer", p, f, (char *)NULL);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    s->ctl = in[1];
    s->notify = out[0];
    return s->pid > 0 && byte_within(s->notify, 'R', 5000) == 0 ? 0 : -1;
}

static void second_stop(second_t *s)
{
    int st;
    close(s->ctl);
    waitpid(s->pid, &st, 0);
    close(s->notify);
}

/* The interleaving at the top, step by step. */
static void test_wakeup_not_taken_by_another_importer(void **state)
{
    (void)state;
    BYVAL_NEED(no_pidfd());
    byval_reg_on_event(on_event);
    assert_int_equal(pipe2(blocked, O_CLOEXEC), 0);
    assert_int_equal(pipe2(go, O_CLOEXEC), 0);
    peer_exporter_t e;
    assert_int_equal(peer_exporter_start(&e), 0);
    char msg[512] = "";
    byval_reg_view_t *v = attach(&e.rec, msg, sizeof(msg));
    assert_non_null(v);
    second_t s = {-1, -1, -1};
    assert_int_equal(second_start(&s, e.pid), 0);

    /* A first free: our watcher reports it and stays in the handler. */
    __atomic_store_n(&block_next, 1, __ATOMIC_RELEASE);
    assert_int_equal(peer_exporter_cmd(&e, 'r', 5000), 0);
    if (byte_within(blocked[0], 'b', 5000) != 0) {
        __atomic_store_n(&block_next, 0, __ATOMIC_RELEASE);
        fail_msg("the first free was not reported to us within 5 s (its wake-up lost too)");
    }
    int before = nevents();
    assert_int_equal(peer_exporter_cmd(&e, 'a', 5000), 0);
    uint64_t serial = 0;
    const uint64_t *w = byval_reg_find(v, KEY, 5, &serial);
    assert_non_null(w);
    /* The second importer's reports of that are over (both watchers are
     * past the rate limit, BYVAL_REG_RESCAN_NS, by then too). */
    settle(s.notify, 20);

    /* The free that matters: its byte queues our view while our watcher
     * is busy; the second importer's watcher handles it completely. */
    assert_int_equal(peer_exporter_cmd(&e, 'r', 5000), 0);
    assert_false(byval_reg_live(w, serial));
    assert_int_equal(byte_within(s.notify, 'f', 5000), 0);

    /* Our watcher goes back to epoll: it must report that free. */
    assert_int_equal(write(go[1], "g", 1), 1);
    int seen = event_after(before, 1000);
    printf("free reported to the importer whose wake-up another importer also had: %s\n",
           seen ? "yes" : "no (lost: its mappings would stay cached until the exporter exits)");
    second_stop(&s);
    byval_reg_view_put(v);
    assert_int_equal(peer_exporter_stop(&e), 0);
    close(blocked[0]);
    close(blocked[1]);
    close(go[0]);
    close(go[1]);
    assert_true(seen);
}

/* Frees closer together than the rate limit are all reported (the last
 * one at the end of its interval), and the bytes they leave in the pipe
 * cost no scans once reported. */
static void test_burst_reported_then_quiet(void **state)
{
    (void)state;
    BYVAL_NEED(no_pidfd());
    byval_reg_on_event(on_event);
    peer_exporter_t e;
    assert_int_equal(peer_exporter_start(&e), 0);
    char msg[512] = "";
    byval_reg_view_t *v = attach(&e.rec, msg, sizeof(msg));
    assert_non_null(v);
    const uint64_t *w = NULL;
    uint64_t serial = 0;
    int before = nevents(), last = 0;
    for (int i = 0; i < 5; i++) {
        if (i)
            assert_int_equal(peer_exporter_cmd(&e, 'a', 5000), 0);
        w = byval_reg_find(v, KEY, 5, &serial);
        assert_non_null(w);
        last = nevents();
        assert_int_equal(peer_exporter_cmd(&e, 'r', 5000), 0);
    }
    assert_true(event_after(last, 1000)); /* the last free too */
    usleep(50000); /* every interval of the burst has ended */
    int after = nevents();
    usleep(100000); /* 20 intervals of nothing freed */
    int idle = nevents() - after;
    printf("a burst of 5 frees: %d reports; then %d in 100 ms of quiet\n", after - before, idle);
    assert_false(byval_reg_live(w, serial));
    assert_int_equal(idle, 0);
    byval_reg_view_put(v);
    assert_int_equal(peer_exporter_stop(&e), 0);
}

int main(int argc, char **argv)
{
    if (argc > 3 && strcmp(argv[1], "importer") == 0)
        return second_importer_main((uint32_t)atoi(argv[2]), atoi(argv[3]));
    if (argc > 1) /* one test by name, or a glob of names */
        cmocka_set_test_filter(argv[1]);
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wakeup_not_taken_by_another_importer),
        cmocka_unit_test(test_burst_reported_then_quiet),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
