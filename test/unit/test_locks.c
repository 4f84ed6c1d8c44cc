/* SPDX-License-Identifier: MIT */
/*
 * test_locks.c - the lock order and fork (cache/locks.h), with every
 * module of the library linked in, so every registered lock is there.
 *
 * The fork matrix: for each registered lock, held in turn by each kind of
 * thread (an application thread, the broker's server thread, the registry
 * watcher thread), another thread forks; the child must take every lock,
 * start a background thread and exit within CHILD_MS. A lock fork does
 * not know about (ze_event's before this module: no prepare handler)
 * leaves the child a lock held by a thread it does not have, and it hangs.
 * And forks while other threads start background threads (the child's
 * own thread start must not block). IPCBYVAL_FORK_TRIALS=1000 runs each
 * that many times over (default 3: make check).
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "cache/locks.h"
#include "cache/lru.h"
#include "cache/ptrmap.h"
#include "handles/bgthread.h"
#include "handles/broker.h"
#include "handles/broker_internal.h"
#include "handles/registry.h"
#include "handles/registry_view.h"
#include "handles/resolve.h"
#include "handles/transport.h"
#include "test/unit/test_skip.h"

#define CHILD_MS 5000
#define HOLD_US 3000
#define KEY BYVAL_REG_KEY(BYVAL_KIND_ZE_MEM, 77)

/* Children of this threaded process start threads (their own watcher). */
const char *__tsan_default_options(void)
{
    return "die_after_fork=0:report_thread_leaks=0";
}

enum { KIND_APP, KIND_BROKER, KIND_WATCHER, KINDS };
static const char *const kind_name[KINDS] = {"application", "broker", "watcher"};

/* What the holder of the current trial does: hold lock `want` (-1: none),
 * say so in `held`, wait HOLD_US, let go. */
static int want = -1, want_kind = -1, held;

static void hold_now(void)
{
    int i = __atomic_load_n(&want, __ATOMIC_ACQUIRE);
    byval_locks_hold((unsigned)i);
    __atomic_store_n(&held, 1, __ATOMIC_RELEASE);
    usleep(HOLD_US);
    byval_locks_unhold((unsigned)i);
    __atomic_store_n(&want, -1, __ATOMIC_RELEASE);
}

static void on_point(const char *thread)
{
    if (!strcmp(thread, "broker") && __atomic_load_n(&want_kind, __ATOMIC_ACQUIRE) == KIND_BROKER &&
        __atomic_load_n(&want, __ATOMIC_ACQUIRE) >= 0)
        hold_now();
}

static void on_event(byval_reg_view_t *v, int gone)
{
    (void)v;
    (void)gone;
    if (__atomic_load_n(&want_kind, __ATOMIC_ACQUIRE) == KIND_WATCHER &&
        __atomic_load_n(&want, __ATOMIC_ACQUIRE) >= 0)
        hold_now();
}

/* The application thread that holds: one for the whole test (a thread of
 * the application starting or ending while fork copies the process is
 * not ours to cover: ASan's bookkeeping of it may be mid-change). */
static int app_done;

static void *app_holder(void *arg)
{
    (void)arg;
    while (!__atomic_load_n(&app_done, __ATOMIC_ACQUIRE)) {
        if (__atomic_load_n(&want_kind, __ATOMIC_ACQUIRE) == KIND_APP &&
            __atomic_load_n(&want, __ATOMIC_ACQUIRE) >= 0)
            hold_now();
        else
            usleep(20);
    }
    return NULL;
}

static void *idle(void *arg)
{
    (void)arg;
    return NULL;
}

/* ---- the things that wake the broker and the watcher -------------------- */

static int exp_cmd[2] = {-1, -1};
static pid_t exporter_pid;
static byval_reg_view_t *view;

/* A process that publishes KEY and, per byte received, withdraws and
 * publishes it again: each withdrawal wakes our watcher. */
static int start_exporter(char *why, size_t len)
{
    int out[2];
    if (pipe(exp_cmd) != 0 || pipe(out) != 0)
        return snprintf(why, len, "pipe: %s", strerror(errno)), -1;
    exporter_pid = fork();
    if (exporter_pid == 0) {
        close(exp_cmd[1]);
        byval_self_t self;
        byval_record_t rec = {0};
        byval_self_get(&self);
        byval_record_set_exporter(&rec, &self);
        byval_reg_add(KEY, 5, 3, 4096);
        (void)!write(out[1], &rec, sizeof(rec));
        for (char c; read(exp_cmd[0], &c, 1) == 1;) {
            byval_reg_remove(KEY, 5);
            byval_reg_add(KEY, 5, 3, 4096);
        }
        _exit(0);
    }
    close(exp_cmd[0]);
    close(out[1]);
    byval_record_t rec;
    if (read(out[0], &rec, sizeof(rec)) != (ssize_t)sizeof(rec))
        return snprintf(why, len, "the exporter did not start"), -1;
    close(out[0]);
    int pidfd = (int)syscall(SYS_pidfd_open, exporter_pid, 0);
    if (pidfd < 0)
        return snprintf(why, len, "pidfd_open: %s", strerror(errno)), -1;
    view = byval_reg_attach(&rec, BYVAL_MODE_PIDFD, pidfd, why, len);
    return view ? 0 : -1;
}

