/* SPDX-License-Identifier: MIT */
/*
 * registry_fds.c - the exporter's registry, by fd: which fd numbers this
 * process handed out as exported GPU memory (its own exports and the
 * application's: cuMemExportToShareableHandle, Level Zero handles of either
 * layout), so that the socket broker may serve exactly those to a peer
 * whose own pidfd_getfd the kernel refused (see registry.h).
 *
 * The rule this file enforces: serve fd N only while N still refers to the
 * open file that was exported. Numbers are reused after close, and every
 * CUDA VMM fd is a /dev/nvidiactl file: one inode shared by every open of
 * the device, including the driver's own control fds that were never
 * exported. An inode comparison cannot tell those apart, and kcmp (the
 * kernel's own answer) is denied by the same container profiles that deny
 * pidfd_getfd. Holding a duplicate would prove it but would keep the
 * memory alive after the application freed it and closed its fd (a change
 * of lifetime, which ipcbyval must never cause).
 *
 * The proof used: an epoll interest list is keyed by (open file, fd
 * number), holds no reference on the file, and drops the key when the
 * file is released (eventpoll_release at the last close). We add the
 * exported fd to a private epoll instance at export time (no events asked,
 * and we never wait on it); later EPOLL_CTL_MOD on N succeeds only if N
 * refers to the same open file as then (ENOENT for any other file at N,
 * EBADF when N is closed). So: an exact, reference-free check that needs
 * neither kcmp nor /proc, and costs the kernel one small item per export.
 * Both files that matter poll: /dev/nvidiactl (nvidia_poll) and dma-bufs.
 *
 * Files that do not poll (regular files: memfds, the test drivers' memory)
 * have an inode that is the object itself: the same (device, inode) and
 * access mode is the same memory whatever the open, so that is what is
 * compared. Any other file that does not poll (a character device without
 * poll, say) cannot be proven and is not registered.
 *
 * Served under one lock, checked both before and after the duplicate is
 * made, so a close and reuse racing the request is refused rather than
 * served.
 */
#include "handles/registry.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define FDS_MAX 16384 /* registered numbers at once: at most one per fd */

/* The application's fds are read by number here (on the broker's thread)
 * while the application may close or reuse them at any moment: that race
 * is what the checks are for, and every decision is checked again after
 * the duplicate is made. Raw system calls, so that a sanitizer's model of
 * fds as memory (ThreadSanitizer counts a close as a write) does not
 * report the race this file exists to handle. */
static int fd_stat(int fd, struct stat *st)
{
#ifdef SYS_fstat
    return (int)syscall(SYS_fstat, fd, st);
#else
    return (int)syscall(SYS_newfstatat, fd, "", st, AT_EMPTY_PATH);
#endif
}

static int fd_ctl(int fd, int cmd, long arg)
{
    return (int)syscall(SYS_fcntl, fd, cmd, arg);
}

static int ep_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
    return (int)syscall(SYS_epoll_ctl, epfd, op, fd, ev);
}

typedef enum { PROOF_EPOLL = 1, PROOF_INODE = 2 } proof_t;

typedef struct fd_entry {
    int fd;
    int accmode; /* O_ACCMODE bits at export */
    dev_t dev;
    ino_t ino;
    proof_t proof;
} fd_entry_t;

static struct {
    pthread_mutex_t lock;
    int epfd; /* -1 until the first registration */
    uint32_t n, sweep_at;
    uint64_t served, refused;
    fd_entry_t *e; /* FDS_MAX entries, allocated at the first registration */
} rf = {.lock = PTHREAD_MUTEX_INITIALIZER, .epfd = -1, .sweep_at = 64};

static void atfork_prepare(void)
{
    pthread_mutex_lock(&rf.lock);
}

static void atfork_parent(void)
{
    pthread_mutex_unlock(&rf.lock);
}

static void atfork_child(void)
{
    /* The child shares the parent's epoll instance through the inherited
     * fd (an EPOLL_CTL there would change the parent's set) and exported
     * nothing itself: it starts with an empty registry. */
    pthread_mutex_init(&rf.lock, NULL);
    if (rf.epfd >= 0)
        close(rf.epfd);
    rf.epfd = -1;
    rf.n = 0;
    rf.sweep_at = 64;
    rf.served = rf.refused = 0;
}

static pthread_once_t rf_once = PTHREAD_ONCE_INIT;

