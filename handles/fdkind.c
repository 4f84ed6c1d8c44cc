/* SPDX-License-Identifier: MIT */
/*
 * fdkind.c - what kind of object an fd is, proven by what a file system
 * cannot fake (fdcheck.c says why each proof holds: shmem and pipe
 * devices learnt from objects of our own, a dma-buf by its fdinfo's
 * "exp_name:" line, NVIDIA by its major), from cached attributes only;
 * and closing an fd whose close may wait on a file system off the
 * caller's thread (byval_fd_release).
 */
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "handles/bgthread.h"
#include "handles/fdkind.h"
#include "handles/resolve_internal.h"

#define NVIDIA_MAJOR 195 /* /dev/nvidiactl, /dev/nvidia<N> */
#define STATX_WANT (STATX_TYPE | STATX_MODE | STATX_INO | STATX_SIZE)

const char *const byval_fdk_name[] = {
    "", "a memfd", "a dma-buf", "a dma-buf", "an NVIDIA device file", "a pipe"};

uint64_t byval_fd_inode(int fd)
{
    struct stat st;
    return fd >= 0 && fstat(fd, &st) == 0 ? (uint64_t)st.st_ino : 0;
}

/* The exporter's own object: memfd st_size, dma-buf SEEK_END (its llseek
 * never moves the position); anything else is put back where it was. */
int64_t byval_fd_size(int fd)
{
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0)
        return -1;
    if (S_ISREG(st.st_mode) && st.st_size > 0)
        return (int64_t)st.st_size;
    off_t cur = lseek(fd, 0, SEEK_CUR);
    off_t end = lseek(fd, 0, SEEK_END);
    int err = errno;
    if (cur >= 0 && end >= 0 && cur != end)
        (void)lseek(fd, cur, SEEK_SET);
    errno = err;
    return end < 0 ? -1 : (int64_t)end;
}

uint64_t byval_fdk_dev(const struct statx *stx)
{
    return (uint64_t)makedev(stx->stx_dev_major, stx->stx_dev_minor);
}

/* statx from the kernel's cached attributes: never a FUSE daemon's or a
 * network server's round trip. */
int byval_fdk_stat(int dirfd, const char *path, int flags, struct statx *stx)
{
    return statx(dirfd, path, flags | AT_STATX_DONT_SYNC, STATX_WANT, stx);
}

/* The device of the kernel's shmem mount (memfd_create's), from a memfd of
 * our own: learnt once, the same for the whole boot. 0 if unknown. */
static uint64_t shmem_dev(void)
{
    static uint64_t dev;
    uint64_t d = __atomic_load_n(&dev, __ATOMIC_RELAXED);
    if (d)
        return d;
    struct statx stx;
    int fd = memfd_create("ipcbyval-probe", MFD_CLOEXEC);
    if (fd < 0)
        return 0;
    if (byval_fdk_stat(fd, "", AT_EMPTY_PATH, &stx) == 0)
        d = byval_fdk_dev(&stx);
    close(fd);
    __atomic_store_n(&dev, d, __ATOMIC_RELAXED);
    return d;
}

/* The dma-buf pseudo file system's device, from the first proven dma-buf. */
static uint64_t dmabuf_dev;

/* 1 if the fdinfo file at path has a line "exp_name:" (dma_buf_show_fdinfo
 * prints it; no other file does). procfs: no file system is asked. */
static int fdinfo_is_dmabuf(const char *path)
{
    char buf[1024];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    return strstr(buf, "\nexp_name:") != NULL;
}

