/* SPDX-License-Identifier: MIT */
/*
 * test_registry_demand.c - the watcher thread on demand (issue 23,
 * registry_view.h: byval_reg_watch_on_demand, as the library runs it), on
 * handles/ alone with real processes (test_registry_peers.c's exporter):
 *  - an attach starts no thread; a free made before anything needs the
 *    watcher is reported once something does (byval_reg_watch_need);
 *  - an exporter that exec'ed (same pid, same identity, its registry
 *    gone) while no watcher ran is not served by its old view: a lookup
 *    asks the view's pipe, and the watcher then reports the image gone;
 *  - more views than BYVAL_REG_VIEWS_MAX start it (it evicts).
 * Each case runs in this program exec'ed (a fresh process: no watcher
 * yet, and TSan starts no thread in the child of a multi-threaded fork).
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "handles/registry.h"
#include "handles/registry_view.h"
#include "handles/resolve.h"
#include "test/unit/test_registry_peers.h"
#include "test/unit/test_skip.h"

static int gone_reports;

static void on_event(byval_reg_view_t *v, int gone)
{
    (void)v;
    if (gone)
        __atomic_add_fetch(&gone_reports, 1, __ATOMIC_RELEASE);
    peer_event();
}

/* A check of a case run in the exec'ed child: its line when it fails. */
#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            printf("failed: %s\n", #c);                                                            \
            return __LINE__;                                                                       \
        }                                                                                          \
    } while (0)

static byval_reg_view_t *start_and_attach(peer_exporter_t *e)
{
    char msg[512] = "";
    if (peer_exporter_start(e) != 0)
        return NULL;
    byval_reg_view_t *v = peer_attach(&e->rec, NULL, msg, sizeof(msg));
    if (!v)
        printf("attach: %s\n", msg);
    return v;
}

static int case_free(void)
{
    peer_exporter_t e;
    byval_reg_view_t *v = start_and_attach(&e);
    CHECK(v);
    CHECK(!peer_watcher_running());
    uint64_t serial = 0;
    const uint64_t *w = byval_reg_find(v, KEY, 5, &serial);
    CHECK(w);
    int before = peer_events();
    CHECK(peer_exporter_cmd(&e, 'r', 5000) == 0);
    usleep(20000);
    CHECK(peer_events() == before); /* nobody watches yet */
    CHECK(!byval_reg_live(w, serial)); /* the liveness word tells at once */
    char msg[256] = "";
    CHECK(byval_reg_watch_need(msg, sizeof(msg)) == 1); /* started now */
    CHECK(byval_reg_watch_need(msg, sizeof(msg)) == 0); /* running already */
    CHECK(peer_event_after(before, 5000)); /* the free made before it ran */
    CHECK(peer_watcher_cpu_ms() >= 0);
    byval_reg_view_put(v);
    CHECK(peer_exporter_stop(&e) == 0);
    return 0;
}

static int case_exec(void)
{
    peer_exporter_t e;
    byval_reg_view_t *v = start_and_attach(&e);
    CHECK(v);
    CHECK(peer_exporter_cmd(&e, 'e', 5000) == 0);
    /* The exec closes the registry's pipe (close-on-exec): wait for it. */
    for (int i = 0; i < 1000 && !byval_reg_view_gone(v); i++) { /* up to 10 s */
        char msg[512] = "";
        byval_reg_view_t *again = peer_attach(&e.rec, NULL, msg, sizeof(msg));
        if (again == v) {
            byval_reg_view_put(again); /* the old image's view: not yet seen gone */
            usleep(10000);
            continue;
        }
        CHECK(!again); /* /bin/sleep publishes no registry */
    }
    CHECK(byval_reg_view_gone(v));
    for (int i = 0; i < 5000 && !__atomic_load_n(&gone_reports, __ATOMIC_ACQUIRE); i++)
        usleep(1000);
    CHECK(__atomic_load_n(&gone_reports, __ATOMIC_ACQUIRE) == 1); /* the watcher told */
    byval_reg_view_put(v);
    kill(e.pid, SIGKILL);
    waitpid(e.pid, NULL, 0);
    return 0;
}

static int case_many(void)
{
    enum { N = BYVAL_REG_VIEWS_MAX + 1 };
    static peer_exporter_t e[N];
    int rc = 0, n = 0;
    for (; n < N && !rc; n++) {
        byval_reg_view_t *v = start_and_attach(&e[n]);
        if (!v)
            rc = __LINE__;
        else
            byval_reg_view_put(v);
        if (!rc && n < N - 1 && peer_watcher_running())
            rc = __LINE__; /* within the bound: still no thread */
    }
    if (!rc && peer_watcher_cpu_ms() < 0)
        rc = __LINE__; /* one too many: the watcher runs, and evicts */
    for (int i = 0; !rc && i < 10000 && byval_reg_views() > BYVAL_REG_VIEWS_MAX; i++)
        usleep(1000);
    if (!rc && byval_reg_views() > BYVAL_REG_VIEWS_MAX)
        rc = __LINE__;
    for (int i = 0; i < n; i++)
        peer_exporter_stop(&e[i]);
    if (rc)
        printf("failed at line %d (%u views)\n", rc, byval_reg_views());
    return rc;
}

static int run_case(const char *name)
{
    byval_reg_on_event(on_event);
    byval_reg_watch_on_demand(1);
    int rc = !strcmp(name, "free")   ? case_free()
             : !strcmp(name, "exec") ? case_exec()
             : !strcmp(name, "many") ? case_many()
                                     : 127;
    fflush(stdout);
    return rc;
}

/* Run case `name` in this program exec'ed; its status. */
static int exec_case(const char *name)
{
    fflush(stdout);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        execl("/proc/self/exe", "test_registry_demand", "case", name, (char *)NULL);
        _exit(126);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    return WEXITSTATUS(st);
}

static void test_free_before_the_watcher_is_reported_when_needed(void **state)
{
    (void)state;
    BYVAL_NEED(byval_test_no_pidfd());
    assert_int_equal(exec_case("free"), 0);
}

static void test_exec_seen_without_a_watcher(void **state)
{
    (void)state;
    BYVAL_NEED(byval_test_no_pidfd());
    assert_int_equal(exec_case("exec"), 0);
}

static void test_one_view_too_many_starts_the_watcher(void **state)
{
    (void)state;
    BYVAL_NEED(byval_test_no_pidfd());
    assert_int_equal(exec_case("many"), 0);
}

int main(int argc, char **argv)
{
    if (argc > 2 && strcmp(argv[1], "case") == 0)
        return run_case(argv[2]);
    if (argc > 1)
        cmocka_set_test_filter(argv[1]);
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_free_before_the_watcher_is_reported_when_needed),
        cmocka_unit_test(test_exec_seen_without_a_watcher),
        cmocka_unit_test(test_one_view_too_many_starts_the_watcher),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