static void rf_init(void)
{
    pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

/* The lock, its fork handlers registered first (see broker_offers.c). */
static void rf_lock(void)
{
    pthread_once(&rf_once, rf_init);
    pthread_mutex_lock(&rf.lock);
}

static fd_entry_t *find_locked(int fd)
{
    for (uint32_t i = 0; i < rf.n; i++)
        if (rf.e[i].fd == fd)
            return &rf.e[i];
    return NULL;
}

static void drop_locked(fd_entry_t *x)
{
    *x = rf.e[--rf.n];
}

/* Does fd still refer to what x recorded at export? */
static int same_locked(const fd_entry_t *x, int fd)
{
    struct stat st;
    if (fd_stat(fd, &st) != 0 || st.st_dev != x->dev || st.st_ino != x->ino)
        return 0;
    if (x->proof == PROOF_EPOLL) {
        struct epoll_event ev = {.events = 0, .data.fd = fd};
        return ep_ctl(rf.epfd, EPOLL_CTL_MOD, fd, &ev) == 0;
    }
    int fl = fd_ctl(fd, F_GETFL, 0);
    return fl >= 0 && (fl & O_ACCMODE) == x->accmode;
}

/* Forget entries whose fd was closed or reused: they can never be served
 * again (their epoll items went with their files). Amortised: runs when
 * the table doubled since the last sweep. */
static void sweep_locked(void)
{
    for (uint32_t i = 0; i < rf.n;) {
        if (!same_locked(&rf.e[i], rf.e[i].fd))
            drop_locked(&rf.e[i]);
        else
            i++;
    }
    rf.sweep_at = rf.n * 2 > 64 ? rf.n * 2 : 64;
}

int byval_reg_add_fd(int fd)
{
    struct stat st;
    int fl;
    if (fd < 0 || fd_stat(fd, &st) != 0 || (fl = fd_ctl(fd, F_GETFL, 0)) < 0)
        return -1;
    rf_lock();
    int rc = -1, err = 0;
    if (!rf.e && !(rf.e = calloc(FDS_MAX, sizeof(*rf.e)))) {
        err = ENOMEM;
        goto out;
    }
    if (rf.epfd < 0 && (rf.epfd = epoll_create1(EPOLL_CLOEXEC)) < 0) {
        err = errno;
        goto out;
    }
    fd_entry_t *x = find_locked(fd);
    if (x && same_locked(x, fd)) {
        rc = 0; /* exported again: nothing new */
        goto out;
    }
    if (x)
        drop_locked(x); /* the number was reused: a new export */
    if (rf.n >= rf.sweep_at || rf.n == FDS_MAX)
        sweep_locked();
    if (rf.n == FDS_MAX) {
        err = ENOSPC;
        goto out;
    }
    fd_entry_t e = {.fd = fd, .accmode = fl & O_ACCMODE, .dev = st.st_dev, .ino = st.st_ino};
    struct epoll_event ev = {.events = 0, .data.fd = fd};
    if (ep_ctl(rf.epfd, EPOLL_CTL_ADD, fd, &ev) == 0 || errno == EEXIST)
        e.proof = PROOF_EPOLL;
    else if (errno == EPERM && S_ISREG(st.st_mode))
        e.proof = PROOF_INODE; /* does not poll, and its inode is the object */
    else {
        err = errno == EPERM ? ENOTSUP : errno; /* cannot be proven later */
        goto out;
    }
    rf.e[rf.n++] = e;
    rc = 0;
out:
    pthread_mutex_unlock(&rf.lock);
    errno = err;
    return rc;
}

int byval_reg_dup_fd(int fd, int *dup_p)
{
    int status = -EBADF;
    *dup_p = -1;
    rf_lock();
    fd_entry_t *x = rf.e ? find_locked(fd) : NULL;
    if (x && !same_locked(x, fd)) {
        drop_locked(x); /* closed, or its number reused: never again */
        status = -ESTALE;
    } else if (x) {
        int d = fd_ctl(fd, F_DUPFD_CLOEXEC, 0);
        if (d < 0) {
            status = -errno;
        } else if (!same_locked(x, fd)) {
            close(d); /* changed under us: what we hold may be the new file */
            drop_locked(x);
            status = -ESTALE;
        } else {
            *dup_p = d;
            status = 0;
        }
    }
    rf.served += status == 0;
    rf.refused += status != 0;
    pthread_mutex_unlock(&rf.lock);
    return status;
}

unsigned byval_reg_fds_live(void)
{
    rf_lock();
    unsigned n = rf.n;
    pthread_mutex_unlock(&rf.lock);
    return n;
}

void byval_reg_fd_counts(uint64_t *served_p, uint64_t *refused_p)
{
    rf_lock();
    *served_p = rf.served;
    *refused_p = rf.refused;
    pthread_mutex_unlock(&rf.lock);
}
