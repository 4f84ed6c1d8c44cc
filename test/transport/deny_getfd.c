/* SPDX-License-Identifier: MIT */
/*
 * deny_getfd - run a command where pidfd_getfd fails with EPERM, as under
 * Yama ptrace_scope or a container seccomp profile without CAP_SYS_PTRACE:
 *   deny_getfd CMD [ARGS...]
 * A seccomp filter (inherited by every child) answers pidfd_getfd with
 * EPERM (DENY_GETFD_ERRNO=ENOSYS: with ENOSYS, as gVisor or a kernel
 * before 5.6) and allows everything else.
 */
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: deny_getfd CMD [ARGS...]\n");
        return 2;
    }
    const char *e = getenv("DENY_GETFD_ERRNO");
    unsigned err = e && strcmp(e, "ENOSYS") == 0 ? ENOSYS : EPERM;
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW), /* another arch: leave it */
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_pidfd_getfd, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (err & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {.len = sizeof(f) / sizeof(f[0]), .filter = f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
        fprintf(stderr, "deny_getfd: seccomp: %s\n", strerror(errno));
        return 77;
    }
    execvp(argv[1], argv + 1);
    fprintf(stderr, "deny_getfd: %s: %s\n", argv[1], strerror(errno));
    return 127;
}
