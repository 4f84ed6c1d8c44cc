/* SPDX-License-Identifier: MIT */
/*
 * test_resolve.c - byval_resolve_fd with real processes: an exporter child
 * owns a memfd and sends its 47-byte record through a pipe; this process
 * (the importer) resolves it with pidfd_open + pidfd_getfd. Every error
 * path must leave the importer's fd table as it found it.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "handles/resolve.h"
#include "handles/resolve_internal.h"

#define SZ (3 * 4096 + 100) /* not a page multiple: the record rounds up */

static byval_self_t self;
static const char *skip_reason;

enum { EXP_PLAIN, EXP_CLOSE_FD, EXP_REUSE_FD };

typedef struct exporter {
    pid_t pid;
    int go;             /* write end: a byte lets the exporter exit */
    byval_record_t rec; /* as decoded from the pipe */
} exporter_t;

static uint8_t pattern(size_t i)
{
    return (uint8_t)(i * 7 + 3);
}

static int nfds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    while (d && readdir(d))
        n++;
    if (d)
        closedir(d);
    return n;
}

static int new_memfd(size_t size, int fill)
{
    int fd = memfd_create("byval-test", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)size) != 0)
        _exit(90);
    for (size_t i = 0; fill && i < size; i++) {
        uint8_t c = pattern(i);
        if (pwrite(fd, &c, 1, (off_t)i) != 1)
            _exit(91);
    }
    return fd;
}

static void exporter_child(int mode, int out, int go)
{
    byval_self_t me;
    byval_self_reset(); /* the cached identity is the parent's */
    int fd = new_memfd(SZ, 1);
    byval_record_t rec = {.kind = BYVAL_KIND_ZE_MEM, .fd = (uint32_t)fd, .alloc_id = 42,
                          .fd_ino = (uint32_t)byval_fd_inode(fd), .size = SZ};
    uint8_t wire[BYVAL_WIRE_LEN];
    if (byval_self_get(&me) != 0)
        _exit(92);
    byval_record_set_exporter(&rec, &me);
    if (mode == EXP_CLOSE_FD)
        close(fd);
    if (mode == EXP_REUSE_FD) { /* same number, another object of the same size */
        int other = new_memfd(SZ, 0);
        if (dup2(other, fd) != fd) /* closes the exported one */
            _exit(93);
        close(other);
    }
    if (byval_wire_encode(&rec, wire) != BYVAL_WIRE_OK ||
        write(out, wire, sizeof(wire)) != (ssize_t)sizeof(wire))
        _exit(94);
    char c;
    _exit(read(go, &c, 1) == 1 ? 0 : 95);
}

static void exporter_start(exporter_t *x, int mode)
{
    int rec_pipe[2], go_pipe[2];
    uint8_t wire[BYVAL_WIRE_LEN];
    assert_int_equal(pipe2(rec_pipe, O_CLOEXEC), 0);
    assert_int_equal(pipe2(go_pipe, O_CLOEXEC), 0);
    x->pid = fork();
    assert_true(x->pid >= 0);
    if (x->pid == 0) {
        close(rec_pipe[0]);
        close(go_pipe[1]);
        exporter_child(mode, rec_pipe[1], go_pipe[0]);
    }
    close(rec_pipe[1]);
    close(go_pipe[0]);
    x->go = go_pipe[1];
    assert_int_equal(read(rec_pipe[0], wire, sizeof(wire)), sizeof(wire));
    close(rec_pipe[0]);
    assert_int_equal(byval_wire_decode(wire, sizeof(wire), &x->rec), BYVAL_WIRE_OK);
    assert_int_equal(x->rec.pid, x->pid);
}

/* Let the exporter exit; reap it unless zombie, then leave it a zombie. */
static void exporter_stop(exporter_t *x, int zombie)
{
    siginfo_t si;
    int ws;
    assert_int_equal(write(x->go, "x", 1), 1);
    close(x->go);
    if (zombie) {
        assert_int_equal(waitid(P_PID, (id_t)x->pid, &si, WEXITED | WNOWAIT), 0);
        return;
    }
    assert_int_equal(waitpid(x->pid, &ws, 0), x->pid);
    assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
}

/* Resolve rec, expect a failure with status want, a one-line message
 * containing needle, no fd handed out and no fd leaked. */