static void wake_broker(void)
{
    byval_self_t self;
    struct sockaddr_un a;
    byval_self_get(&self);
    socklen_t alen = byval_broker_addr(&a, self.boot, self.pidns, self.pid, self.identity);
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(s >= 0);
    assert_int_equal(connect(s, (struct sockaddr *)&a, alen), 0);
    close(s);
}

static void wake_watcher(void)
{
    assert_int_equal(write(exp_cmd[1], "r", 1), 1);
}

/* ---- one trial ---------------------------------------------------------- */

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The child: every lock, in order, then a background thread. */
static void child(void)
{
    for (unsigned j = 0; j < byval_locks_count(); j++) {
        byval_locks_hold(j);
        byval_locks_unhold(j);
    }
    _exit(byval_bgthread_start(idle, NULL, NULL) == 0 ? 0 : 3);
}

/* 0 when the child ended well within CHILD_MS. */
static int reap(pid_t pid)
{
    int st = 0;
    for (int64_t end = now_ms() + CHILD_MS; now_ms() < end; usleep(200))
        if (waitpid(pid, &st, WNOHANG) == pid)
            return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    return -2;
}

static int trial(unsigned i, int kind)
{
    __atomic_store_n(&held, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&want_kind, kind, __ATOMIC_RELAXED);
    __atomic_store_n(&want, (int)i, __ATOMIC_RELEASE);
    if (kind == KIND_BROKER)
        wake_broker();
    else if (kind == KIND_WATCHER)
        wake_watcher();
    for (int64_t end = now_ms() + CHILD_MS; !__atomic_load_n(&held, __ATOMIC_ACQUIRE);) {
        assert_true(now_ms() < end); /* the thread never got there */
        usleep(50);
    }
    pid_t pid = fork(); /* prepare waits for the holder to let go */
    if (pid == 0)
        child();
    assert_true(pid > 0);
    int rc = reap(pid);
    while (__atomic_load_n(&want, __ATOMIC_ACQUIRE) >= 0)
        usleep(50);
    if (rc != 0)
        printf("fork while the %s thread held \"%s\": the child %s\n", kind_name[kind],
               byval_rank_name(byval_locks_rank(i)), rc == -2 ? "hung" : "failed");
    return rc;
}

/* ---- tests ---------------------------------------------------------------- */

static void test_every_rank_has_one_registered_owner(void **state)
{
    (void)state;
    unsigned seen[BYVAL_RANK_COUNT] = {0};
    for (unsigned i = 0; i < byval_locks_count(); i++) {
        unsigned r = byval_locks_rank(i);
        assert_true(r > BYVAL_RANK_NONE && r < BYVAL_RANK_COUNT);
        if (i)
            assert_true(byval_locks_rank(i - 1) < r); /* in order, no rank twice */
        seen[r]++;
    }
    /* A class's list lock is the class's own (taken by its descriptor). */
    for (unsigned r = BYVAL_RANK_NONE + 1; r < BYVAL_RANK_COUNT; r++)
        if (r != BYVAL_RANK_LRU_LIST && r != BYVAL_RANK_PTRMAP_LIST && !seen[r])
            fail_msg("rank %u (%s) has no registered lock", r, byval_rank_name(r));
}

