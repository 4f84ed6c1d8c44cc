/* SPDX-License-Identifier: MIT */
/*
 * test_resolve.c - byval_resolve_fd with real processes: an exporter child
 * owns a memfd and sends its 47-byte record through a pipe; this process
 * (the importer) resolves it with pidfd_open + pidfd_getfd. Every error
 * path must leave the importer's fd table as it found it. More cases
 * (identity flavours, fd exhaustion, arguments, threads) are in
 * test_resolve_more.c; the shared helpers in test_resolve_util.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "handles/fdcheck.h"
#include "handles/resolve.h"
#include "handles/sys.h"
#include "handles/transport.h"
#include "test/unit/test_resolve.h"

static void test_ok_and_exit_watch(void **state)
{
    exporter_t x;
    char msg[256];
    int fd = -1, pidfd = -1;
    NEED_GETFD();
    exporter_start(&x, EXP_PLAIN);
    int before = nfds();
    assert_int_equal(byval_resolve_fd(&x.rec, &self, &fd, &pidfd, msg, sizeof(msg)), BYVAL_OK);
    assert_true(fd >= 0 && pidfd >= 0);
    assert_int_equal(nfds(), before + 2);
    assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);
    check_mapping(fd);
    assert_int_equal(byval_pidfd_exited(pidfd), 0);
    /* one more fd through the same pidfd; a wrong inode is refused */
    int more = -1;
    assert_int_equal(byval_getfd_obj(pidfd, x.rec.pid, x.rec.fd, x.rec.fd_ino, 0, BYVAL_OBJ_MEMORY,
                                     &more, msg,
                                      sizeof(msg)), BYVAL_OK);
    assert_int_equal(byval_fd_inode(more), byval_fd_inode(fd));
    close(more);
    assert_int_equal(byval_getfd_obj(pidfd, x.rec.pid, x.rec.fd, x.rec.fd_ino + 1, 0,
                                     BYVAL_OBJ_MEMORY, &more, msg,
                                      sizeof(msg)), BYVAL_E_FDKIND);
    assert_int_equal(more, -1);
    /* with the record's size (a cold open through a kept pidfd): checked */
    assert_true(x.rec.size > 0);
    assert_int_equal(byval_getfd_obj(pidfd, x.rec.pid, x.rec.fd, x.rec.fd_ino, x.rec.size,
                                     BYVAL_OBJ_MEMORY, &more, msg, sizeof(msg)),
                     BYVAL_OK);
    close(more);
    assert_int_equal(byval_getfd_obj(pidfd, x.rec.pid, x.rec.fd, x.rec.fd_ino,
                                     x.rec.size + 2 * BYVAL_WIRE_PAGE, BYVAL_OBJ_MEMORY, &more,
                                     msg, sizeof(msg)),
                     BYVAL_E_FDKIND);
    assert_non_null(strstr(msg, "pages"));
    assert_int_equal(more, -1);
    exporter_stop(&x, 0);
    assert_int_equal(byval_pidfd_exited(pidfd), 1);
    check_mapping(fd); /* the duplicate outlives the exporter */
    close(fd);
    close(pidfd);
    assert_int_equal(nfds(), before - 1); /* exporter_stop closed the go pipe */
}

static void test_gone_reaped(void **state)
{
    exporter_t x;
    NEED_GETFD();
    exporter_start(&x, EXP_PLAIN);
    exporter_stop(&x, 0);
    expect_fail(&x.rec, BYVAL_E_GONE, "pidfd_open");
}

static void test_gone_zombie(void **state)
{
    exporter_t x;
    NEED_GETFD();
    exporter_start(&x, EXP_PLAIN);
    exporter_stop(&x, 1); /* exited, not reaped: pidfd_open works, its fds are gone */
    expect_fail(&x.rec, BYVAL_E_GONE, "exporter exited");
    assert_int_equal(waitpid(x.pid, NULL, 0), x.pid);
}

static void test_fd_closed_badfd(void **state)
{
    exporter_t x;
    NEED_GETFD();
    exporter_start(&x, EXP_CLOSE_FD);
    char want[64]; /* the exporter's number (not 3 where one was inherited, as under flock) */
    snprintf(want, sizeof(want), "fd %u is not open in pid", x.rec.fd);
    expect_fail(&x.rec, BYVAL_E_BADFD, want);
    exporter_stop(&x, 0);
}

static void test_fd_reused_fdkind(void **state)
{
    exporter_t x;
    NEED_GETFD();
    exporter_start(&x, EXP_REUSE_FD);
    expect_fail(&x.rec, BYVAL_E_FDKIND, "inode");
    exporter_stop(&x, 0);
}

