/* SPDX-License-Identifier: MIT */
/*
 * sys.h - ipcbyval's own system calls, made without the exported
 * syscall().
 *
 * The shim interposes syscall() and pidfd_getfd() to rescue OTHER
 * libraries' refused pidfd_getfd (shim/syscall.c). Our own calls must not
 * go through that entry: the data would run back up the house (handles/
 * into shim/), and the rescue would have to tell our calls from theirs by
 * return address, which a C fallback cannot do reliably. So handles/ and
 * cache/ enter the kernel here, directly: a private entry no one else can
 * reach. Errors are returned the C library's way (-1, errno).
 */
#ifndef BYVAL_HANDLES_SYS_H
#define BYVAL_HANDLES_SYS_H

#include <errno.h>
#include <sys/syscall.h>
#include <sys/types.h>

/* glibc 2.36 headers have both; older ones lack them (x86-64 and the
 * generic table share these numbers). */
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif

/* A system call with up to six arguments: the kernel's result (-errno
 * on failure). */
#if defined(__x86_64__)
static inline long byval_sys6(long nr, long a, long b, long c, long d, long e, long f)
{
    long r;
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    register long r9 __asm__("r9") = f;
    __asm__ volatile("syscall"
                     : "=a"(r)
                     : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    return r;
}
#elif defined(__aarch64__)
static inline long byval_sys6(long nr, long a, long b, long c, long d, long e, long f)
{
    register long x8 __asm__("x8") = nr;
    register long x0 __asm__("x0") = a;
    register long x1 __asm__("x1") = b;
    register long x2 __asm__("x2") = c;
    register long x3 __asm__("x3") = d;
    register long x4 __asm__("x4") = e;
    register long x5 __asm__("x5") = f;
    __asm__ volatile("svc 0"
                     : "+r"(x0)
                     : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5)
                     : "memory");
    return x0;
}
#else
/* Elsewhere the C library's syscall(); the shim's interposer then sees
 * our calls too, and may rescue one the kernel refused (the fd it brings
 * is checked like any other, so only the work is doubled). */
#include <unistd.h>
static inline long byval_sys6(long nr, long a, long b, long c, long d, long e, long f)
{
    long r = syscall(nr, a, b, c, d, e, f);
    return r < 0 ? -errno : r;
}
#endif

/* With three arguments. */
#define byval_sys3(nr, a, b, c) byval_sys6(nr, a, b, c, 0, 0, 0)

/* The kernel's -errno into the C library's convention. */
static inline int byval_sys_ret(long r)
{
    if (r < 0 && r > -4096) {
        errno = (int)-r;
        return -1;
    }
    return (int)r;
}

static inline int byval_pidfd_open(pid_t pid, unsigned int flags)
{
    return byval_sys_ret(byval_sys3(SYS_pidfd_open, pid, (long)flags, 0));
}

static inline int byval_pidfd_getfd(int pidfd, int fd, unsigned int flags)
{
    return byval_sys_ret(byval_sys3(SYS_pidfd_getfd, pidfd, fd, (long)flags));
}

#endif
