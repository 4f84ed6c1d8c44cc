/* SPDX-License-Identifier: MIT */
/*
 * test_once.c - byval_once (cache/locks.c): one run however many threads
 * ask, a nested once inside an init, and its fork story: a child forked
 * while another thread ran an init runs it itself, as with glibc's
 * pthread_once (with pthread_once under ThreadSanitizer or musl, the
 * child's first use waited for ever for a thread it does not have:
 * test_stress's fork children).
 */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "cache/locks.h"

/* ThreadSanitizer: the fork child sees the parent's thread as never
 * joined (an artefact of fork, not a leak). */
const char *__tsan_default_options(void);
const char *__tsan_default_options(void)
{
    return "die_after_fork=0:report_thread_leaks=0";
}

static byval_once_t slow_once = BYVAL_ONCE_INIT, inner_once = BYVAL_ONCE_INIT,
                    outer_once = BYVAL_ONCE_INIT;
static int slow_runs, inner_runs, outer_runs, in_slow;

static void slow_init(void)
{
    __atomic_store_n(&in_slow, 1, __ATOMIC_RELEASE);
    usleep(300 * 1000); /* a fork lands here */
    __atomic_add_fetch(&slow_runs, 1, __ATOMIC_RELEASE);
}

static void *slow_thread(void *arg)
{
    (void)arg;
    byval_once(&slow_once, slow_init);
    return NULL;
}

static void test_fork_during_an_init_runs_it_in_the_child(void **state)
{
    (void)state;
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, slow_thread, NULL), 0);
    while (!__atomic_load_n(&in_slow, __ATOMIC_ACQUIRE))
        usleep(1000);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(10); /* a child that waits for the init for ever dies of SIGALRM */
        int before = __atomic_load_n(&slow_runs, __ATOMIC_ACQUIRE);
        byval_once(&slow_once, slow_init);
        byval_once(&slow_once, slow_init); /* and only once */
        _exit(before == 0 && __atomic_load_n(&slow_runs, __ATOMIC_ACQUIRE) == 1 ? 0 : 3);
    }
    assert_true(pid > 0);
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st)); /* not killed by its alarm */
    assert_int_equal(WEXITSTATUS(st), 0); /* the child ran the init, once */
    pthread_join(t, NULL);
    assert_int_equal(slow_runs, 1);
}

static void inner_init(void)
{
    inner_runs++;
}

static void outer_init(void)
{
    byval_once(&inner_once, inner_init); /* another once inside an init */
    outer_runs++;
}

static void *outer_thread(void *arg)
{
    (void)arg;
    byval_once(&outer_once, outer_init);
    return NULL;
}

static void test_once_across_threads_and_nested(void **state)
{
    (void)state;
    pthread_t t[8];
    for (int i = 0; i < 8; i++)
        assert_int_equal(pthread_create(&t[i], NULL, outer_thread, NULL), 0);
    for (int i = 0; i < 8; i++)
        pthread_join(t[i], NULL);
    assert_int_equal(outer_runs, 1);
    assert_int_equal(inner_runs, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_once_across_threads_and_nested),
        cmocka_unit_test(test_fork_during_an_init_runs_it_in_the_child),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
