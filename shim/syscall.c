/* SPDX-License-Identifier: MIT */
/*
 * syscall.c - the pidfd_getfd rescue, importer side: other libraries' own
 * syscall(SYS_pidfd_getfd) or pidfd_getfd() (PyTorch, Intel's driver, UMF,
 * MPICH, oneCCL, UCX), refused by Yama or seccomp (EPERM) or missing in a
 * sandbox (ENOSYS), served by the exporter's broker (handles/rescue.c).
 * glibc's syscall() is an ordinary exported function: ours wins for every
 * library loaded after us. pidfd_open is not interposed: a refused one
 * leaves no pidfd to name the process. Only after the kernel refused; its
 * errno returned whenever the rescue cannot help (no broker, a number not
 * exported, another uid), and never with flags, IPCBYVAL_TRANSPORT=pidfd or
 * IPCBYVAL_ENABLE=0. ipcbyval's own calls enter the kernel through
 * handles/sys.h, never here. Every other system call pays a compare and a
 * tail call (x86-64: an assembly entry; elsewhere six arguments forwarded,
 * as glibc's syscall reads six).
 */
#include <errno.h>
#include <stdarg.h>
#include <unistd.h>

#include "cache/config.h"
#include "cache/init.h"
#include "cache/log.h"
#include "cache/stats.h"
#include "handles/rescue.h"
#include "handles/sys.h"
#include "shim/dlsym_next.h"

static void *libc_syscall;

/* The next definition of name after ours (the C library's), resolved once;
 * allocation-free (dlsym_next.c), so safe in a constructor. */
static void *next_fn(void **slot, const char *name)
{
    void *f = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
    if (!f)
        __atomic_store_n(slot, f = byval_dlsym_next((const void *)next_fn, name), __ATOMIC_RELEASE);
    return f;
}

/* The C library's syscall with six arguments, or ENOSYS where there is none.
 * The x86-64 entry jumps here until that syscall is known. */
static long forward(long nr, long a1, long a2, long a3, long a4, long a5, long a6)
{
    long (*next)(long, ...) = next_fn(&libc_syscall, "syscall");
    return next ? next(nr, a1, a2, a3, a4, a5, a6) : (errno = ENOSYS, -1);
}

/* pidfd_getfd(pidfd, fd, flags) returned r, errno set: a refusal the
 * rescue may work around (EPERM, ENOSYS) becomes the rescued fd with errno =
 * saved (untouched, as on a native success); anything else stays as it was. */
static long rescue(long r, int pidfd, int fd, unsigned int flags, int saved)
{
    int err = errno, got = -1;
    uint32_t pid = 0;
    char msg[512];
    if (r >= 0 || (err != EPERM && err != ENOSYS) || flags != 0 || !byval_enabled() ||
        byval_cfg.transport == BYVAL_TRANSPORT_PIDFD) {
        errno = err;
        return r;
    }
    unsigned long long t0 = BYVAL_LOG_T0();
    const char *denial = err == ENOSYS ? "ENOSYS: this kernel or sandbox has no pidfd_getfd"
                                       : "EPERM: refused by Yama ptrace_scope or a seccomp profile";
    if (byval_rescue_getfd(pidfd, fd, &got, &pid, msg, sizeof(msg)) != BYVAL_OK) {
        BYVAL_STAT_INC(rescue_failed);
        BYVAL_LOG_DEBUG("open: not rescued: another library's pidfd_getfd(pid %u, fd %d) was "
                        "refused (%s): %s",
                        pid, fd, denial, msg);
        errno = err;
        return r;
    }
    BYVAL_STAT_INC(rescued);
    static int said;
    if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
        BYVAL_LOG_INFO("pidfd_getfd(pid %u, fd %d) was refused (%s): the fd was fetched from "
                       "that process's ipcbyval broker instead (said once; IPCBYVAL_STATS counts "
                       "them)",
                       pid, fd, denial);
    else
        BYVAL_LOG_DEBUG("open: rescued: another library's pidfd_getfd(pid %u, fd %d), served by "
                        "that process's socket, %.1f us",
                        pid, fd, byval_log_us(t0));
    errno = saved;
    return got;
}

/* syscall(SYS_pidfd_getfd, ...): the x86-64 entry below jumps here with
 * the caller's arguments untouched (hidden, as its other target: the entry's
 * direct jumps stay inside the library). */
__attribute__((visibility("hidden"), used)) long
byval_syscall_getfd(long nr, long a1, long a2, long a3, long a4, long a5, long a6)
{
    int saved = errno;
    return rescue(forward(nr, a1, a2, a3, a4, a5, a6), (int)a1, (int)a2, (unsigned int)a3, saved);
}

#if defined(__x86_64__)
/* Where the entry jumps for any number but pidfd_getfd's. */
__attribute__((visibility("hidden"))) void *byval_syscall_next = (void *)forward;

__attribute__((constructor)) static void syscall_resolve(void)
{
    void *next = next_fn(&libc_syscall, "syscall");
    if (next)
        __atomic_store_n(&byval_syscall_next, next, __ATOMIC_RELEASE);
}

/* long syscall(long number, ...): the number is in %rdi; every argument
 * register and the stack are passed on untouched by a tail jump. */
__asm__(".text\n"
        ".globl syscall\n"
        ".type syscall, @function\n"
        ".p2align 4\n"
        "syscall:\n"
        "    .cfi_startproc\n"
        "    endbr64\n"
        "    cmpq $438, %rdi\n" /* SYS_pidfd_getfd */
        "    je byval_syscall_getfd\n"
        "    jmp *byval_syscall_next(%rip)\n"
        "    .cfi_endproc\n"
        ".size syscall, .-syscall\n");
_Static_assert(SYS_pidfd_getfd == 438, "the entry compares with 438");
#else
/* Elsewhere: six arguments forwarded, as the C library's syscall reads. */
__attribute__((visibility("default"))) long syscall(long nr, ...)
{
    va_list ap;
    long a[6];
    va_start(ap, nr);
    for (int i = 0; i < 6; i++)
        a[i] = va_arg(ap, long);
    va_end(ap);
    if (nr == SYS_pidfd_getfd)
        return byval_syscall_getfd(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
    return forward(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
}
#endif

/* glibc 2.36's own stub, which does not go through syscall(). */
__attribute__((visibility("default"))) int pidfd_getfd(int pidfd, int targetfd, unsigned int flags)
{
    static void *fn;
    int saved = errno;
    int (*f)(int, int, unsigned int) = next_fn(&fn, "pidfd_getfd");
    int r = f ? f(pidfd, targetfd, flags) /* else a C library before 2.36 */
              : (int)forward(SYS_pidfd_getfd, pidfd, targetfd, flags, 0, 0, 0);
    return (int)rescue(r, pidfd, targetfd, flags, saved);
}
