/* SPDX-License-Identifier: MIT */
/*
 * fdproof.c - that an fd number still refers to the object exported under
 * it (fdproof.h). Numbers are reused after close, every CUDA VMM fd is
 * /dev/nvidiactl (one inode for all), kcmp is denied where pidfd_getfd is,
 * and holding a duplicate would keep freed memory alive.
 *
 * The proof: an epoll interest list is keyed by (open file, fd number),
 * holds no reference, and drops the key when the file is released. The
 * fd is added to a private epoll instance when recorded; later
 * EPOLL_CTL_MOD on N succeeds only if N refers to the same open file.
 * /dev/nvidiactl and dma-bufs poll. Files that do not poll (memfds) are
 * proven by (device, inode) and access mode: the inode is the memory.
 * Raw system calls: the application may close or reuse these numbers at
 * any moment (the race this file handles), which a sanitizer's model of
 * fds as memory would report.
 */
#include "handles/fdproof.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/stat.h>

#include "handles/self.h"
#include "handles/sys.h"

static int fd_stat(int fd, struct stat *st)
{
#ifdef SYS_fstat
    return byval_sys_ret(byval_sys3(SYS_fstat, fd, (long)st, 0));
#else
    return byval_sys_ret(byval_sys6(SYS_newfstatat, fd, (long)"", (long)st, AT_EMPTY_PATH, 0, 0));
#endif
}

static int fd_ctl(int fd, int cmd, long arg)
{
    return byval_sys_ret(byval_sys3(SYS_fcntl, fd, cmd, arg));
}

static int ep_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
    return byval_sys_ret(byval_sys6(SYS_epoll_ctl, epfd, op, fd, (long)ev, 0, 0));
}

static int byval_fdproof_same(int epfd, const byval_fdproof_t *p)
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

byval_fdproof_t *byval_fdtab_find(byval_fdtab_t *t, int fd)
{
    for (uint32_t i = 0; i < t->n; i++)
        if (t->e[i].fd == fd)
            return &t->e[i];
    return NULL;
}

void byval_fdtab_drop(byval_fdtab_t *t, byval_fdproof_t *x)
{
    if (x->kind == BYVAL_PROOF_EPOLL && byval_fdproof_same(t->epfd, x))
        (void)ep_ctl(t->epfd, EPOLL_CTL_DEL, x->fd, NULL);
    *x = t->e[--t->n];
}

void byval_fdtab_remove(byval_fdtab_t *t, int fd)
{
    byval_fdproof_t *x = byval_fdtab_find(t, fd);
    if (x)
        byval_fdtab_drop(t, x);
}

void byval_fdtab_sweep(byval_fdtab_t *t)
{
    for (uint32_t i = 0; i < t->n;) {
        if (!byval_fdproof_same(t->epfd, &t->e[i]))
            t->e[i] = t->e[--t->n]; /* its epoll item went with its file */
        else
            i++;
    }
}

byval_fdproof_t *byval_fdtab_add(byval_fdtab_t *t, int fd)
{
    if (!t->e && !(t->e = calloc(t->max, sizeof(*t->e)))) {
        errno = ENOMEM;
        return NULL;
    }
    if (t->epfd < 0 && (t->epfd = epoll_create1(EPOLL_CLOEXEC)) < 0)
        return NULL;
    byval_fdproof_t *x = byval_fdtab_find(t, fd);
    if (x && byval_fdproof_same(t->epfd, x))
        return x; /* recorded already */
    if (x)
        byval_fdtab_drop(t, x); /* closed behind its entry: another object */
    if (t->n == t->max) {
        errno = ENOSPC;
        return NULL;
    }
    struct stat st;
    int fl;
    if (fd < 0 || fd_stat(fd, &st) != 0 || (fl = fd_ctl(fd, F_GETFL, 0)) < 0) {
        errno = EBADF;
        return NULL;
    }
    x = &t->e[t->n];
    *x = (byval_fdproof_t){.fd = fd, .accmode = fl & O_ACCMODE, .dev = st.st_dev, .ino = st.st_ino};
    struct epoll_event ev = {.events = 0, .data.fd = fd};
    if (ep_ctl(t->epfd, EPOLL_CTL_ADD, fd, &ev) == 0 || errno == EEXIST)
        x->kind = BYVAL_PROOF_EPOLL;
    else if (errno == EPERM && S_ISREG(st.st_mode))
        x->kind = BYVAL_PROOF_INODE; /* does not poll, and its inode is the object */
    else {
        errno = errno == EPERM ? ENOTSUP : errno; /* cannot be proven later */
        return NULL;
    }
    t->n++;
    return x;
}

int byval_fdtab_dup(byval_fdtab_t *t, byval_fdproof_t *x, int *dup_p)
{
    /* Before and after: what we hold may be a file that took the number
     * meanwhile. Closed or reused: never again. */
    int d = -1;
    *dup_p = -1;
    if (byval_fdproof_same(t->epfd, x) && (d = fd_ctl(x->fd, F_DUPFD_CLOEXEC, 0)) < 0)
        return -errno;
    if (d < 0 || !byval_fdproof_same(t->epfd, x)) {
        if (d >= 0)
            close(d);
        byval_fdtab_drop(t, x);
        return -ESTALE;
    }
    *dup_p = d;
    return 0;
}

void byval_fdtab_forget(byval_fdtab_t *t)
{
    byval_close_fd(&t->epfd);
    t->n = 0;
}