static void expect_fail(const byval_record_t *rec, byval_status_t want, const char *needle)
{
    char msg[512];
    int fd = 77, pidfd = 77, before = nfds();
    byval_status_t st = byval_resolve_fd(rec, &self, &fd, &pidfd, msg, sizeof(msg));
    printf("    %s: %s\n", byval_status_str(st), msg);
    if (st != want)
        fail_msg("got %s, expected %s (%s)", byval_status_str(st), byval_status_str(want), msg);
    assert_true(fd == -1 && pidfd == -1);
    assert_true(msg[0] && !strchr(msg, '\n'));
    if (needle && !strstr(msg, needle))
        fail_msg("message lacks \"%s\": %s", needle, msg);
    assert_int_equal(nfds(), before);
}

static void check_mapping(int fd)
{
    uint8_t *p = mmap(NULL, SZ, PROT_READ, MAP_SHARED, fd, 0);
    assert_true(p != MAP_FAILED);
    for (size_t i = 0; i < SZ; i++)
        if (p[i] != pattern(i))
            fail_msg("byte %zu is %u, expected %u", i, p[i], pattern(i));
    munmap(p, SZ);
}

#define NEED_GETFD()                                                                               \
    do {                                                                                           \
        if (skip_reason) {                                                                         \
            printf("skipped: %s\n", skip_reason);                                                  \
            skip();                                                                                \
        }                                                                                          \
    } while (0)

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
    assert_int_equal(byval_getfd_more(pidfd, x.rec.pid, x.rec.fd, x.rec.fd_ino, &more, msg,
                                      sizeof(msg)), BYVAL_OK);
    assert_int_equal(byval_fd_inode(more), byval_fd_inode(fd));
    close(more);
    assert_int_equal(byval_getfd_more(pidfd, x.rec.pid, x.rec.fd, x.rec.fd_ino + 1, &more, msg,
                                      sizeof(msg)), BYVAL_E_FDKIND);
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
    exporter_stop(&x, 1); /* exited, not reaped: pidfd_open works, getfd cannot */
    expect_fail(&x.rec, BYVAL_E_GONE, "pidfd_getfd");
    assert_int_equal(waitpid(x.pid, NULL, 0), x.pid);
}

static void test_fd_closed_badfd(void **state)
{
    exporter_t x;
    NEED_GETFD();
    exporter_start(&x, EXP_CLOSE_FD);
    expect_fail(&x.rec, BYVAL_E_BADFD, "pidfd_getfd");
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
    expect_fail(&r, BYVAL_E_IDENTITY, "reused");
    r = x.rec;
    r.flags ^= BYVAL_FLAG_ID_PIDFS; /* checked by start time instead: differs */
    expect_fail(&r, BYVAL_E_IDENTITY, "reused");
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
    assert_non_null(strstr(msg, "hint"));
    assert_non_null(strstr(msg, "pidfd_getfd"));
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
    int pidfd = (int)syscall(SYS_pidfd_open, getpid(), 0);
    assert_true(pidfd >= 0);
    int pidfs = fstatfs(pidfd, &sfs) == 0 && (uint32_t)sfs.f_type == BYVAL_PIDFS_MAGIC;
    printf("    pidfs: %s\n", pidfs ? "yes" : "no (identity is the start time)");
    assert_int_equal(fstat(pidfd, &st), 0);
    close(pidfd);
    assert_int_equal(s.id_flags, pidfs ? BYVAL_FLAG_ID_PIDFS : 0);
    if (pidfs)
        assert_int_equal(s.identity, st.st_ino);
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

static int setup(void **state)
{
    if (byval_self_get(&self) != 0)
        return -1;
    int pidfd = (int)syscall(SYS_pidfd_open, getpid(), 0);
    if (pidfd < 0 && errno == ENOSYS)
        skip_reason = "pidfd_open is ENOSYS on this kernel";
    int dup = pidfd < 0 ? -1 : (int)syscall(SYS_pidfd_getfd, pidfd, 0, 0);
    if (pidfd >= 0 && dup < 0 && errno == ENOSYS)
        skip_reason = "pidfd_getfd is ENOSYS (gVisor or a kernel before 5.6)";
    if (dup >= 0)
        close(dup);
    if (pidfd >= 0)
        close(pidfd);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ok_and_exit_watch),
        cmocka_unit_test(test_gone_reaped),
        cmocka_unit_test(test_gone_zombie),
        cmocka_unit_test(test_fd_closed_badfd),
        cmocka_unit_test(test_fd_reused_fdkind),
        cmocka_unit_test(test_size_mismatch_fdkind),
        cmocka_unit_test(test_foreign_and_identity),
        cmocka_unit_test(test_unprivileged_perm_hint),
        cmocka_unit_test(test_self_fields_and_reset),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