static int starts(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* The link text of a /proc fd link into buf ("" if unreadable). */
const char *byval_fdk_link(const char *path, char *buf, size_t len)
{
    ssize_t n = readlink(path, buf, len - 1);
    buf[n > 0 ? n : 0] = '\0';
    return buf;
}

/* The device of the kernel's pipe file system, from a pipe of our own. */
static uint64_t pipe_dev(void)
{
    static uint64_t dev;
    uint64_t d = __atomic_load_n(&dev, __ATOMIC_RELAXED);
    int p[2];
    if (d || pipe2(p, O_CLOEXEC) != 0)
        return d;
    struct statx stx;
    if (byval_fdk_stat(p[0], "", AT_EMPTY_PATH, &stx) == 0)
        d = byval_fdk_dev(&stx);
    close(p[0]);
    close(p[1]);
    __atomic_store_n(&dev, d, __ATOMIC_RELAXED);
    return d;
}

/* The kind statx alone proves (the common cases: no readlink needed). A
 * pipe has no file offset, no locks and no file system daemon: only an
 * exporter's registry names one, its own wake-up pipe. */
int byval_fdk_classify_fast(const struct statx *stx)
{
    uint64_t dev = byval_fdk_dev(stx), shm = shmem_dev();
    if (S_ISFIFO(stx->stx_mode) && dev == pipe_dev())
        return FDK_PIPE;
    uint64_t known = __atomic_load_n(&dmabuf_dev, __ATOMIC_RELAXED);
    if (shm && dev == shm && S_ISREG(stx->stx_mode))
        return FDK_SHMEM;
    if (S_ISCHR(stx->stx_mode) && stx->stx_rdev_major == NVIDIA_MAJOR)
        return FDK_NVIDIA;
    if (known && dev == known)
        return FDK_DMABUF;
    return FDK_NONE;
}

/* The kind of the object behind stx (link: its /proc link text; fdinfo:
 * the path of its fdinfo file), proven as the top comment says. */
int byval_fdk_classify(const struct statx *stx, const char *link, const char *fdinfo)
{
    int kind = byval_fdk_classify_fast(stx);
    if (kind != FDK_NONE)
        return kind;
    if (!strcmp(link, "anon_inode:dmabuf"))
        return FDK_DMABUF_ANON;
    if (starts(link, "/dmabuf:") && fdinfo_is_dmabuf(fdinfo)) {
        __atomic_store_n(&dmabuf_dev, byval_fdk_dev(stx), __ATOMIC_RELAXED);
        return FDK_DMABUF;
    }
    return FDK_NONE;
}

int byval_fdk_allowed(int kind, byval_obj_t obj)
{
    switch (obj) {
    case BYVAL_OBJ_MANIFEST:
    case BYVAL_OBJ_REGISTRY: return kind == FDK_SHMEM;
    case BYVAL_OBJ_WAKE_PIPE: return kind == FDK_PIPE;
    default: return kind != FDK_NONE && kind != FDK_PIPE;
    }
}

const char *byval_fdk_expected(byval_obj_t obj)
{
    switch (obj) {
    case BYVAL_OBJ_MANIFEST: return "ipcbyval's manifest (a sealed memfd)";
    case BYVAL_OBJ_REGISTRY: return "ipcbyval's registry (a memfd)";
    case BYVAL_OBJ_WAKE_PIPE: return "ipcbyval's wake-up pipe";
    default: return "GPU memory (a dma-buf, an NVIDIA device file or a memfd)";
    }
}

/* ---- closing what may not be safe to close -------------------------- */

#define RELEASE_THREADS_MAX 8
static int release_threads;

static void *release_thread(void *arg)
{
    close((int)(intptr_t)arg); /* may wait for ever on a stalled daemon: only this thread */
    __atomic_fetch_sub(&release_threads, 1, __ATOMIC_RELAXED);
    return NULL;
}

int byval_fd_release(int fd)
{
    struct statx stx;
    char link[64], info[64], text[256] = "";
    if (fd < 0)
        return 0;
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    snprintf(info, sizeof(info), "/proc/self/fdinfo/%d", fd);
    if (byval_fdk_stat(fd, "", AT_EMPTY_PATH, &stx) == 0 &&
        (byval_fdk_classify_fast(&stx) != FDK_NONE || S_ISSOCK(stx.stx_mode) ||
         S_ISFIFO(stx.stx_mode) ||
         byval_fdk_classify(&stx, byval_fdk_link(link, text, sizeof(text)), info) != FDK_NONE ||
         !starts(text, "/"))) {
        close(fd); /* a kind whose close answers at once */
        return 0;
    }
    /* A file of some file system: its close may send a FLUSH to a FUSE
     * daemon that never answers, uninterruptibly. Close it on a thread of
     * its own; if too many are stuck already, keep the fd open (a leaked
     * fd is better than a hung application). */
    if (__atomic_add_fetch(&release_threads, 1, __ATOMIC_RELAXED) > RELEASE_THREADS_MAX) {
        __atomic_fetch_sub(&release_threads, 1, __ATOMIC_RELAXED);
        return -1;
    }
    if (byval_bgthread_start(release_thread, (void *)(intptr_t)fd, NULL) != 0) {
        __atomic_fetch_sub(&release_threads, 1, __ATOMIC_RELAXED);
        return -1; /* kept open, as above */
    }
    return 0;
}
