/* SPDX-License-Identifier: MIT */
/*
 * test_registry_attach.c - where an importer finds an exporter's registry
 * (issue 23): at BYVAL_REG_FD_HINT, without listing the exporter's fd
 * table (an importer that cannot list a directory still attaches); where
 * the program holds that number itself, or holds a look-alike there (a
 * memfd of the page's name and size, unsealed), the list of the table
 * finds the real one; a process that publishes nothing still has no view.
 */
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "handles/registry.h"
#include "handles/registry_view.h"
#include "handles/resolve.h"
#include "handles/transport.h"
#include "test/unit/test_skip.h"

#define KEY BYVAL_REG_KEY(1, 78)

enum { HINT_FREE, HINT_TAKEN, HINT_LOOKALIKE, NO_REGISTRY };

/* An exporter: fd BYVAL_REG_FD_HINT as `how` says, then KEY published;
 * its record to the parent; it waits for EOF on cmd. */
static pid_t exporter(int how, int *cmd_wr, byval_record_t *rec)
{
    int cmd[2], out[2];
    if (pipe(cmd) != 0 || pipe(out) != 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        close(cmd[1]);
        close(out[0]);
        byval_self_reset(); /* as the library's fork handler does */
        byval_self_t self;
        byval_record_t r = {0};
        byval_self_get(&self);
        byval_record_set_exporter(&r, &self);
        if (how == HINT_TAKEN && dup2(0, BYVAL_REG_FD_HINT) != BYVAL_REG_FD_HINT)
            _exit(2);
        if (how == HINT_LOOKALIKE) {
            int m = memfd_create(BYVAL_REG_NAME, 0);
            if (m < 0 || ftruncate(m, BYVAL_REG_BYTES) != 0 ||
                dup2(m, BYVAL_REG_FD_HINT) != BYVAL_REG_FD_HINT)
                _exit(2);
            close(m);
        }
        if (how != NO_REGISTRY && byval_reg_add(KEY, 5, 3, 4096) != 0)
            _exit(3);
        (void)!write(out[1], &r, sizeof(r));
        char c;
        (void)!read(cmd[0], &c, 1);
        _exit(0);
    }
    close(cmd[0]);
    close(out[1]);
    int ok = pid > 0 && read(out[0], rec, sizeof(*rec)) == (ssize_t)sizeof(*rec);
    close(out[0]);
    *cmd_wr = cmd[1];
    return ok ? pid : -1;
}

/* No directory can be listed from here on (getdents64 fails EPERM). */
static int deny_listing(void)
{
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_getdents64, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {.len = sizeof(f) / sizeof(f[0]), .filter = f};
    return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
                   prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0
               ? 0
               : -1;
}

/* In a child (listing denied when asked): does the attach find KEY live?
 * 0 yes, 1 no view, 2 no KEY, 3 the filter could not be set. */
static int attach_in_child(const byval_record_t *rec, int no_listing)
{
    pid_t pid = fork();
    if (pid == 0) {
        if (no_listing && deny_listing() != 0)
            _exit(3);
        char msg[512] = "";
        int pidfd = (int)syscall(SYS_pidfd_open, (pid_t)rec->pid, 0);
        byval_reg_view_t *v = byval_reg_attach(rec, BYVAL_MODE_PIDFD, pidfd, msg, sizeof(msg));
        if (!v) {
            printf("attach: %s\n", msg);
            _exit(1);
        }
        uint64_t serial = 0;
        _exit(byval_reg_find(v, KEY, 5, &serial) ? 0 : 2);
    }
    int st = -1;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static const char *cannot_run(void)
{
    struct rlimit rl;
    int fd = (int)syscall(SYS_pidfd_open, getpid(), 0);
    if (fd < 0)
        return "pidfd_open is not available";
    close(fd);
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur <= BYVAL_REG_FD_HINT)
        return "RLIMIT_NOFILE is below the registry's fd number";
    return NULL;
}

static void run(int how, int no_listing, int want)
{
    byval_record_t rec;
    int cmd = -1;
    pid_t pid = exporter(how, &cmd, &rec);
    assert_true(pid > 0);
    int got = attach_in_child(&rec, no_listing);
    close(cmd);
    waitpid(pid, NULL, 0);
    assert_int_not_equal(got, 3);
    assert_int_equal(got, want);
}

/* Fails on a tree that lists /proc/PID/fd for every attach. */
static void test_attach_lists_nothing(void **state)
{
    BYVAL_NEED(cannot_run());
    run(HINT_FREE, 1, 0);
}

static void test_hint_taken_falls_back_to_the_list(void **state)
{
    BYVAL_NEED(cannot_run());
    run(HINT_TAKEN, 0, 0);
    run(HINT_TAKEN, 1, 1); /* and only the list finds it */
}

static void test_lookalike_at_the_hint_is_not_taken(void **state)
{
    BYVAL_NEED(cannot_run());
    run(HINT_LOOKALIKE, 0, 0);
}

static void test_no_registry_no_view(void **state)
{
    BYVAL_NEED(cannot_run());
    run(NO_REGISTRY, 0, 1);
    run(NO_REGISTRY, 1, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attach_lists_nothing),
        cmocka_unit_test(test_hint_taken_falls_back_to_the_list),
        cmocka_unit_test(test_lookalike_at_the_hint_is_not_taken),
        cmocka_unit_test(test_no_registry_no_view),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