/* A handle naming a live fd with another inode (what a forger writes, as
 * well as what a stale handle meets): the message says what was seen,
 * and claims no history it did not establish. */
static void test_mismatch_words(void **state)
{
    exporter_t x;
    char msg[512];
    int fd = -1;
    NEED_GETFD();
    exporter_start(&x, EXP_PLAIN);
    byval_record_t r = x.rec;
    r.fd_ino ^= 0x5a5a;
    expect_fail(&r, BYVAL_E_FDKIND, "stale or forged");
    assert_int_equal(byval_resolve_fd(&r, &self, &fd, NULL, msg, sizeof(msg)), BYVAL_E_FDKIND);
    assert_null(strstr(msg, "reused the number"));
    assert_null(strstr(msg, "closed it"));
    r = x.rec;
    r.size += 4096;
    assert_int_equal(byval_resolve_fd(&r, &self, &fd, NULL, msg, sizeof(msg)), BYVAL_E_FDKIND);
    assert_non_null(strstr(msg, "stale or forged"));
    assert_null(strstr(msg, "reused the number"));
    /* Another identity for a live pid: not proof that the exporter exited. */
    r = x.rec;
    r.identity ^= 0x5a5a;
    assert_int_equal(byval_resolve_fd(&r, &self, &fd, NULL, msg, sizeof(msg)), BYVAL_E_IDENTITY);
    assert_non_null(strstr(msg, "stale or forged"));
    assert_null(strstr(msg, "any more"));
    /* An fd number the process does not have: not proof that it closed it. */
    r = x.rec;
    r.fd = 1000;
    assert_int_equal(byval_resolve_fd(&r, &self, &fd, NULL, msg, sizeof(msg)), BYVAL_E_BADFD);
    assert_null(strstr(msg, "closed it"));
    assert_non_null(strstr(msg, "stale or forged"));
    exporter_stop(&x, 0);
}

static void test_size_mismatch_fdkind(void **state)
{
    exporter_t x;
    NEED_GETFD();
    exporter_start(&x, EXP_PLAIN);
    byval_record_t r = x.rec;
    r.size += 4096;
    expect_fail(&r, BYVAL_E_FDKIND, "pages");
    r.size = 4096;
    expect_fail(&r, BYVAL_E_FDKIND, "pages");
    exporter_stop(&x, 0);
}

static void test_foreign_and_identity(void **state)
{
    exporter_t x;
    NEED_GETFD();
    exporter_start(&x, EXP_PLAIN);
    byval_record_t r = x.rec;
    r.pidns++;
    expect_fail(&r, BYVAL_E_FOREIGN_NS, "namespace");
    r = x.rec;
    r.boot++;
    expect_fail(&r, BYVAL_E_FOREIGN_HOST, "boot");
    r = x.rec;
    r.identity++;
    expect_fail(&r, BYVAL_E_IDENTITY, "pid reused");
    r = x.rec;
    /* The other flavour: a pidfs inode read as a start time differs; a
     * start time where pidfs is missing cannot be verified at all. */
    r.flags ^= BYVAL_FLAG_ID_PIDFS;
    expect_fail(&r, BYVAL_E_IDENTITY, (self.id_flags & BYVAL_FLAG_ID_PIDFS) ? "start time"
                                                                           : "cannot verify");
    int fd = 77;
    assert_int_equal(byval_resolve_fd(NULL, &self, &fd, NULL, NULL, 0), BYVAL_E_INVALID);
    assert_int_equal(fd, -1);
    assert_int_equal(byval_resolve_fd(&x.rec, &self, NULL, NULL, NULL, 0), BYVAL_E_INVALID);
    exporter_stop(&x, 0);
}