static void test_fork_while_each_lock_is_held_by_each_thread_kind(void **state)
{
    (void)state;
    char why[256] = "";
    const char *env = getenv("IPCBYVAL_FORK_TRIALS");
    int rounds = env ? atoi(env) : 3;
    /* Instances for the classes, the broker's thread, the watcher's. */
    byval_lru_t *lru = byval_lru_create(16, 8, NULL, NULL);
    byval_ptrmap_t *map = byval_ptrmap_create(8);
    assert_non_null(lru);
    assert_non_null(map);
    __atomic_store_n(&byval_locks_test_hook, on_point, __ATOMIC_RELEASE);
    byval_reg_on_event(on_event);
    int kinds = KINDS;
    if (byval_broker_serve() != 0 || start_exporter(why, sizeof(why)) != 0) {
        printf("SKIP: broker and watcher kinds: %s\n", why[0] ? why : strerror(errno));
        kinds = KIND_BROKER;
    }
    pthread_t app;
    assert_int_equal(pthread_create(&app, NULL, app_holder, NULL), 0);
    int bad = 0, n = 0;
    for (int r = 0; r < rounds; r++)
        for (unsigned i = 0; i < byval_locks_count(); i++)
            for (int k = 0; k < kinds; k++, n++)
                bad += trial(i, k) != 0;
    __atomic_store_n(&app_done, 1, __ATOMIC_RELEASE);
    pthread_join(app, NULL);
    printf("%d forks, %d children hung or failed\n", n, bad);
    __atomic_store_n(&byval_locks_test_hook, NULL, __ATOMIC_RELEASE);
    if (exporter_pid > 0) {
        close(exp_cmd[1]);
        waitpid(exporter_pid, NULL, 0);
    }
    byval_reg_view_put(view); /* the attach's reference (LeakSanitizer) */
    view = NULL;
    byval_ptrmap_destroy(map);
    byval_lru_destroy(lru);
    assert_int_equal(bad, 0);
}

/* Forks while another thread starts background threads: between
 * pthread_create and the new thread's first instruction of ours, ASan
 * holds its thread registry's lock; a child forked then blocked in its own
 * first thread start (1 of ~450 forks under ASan before the BGTHREAD lock).
 * The started threads wait on a pipe and end with the test. */
static int end_pipe[2] = {-1, -1};

static void *wait_end(void *arg)
{
    (void)arg;
    char c;
    (void)!read(end_pipe[0], &c, 1);
    return NULL;
}

/* One application thread for the whole test (a thread of the application
 * starting or ending is not ours to cover): per round it starts three
 * background threads, then says which round it finished. */
static int round_asked, round_done;

static void *starter(void *arg)
{
    (void)arg;
    for (int r = 1;; r++) {
        int asked;
        while ((asked = __atomic_load_n(&round_asked, __ATOMIC_ACQUIRE)) >= 0 && asked < r)
            usleep(20);
        if (asked < 0)
            return NULL;
        for (int k = 0; k < 3; k++)
            byval_bgthread_start(wait_end, NULL, NULL);
        __atomic_store_n(&round_done, r, __ATOMIC_RELEASE);
    }
}

static void test_fork_while_background_threads_start(void **state)
{
    (void)state;
    const char *env = getenv("IPCBYVAL_FORK_TRIALS");
    int rounds = env ? atoi(env) : 3, hung = 0;
    pthread_t t;
    assert_int_equal(pipe(end_pipe), 0);
    assert_int_equal(pthread_create(&t, NULL, starter, NULL), 0);
    for (int r = 1; r <= rounds * 10; r++) {
        __atomic_store_n(&round_asked, r, __ATOMIC_RELEASE);
        for (int j = 0; j < 2; j++) {
            usleep((useconds_t)(rand() % 150));
            pid_t pid = fork();
            if (pid == 0)
                child();
            assert_true(pid > 0);
            hung += reap(pid) != 0;
        }
        while (__atomic_load_n(&round_done, __ATOMIC_ACQUIRE) < r)
            usleep(20);
    }
    __atomic_store_n(&round_asked, -1, __ATOMIC_RELEASE);
    pthread_join(t, NULL);
    close(end_pipe[1]); /* the started threads end */
    printf("%d forks while threads started, %d children hung or failed\n", rounds * 20, hung);
    assert_int_equal(hung, 0);
}

static void test_debug_build_aborts_on_a_rank_order_violation(void **state)
{
    (void)state;
#ifndef BYVAL_LOCK_DEBUG
    BYVAL_NEED("not a BYVAL_LOCK_DEBUG build (make SAN=tsan is)");
#endif
    int err[2];
    assert_int_equal(pipe(err), 0);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(err[1], 2);
        unsigned last = byval_locks_count() - 1;
        byval_locks_hold(last); /* then an earlier rank: a violation */
        byval_locks_hold(0);
        _exit(0);
    }
    close(err[1]);
    char msg[512] = "";
    ssize_t got = read(err[0], msg, sizeof(msg) - 1);
    int st = 0;
    waitpid(pid, &st, 0);
    assert_true(got > 0);
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
    assert_non_null(strstr(msg, "lock order violation: taking imports release gate"));
    assert_non_null(strstr(msg, "while holding background thread start"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_rank_has_one_registered_owner),
        cmocka_unit_test(test_fork_while_each_lock_is_held_by_each_thread_kind),
        cmocka_unit_test(test_fork_while_background_threads_start),
        cmocka_unit_test(test_debug_build_aborts_on_a_rank_order_violation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
