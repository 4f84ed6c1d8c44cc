/* SPDX-License-Identifier: MIT */
/* test_resolve_util.c - the forked exporter and the checks every
 * test_resolve test shares (see test_resolve.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "handles/fdcheck.h"
#include "handles/resolve.h"
#include "handles/sys.h"
#include "handles/transport.h"
#include "test/unit/test_resolve.h"

byval_self_t self;
const char *skip_reason;

uint8_t pattern(size_t i)
{
    return (uint8_t)(i * 7 + 3);
}

int nfds(void)
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

void exporter_start(exporter_t *x, int mode)
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

void exporter_stop(exporter_t *x, int zombie)
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

void expect_fail(const byval_record_t *rec, byval_status_t want, const char *needle)
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
    /* The same verdict without a message buffer (nothing written). */
    fd = 77;
    assert_int_equal(byval_resolve_fd(rec, &self, &fd, NULL, NULL, 0), want);
    assert_int_equal(fd, -1);
    assert_int_equal(nfds(), before);
}

void check_mapping(int fd)
{
    uint8_t *p = mmap(NULL, SZ, PROT_READ, MAP_SHARED, fd, 0);
    assert_true(p != MAP_FAILED);
    for (size_t i = 0; i < SZ; i++)
        if (p[i] != pattern(i))
            fail_msg("byte %zu is %u, expected %u", i, p[i], pattern(i));
    munmap(p, SZ);
}

int resolve_setup(void **state)
{
    if (byval_self_get(&self) != 0)
        return -1;
    int pidfd = (int)syscall(SYS_pidfd_open, getpid(), 0);
    if (pidfd < 0 && errno == ENOSYS)
        skip_reason = "pidfd_open is ENOSYS on this kernel (before 5.3, or a sandbox)";
    int dup = pidfd < 0 ? -1 : (int)syscall(SYS_pidfd_getfd, pidfd, 0, 0);
    if (pidfd >= 0 && dup < 0 && errno == ENOSYS)
        skip_reason = "pidfd_getfd is ENOSYS (gVisor, or a kernel before 5.6)";
    if (dup >= 0)
        close(dup);
    if (pidfd >= 0)
        close(pidfd);
    return 0;
}