/* A child importer drops to nobody and resolves a root exporter's record. */
static void test_unprivileged_perm_hint(void **state)
{
    exporter_t x;
    int res[2], ws;
    NEED_GETFD();
    if (geteuid() != 0) {
        printf("skipped: needs root to drop to another uid\n");
        skip();
    }
    exporter_start(&x, EXP_PLAIN);
    assert_int_equal(pipe2(res, O_CLOEXEC), 0);
    pid_t imp = fork();
    assert_true(imp >= 0);
    if (imp == 0) {
        char msg[512] = "";
        int fd = 77, pidfd = 77;
        if (setresgid(65534, 65534, 65534) || setresuid(65534, 65534, 65534))
            _exit(2);
        int before = nfds();
        int st = (int)byval_resolve_fd(&x.rec, &self, &fd, &pidfd, msg, sizeof(msg));
        int leak = nfds() != before || fd != -1 || pidfd != -1;
        if (write(res[1], &st, sizeof(st)) != sizeof(st) ||
            write(res[1], msg, sizeof(msg)) != sizeof(msg))
            _exit(3);
        _exit(leak ? 4 : 0);
    }
    close(res[1]);
    int st = -1;
    char msg[512] = "";
    assert_int_equal(read(res[0], &st, sizeof(st)), sizeof(st));
    assert_int_equal(read(res[0], msg, sizeof(msg)), sizeof(msg));
    close(res[0]);
    assert_true(waitpid(imp, &ws, 0) == imp && WIFEXITED(ws));
    assert_int_equal(WEXITSTATUS(ws), 0); /* no fd leaked in the importer */
    printf("    %s: %s\n", byval_status_str((byval_status_t)st), msg);
    assert_int_equal(st, BYVAL_E_PERM);
    assert_non_null(strstr(msg, "hint: ptrace access denied"));
    assert_non_null(strstr(msg, "/proc/")); /* refused before pidfd_getfd */
    exporter_stop(&x, 0);
}

static void test_self_fields_and_reset(void **state)
{
    struct stat st;
    struct statfs sfs;
    char boot[64];
    byval_self_t s;
    assert_int_equal(byval_self_get(&s), 0);
    assert_int_equal(s.pid, getpid());
    assert_int_equal(stat("/proc/self/ns/pid", &st), 0);
    assert_int_equal(s.pidns, (uint32_t)st.st_ino);
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    assert_non_null(f);
    assert_non_null(fgets(boot, sizeof(boot), f));
    fclose(f);
    assert_int_equal(s.boot, byval_fnv1a32(boot, 36));
    int pidfd = (int)syscall(SYS_pidfd_open, getpid(), 0); /* may be ENOSYS: start time */
    int pidfs = pidfd >= 0 && fstatfs(pidfd, &sfs) == 0 &&
                (uint32_t)sfs.f_type == BYVAL_PIDFS_MAGIC && fstat(pidfd, &st) == 0;
    printf("    pidfs: %s\n", pidfs ? "yes" : "no (identity is the start time)");
    if (pidfd >= 0)
        close(pidfd);
    assert_int_equal(s.id_flags, pidfs ? BYVAL_FLAG_ID_PIDFS : 0);
    uint64_t start = 0;
    if (pidfs)
        assert_int_equal(s.identity, st.st_ino);
    else
        assert_true(byval_proc_start_time(getpid(), &start) == 0 && s.identity == start);
    byval_record_t rec = {.flags = 0};
    byval_record_set_exporter(&rec, &s);
    assert_true(rec.pid == s.pid && rec.pidns == s.pidns && rec.boot == s.boot &&
                rec.identity == s.identity && rec.flags == s.id_flags &&
                rec.version == BYVAL_WIRE_VERSION);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        byval_self_t a, b;
        int bad = byval_self_get(&a) != 0 || a.pid != s.pid; /* still cached */
        byval_self_reset();
        bad |= (byval_self_get(&b) != 0 || b.pid != (uint32_t)getpid() ||
                b.identity == s.identity || b.pidns != s.pidns) << 1;
        _exit(bad);
    }
    int ws;
    assert_true(waitpid(child, &ws, 0) == child && WIFEXITED(ws));
    assert_int_equal(WEXITSTATUS(ws), 0);
    assert_string_equal(byval_status_str(BYVAL_E_PERM), "permission denied");
    assert_string_equal(byval_status_str((byval_status_t)99), "unknown status");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ok_and_exit_watch),
        cmocka_unit_test(test_gone_reaped),
        cmocka_unit_test(test_gone_zombie),
        cmocka_unit_test(test_fd_closed_badfd),
        cmocka_unit_test(test_fd_reused_fdkind),
        cmocka_unit_test(test_mismatch_words),
        cmocka_unit_test(test_size_mismatch_fdkind),
        cmocka_unit_test(test_foreign_and_identity),
        cmocka_unit_test(test_unprivileged_perm_hint),
        cmocka_unit_test(test_self_fields_and_reset),
        cmocka_unit_test(test_start_time_flavour),
        cmocka_unit_test(test_start_time_parser),
        cmocka_unit_test(test_identity_unverifiable),
        cmocka_unit_test(test_out_of_fds),
        cmocka_unit_test(test_invalid_records),
        cmocka_unit_test(test_getfd_more_errors),
        cmocka_unit_test(test_proof_held_across_getfd),
        cmocka_unit_test(test_self_threads),
    };
    return cmocka_run_group_tests(tests, resolve_setup, NULL);
}
