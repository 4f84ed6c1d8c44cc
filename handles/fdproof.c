/* SPDX-License-Identifier: MIT */
/*
 * fdproof.c - proving that an fd number still refers to the object that
 * was exported under it (see fdproof.h).
 *
 * Numbers are reused after close, and every CUDA VMM fd is a
 * /dev/nvidiactl file: one inode shared by every open of the device,
 * including the driver's own control fds that were never exported. An
 * inode comparison cannot tell those apart, and kcmp (the kernel's own
 * answer) is denied by the same container profiles that deny pidfd_getfd.
 * Holding a duplicate would prove it but would keep the memory alive after
 * the application freed it and closed its fd (a change of lifetime, which
 * ipcbyval must never cause).
 *
 * The proof used: an epoll interest list is keyed by (open file, fd
 * number), holds no reference on the file, and drops the key when the
 * file is released (eventpoll_release at the last close). We add the fd
 * to a private epoll instance when it is recorded (no events asked, and
 * nobody waits on it); later EPOLL_CTL_MOD on N succeeds only if N refers
 * to the same open file as then (ENOENT for any other file at N, EBADF
 * when N is closed). An exact, reference-free check that needs neither
 * kcmp nor /proc. Both files that matter poll: /dev/nvidiactl
 * (nvidia_poll) and dma-bufs; so do sockets and pipes.
 *
 * Files that do not poll (regular files: memfds, the test drivers'
 * memory) have an inode that is the object itself: the same (device,
 * inode) and access mode is the same memory whatever the open, so that is
 * what is compared. Any other file that does not poll cannot be proven.
 *
 * The application's fds are read by number here (on the broker's thread)
 * while the application may close or reuse them at any moment: that race
 * is what the checks are for. Raw system calls, so that a sanitizer's
 * model of fds as memory (ThreadSanitizer counts a close as a write) does
 * not report the race this file exists to handle.
 */
#include "handles/fdproof.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "handles/sys.h"

static int fd_stat(int fd, struct stat *st)
{
#ifdef SYS_fstat
    return byval_sys_ret(byval_sys3(SYS_fstat, fd, (long)st, 0));
#else
    return byval_sys_ret(byval_sys4(SYS_newfstatat, fd, (long)"", (long)st, AT_EMPTY_PATH));
#endif
}

static int fd_ctl(int fd, int cmd, long arg)
{
    return byval_sys_ret(byval_sys3(SYS_fcntl, fd, cmd, arg));
}

static int ep_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
    return byval_sys_ret(byval_sys4(SYS_epoll_ctl, epfd, op, fd, (long)ev));
}

int byval_fdproof_take(int epfd, int fd, byval_fdproof_t *p)
{
    struct stat st;
    int fl;
    if (fd < 0 || fd_stat(fd, &st) != 0 || (fl = fd_ctl(fd, F_GETFL, 0)) < 0) {
        errno = EBADF;
        return -1;
    }
    *p = (byval_fdproof_t){.fd = fd, .accmode = fl & O_ACCMODE, .dev = st.st_dev, .ino = st.st_ino};
    struct epoll_event ev = {.events = 0, .data.fd = fd};
    if (ep_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) == 0 || errno == EEXIST)
        p->kind = BYVAL_PROOF_EPOLL;
    else if (errno == EPERM && S_ISREG(st.st_mode))
        p->kind = BYVAL_PROOF_INODE; /* does not poll, and its inode is the object */
    else {
        errno = errno == EPERM ? ENOTSUP : errno; /* cannot be proven later */
        return -1;
    }
    return 0;
}

int byval_fdproof_same(int epfd, const byval_fdproof_t *p)
{
    struct stat st;
    if (fd_stat(p->fd, &st) != 0 || st.st_dev != p->dev || st.st_ino != p->ino)
        return 0;
    if (p->kind == BYVAL_PROOF_EPOLL) {
        struct epoll_event ev = {.events = 0, .data.fd = p->fd};
        return ep_ctl(epfd, EPOLL_CTL_MOD, p->fd, &ev) == 0;
    }
    int fl = fd_ctl(p->fd, F_GETFL, 0);
    return fl >= 0 && (fl & O_ACCMODE) == p->accmode;
}

int byval_fdproof_dup(int epfd, const byval_fdproof_t *p, int *dup_p)
{
    *dup_p = -1;
    if (!byval_fdproof_same(epfd, p))
        return -ESTALE; /* closed, or its number reused */
    int d = fd_ctl(p->fd, F_DUPFD_CLOEXEC, 0);
    if (d < 0)
        return -errno;
    if (!byval_fdproof_same(epfd, p)) {
        close(d); /* changed under us: what we hold may be the new file */
        return -ESTALE;
    }
    *dup_p = d;
    return 0;
}

void byval_fdproof_drop(int epfd, const byval_fdproof_t *p)
{
    if (p->kind == BYVAL_PROOF_EPOLL && byval_fdproof_same(epfd, p))
        (void)ep_ctl(epfd, EPOLL_CTL_DEL, p->fd, NULL);
}
