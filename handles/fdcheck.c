/* SPDX-License-Identifier: MIT */
/*
 * fdcheck.c - is an exporter's fd the object the handle describes, of a
 * kind we may touch? Decided without ever blocking and without touching
 * a file offset: a forged handle can name any fd of a process we may
 * ptrace (a lock file, a shared offset, a stalled FUSE file whose fstat
 * and even close wait for ever).
 *
 * Before pidfd_getfd (byval_fd_precheck, for what no registry lists),
 * through /proc/PID/fd/N, which opens nothing: statx with
 * AT_STATX_DONT_SYNC on the magic link gives device, inode, type and size
 * from cached attributes. The kind must be PROVEN by what a file system
 * cannot fake, never by the link text:
 *   memfd    the device of the kernel's shmem mount (a memfd of our own)
 *   dma-buf  an "exp_name:" line in its fdinfo, then its device; before
 *            5.3 the link "anon_inode:dmabuf" (paths start with '/')
 *   NVIDIA   a character device of major 195
 *   pipe     the device of the pipe file system (a pipe of our own)
 * and its inode (and size, where the kind has one) the record's.
 *
 * After (byval_check_fd_kind, every route): statx on the duplicate proves
 * its kind and must show what was checked before; a manifest must be a
 * sealed memfd; a dma-buf's size is st_size, or before 5.3 its own
 * lseek(SEEK_END), which writes no file position. An fd not proven safe
 * to close is closed off the caller's thread (byval_fd_release).
 */
#include "handles/fdcheck.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sysmacros.h>

#include "handles/bgthread.h"

#define NVIDIA_MAJOR 195 /* /dev/nvidiactl, /dev/nvidia<N> */
#define STATX_WANT (STATX_TYPE | STATX_MODE | STATX_INO | STATX_SIZE)

static const char *const byval_fdk_name[] = {
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

int byval_fdk_stat(int dirfd, const char *path, int flags, struct statx *stx)
{
    return statx(dirfd, path, flags | AT_STATX_DONT_SYNC, STATX_WANT, stx);
}

/* The device of the kernel's shmem mount (pipe 0: a memfd of our own) or
 * of its pipe file system (a pipe of ours), learnt once. 0 if unknown. */
static uint64_t own_dev(int pipe)
{
    static uint64_t dev[2];
    uint64_t d = __atomic_load_n(&dev[pipe], __ATOMIC_RELAXED);
    int p[2] = {-1, -1};
    struct statx stx;
    if (d ||
        (pipe ? pipe2(p, O_CLOEXEC) : (p[0] = memfd_create("ipcbyval-probe", MFD_CLOEXEC))) < 0)
        return d;
    if (byval_fdk_stat(p[0], "", AT_EMPTY_PATH, &stx) == 0)
        d = byval_fdk_dev(&stx);
    close(p[0]);
    byval_close_fd(&p[1]);
    __atomic_store_n(&dev[pipe], d, __ATOMIC_RELAXED);
    return d;
}

/* The dma-buf pseudo file system's device, from the first proven dma-buf. */
static uint64_t dmabuf_dev;

static int starts(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* The link text of a /proc fd link into buf ("" if unreadable). */
static const char *byval_fdk_link(const char *path, char *buf, size_t len)
{
    ssize_t n = readlink(path, buf, len - 1);
    buf[n > 0 ? n : 0] = '\0';
    return buf;
}

/* The kind statx alone proves (the common cases: no readlink needed). */
int byval_fdk_classify_fast(const struct statx *stx)
{
    uint64_t dev = byval_fdk_dev(stx), shm = own_dev(0);
    if (S_ISFIFO(stx->stx_mode) && dev == own_dev(1))
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

/* The same, then from its /proc link text and the path of its fdinfo. */
static int byval_fdk_classify(const struct statx *stx, const char *link, const char *fdinfo)
{
    int kind = byval_fdk_classify_fast(stx);
    if (kind != FDK_NONE)
        return kind;
    if (!strcmp(link, "anon_inode:dmabuf"))
        return FDK_DMABUF_ANON;
    /* Its fdinfo has a line "exp_name:" (only a dma-buf's). */
    char buf[1024];
    if (starts(link, "/dmabuf:") && byval_read_file(fdinfo, buf, sizeof(buf)) > 0 &&
        strstr(buf, "\nexp_name:")) {
        __atomic_store_n(&dmabuf_dev, byval_fdk_dev(stx), __ATOMIC_RELAXED);
        return FDK_DMABUF;
    }
    return FDK_NONE;
}

/* Per object kind: the fd kinds it may be (bit FDK_*), and what it must be. */
static const struct {
    unsigned kinds;
    const char *what;
} objs[] = {
    [BYVAL_OBJ_MEMORY] = {1u << FDK_SHMEM | 1u << FDK_DMABUF | 1u << FDK_DMABUF_ANON |
                              1u << FDK_NVIDIA,
                          "GPU memory (a dma-buf, an NVIDIA device file or a memfd)"},
    [BYVAL_OBJ_MANIFEST] = {1u << FDK_SHMEM, "ipcbyval's manifest (a sealed memfd)"},
    [BYVAL_OBJ_REGISTRY] = {1u << FDK_SHMEM, "ipcbyval's registry (a memfd)"},
    [BYVAL_OBJ_WAKE_PIPE] = {1u << FDK_PIPE, "ipcbyval's wake-up pipe"},
};

static int byval_fdk_allowed(int kind, byval_obj_t obj)
{
    return (objs[obj].kinds >> kind) & 1;
}

/* The kind of our own fd from its /proc/self links, the link text in link
 * (formatted only here: a cold open's duplicate is proven by statx alone). */
static int classify_self(const struct statx *stx, int fd, char *link, size_t len)
{
    char self_link[64], self_info[64];
    snprintf(self_link, sizeof(self_link), "/proc/self/fd/%d", fd);
    snprintf(self_info, sizeof(self_info), "/proc/self/fdinfo/%d", fd);
    return byval_fdk_classify(stx, byval_fdk_link(self_link, link, len), self_info);
}

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
    char text[256] = "";
    if (fd < 0)
        return 0;
    if (byval_fdk_stat(fd, "", AT_EMPTY_PATH, &stx) == 0 &&
        (byval_fdk_classify_fast(&stx) != FDK_NONE || S_ISSOCK(stx.stx_mode) ||
         S_ISFIFO(stx.stx_mode) || classify_self(&stx, fd, text, sizeof(text)) != FDK_NONE ||
         !starts(text, "/"))) {
        close(fd); /* a kind whose close answers at once */
        return 0;
    }
    /* A file of some file system: its close may send a FLUSH to a FUSE
     * daemon that never answers, uninterruptibly. Close it on a thread of
     * its own; if too many are stuck already, keep the fd open (a leaked
     * fd is better than a hung application). */
    if (__atomic_add_fetch(&release_threads, 1, __ATOMIC_RELAXED) > RELEASE_THREADS_MAX ||
        byval_bgthread_start(release_thread, (void *)(intptr_t)fd, NULL) != 0) {
        __atomic_fetch_sub(&release_threads, 1, __ATOMIC_RELAXED);
        return -1;
    }
    return 0;
}

/* Checked once per process (a fork child may be in another namespace). */
int byval_proc_is_ours(void)
{
    static pid_t verified;
    pid_t me = getpid();
    if (__atomic_load_n(&verified, __ATOMIC_RELAXED) == me)
        return 1;
    char buf[32];
    ssize_t n = readlink("/proc/self", buf, sizeof(buf) - 1);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    if (strtol(buf, NULL, 10) != (long)me)
        return 0;
    __atomic_store_n(&verified, me, __ATOMIC_RELAXED);
    return 1;
}

static uint64_t pages_of(uint64_t bytes)
{
    return (bytes + BYVAL_WIRE_PAGE - 1) / BYVAL_WIRE_PAGE;
}

/* Inode and size against the record; BYVAL_OK or FDKIND with one line.
 * bytes < 0: the kind has no size here (not compared). what: "not
 * duplicated" or "not used". */
static byval_status_t same_object(uint32_t pid, uint32_t fd, uint32_t fd_ino, uint64_t size,
                                  uint64_t ino, int64_t bytes, const char *what, char *msg,
                                  size_t msglen)
{
    if ((uint32_t)ino != fd_ino)
        return byval_fail(BYVAL_E_FDKIND, msg, msglen,
                          "fd %u in pid %u holds another object than the handle describes (inode "
                          "low bits %u, the handle's %u): a stale or forged handle, %s",
                          fd, pid, (unsigned)(uint32_t)ino, fd_ino, what);
    if (!size || bytes < 0)
        return BYVAL_OK;
    if (pages_of((uint64_t)bytes) != pages_of(size))
        return byval_fail(BYVAL_E_FDKIND, msg, msglen,
                          "fd %u in pid %u holds an object of %llu pages, the handle describes "
                          "%llu: a stale or forged handle (or an object resized since), %s",
                          fd, pid, (unsigned long long)pages_of((uint64_t)bytes),
                          (unsigned long long)pages_of(size), what);
    return BYVAL_OK;
}

static const char perm_hint[] =
    " (hint: ptrace access denied: reading the exporter's /proc/PID/fd, like pidfd_getfd, needs "
    "its uid or CAP_SYS_PTRACE; pidfd_getfd also needs Yama ptrace_scope 0, or 1 with a "
    "ptracer relationship)";

byval_status_t byval_fd_precheck(int pidfd, uint32_t pid, uint32_t fd, uint32_t fd_ino,
                                 uint64_t size, byval_obj_t obj, byval_fd_seen_t *seen, char *msg,
                                 size_t msglen)
{
    char path[64], info[64], link[256];
    struct statx stx;
    memset(seen, 0, sizeof(*seen));
    if (!byval_proc_is_ours())
        return byval_fail(BYVAL_E_PERM, msg, msglen,
                          "cannot check fd %u of pid %u before duplicating it: /proc is not this "
                          "pid namespace's (mount a /proc of our own), so it is not duplicated",
                          fd, pid);
    snprintf(path, sizeof(path), "/proc/%u/fd/%u", pid, fd);
    snprintf(info, sizeof(info), "/proc/%u/fdinfo/%u", pid, fd);
    /* statx follows the magic link (opening nothing); the link text is
     * read only when statx alone proves nothing (a dma-buf not seen yet,
     * an old kernel's, or a refusal to explain). */
    if (byval_fdk_stat(AT_FDCWD, path, 0, &stx) != 0) {
        int err = errno;
        char piddir[32];
        snprintf(piddir, sizeof(piddir), "/proc/%u", pid);
        if (byval_pidfd_exited(pidfd))
            return byval_fail(BYVAL_E_GONE, msg, msglen, "read %s failed: %s (exporter exited)",
                              path, strerror(err));
        if (err == ENOENT && access(piddir, F_OK) == 0)
            return byval_fail(BYVAL_E_BADFD, msg, msglen,
                              "fd %u is not open in pid %u (%s: no such file): closed since, or a "
                              "stale or forged handle",
                              fd, pid, path);
        if (err == ENOENT)
            return byval_fail(BYVAL_E_PERM, msg, msglen,
                              "cannot check fd %u of pid %u before duplicating it: this /proc does "
                              "not show pid %u, so it is not duplicated",
                              fd, pid, pid);
        if (err == EACCES || err == EPERM)
            return byval_fail(BYVAL_E_PERM, msg, msglen, "read %s failed: %s%s", path,
                              strerror(err), perm_hint);
        return byval_fail(err == EMFILE || err == ENFILE ? BYVAL_E_NOFD : BYVAL_E_SYS, msg, msglen,
                          "read %s failed: %s", path, strerror(err));
    }
    int kind = byval_fdk_classify_fast(&stx);
    if (kind == FDK_NONE || !byval_fdk_allowed(kind, obj))
        kind = byval_fdk_classify(&stx, byval_fdk_link(path, link, sizeof(link)), info);
    else
        link[0] = '\0';
    if (!byval_fdk_allowed(kind, obj))
        return byval_fail(
            BYVAL_E_FDKIND, msg, msglen,
            "fd %u in pid %u is %s%s%s, not %s: a forged or stale handle, not duplicated", fd, pid,
            kind ? byval_fdk_name[kind] : link, kind ? " " : "", kind ? link : "", objs[obj].what);
    int64_t bytes = kind == FDK_NVIDIA || stx.stx_size == 0 ? -1 : (int64_t)stx.stx_size;
    byval_status_t st =
        same_object(pid, fd, fd_ino, size, stx.stx_ino, bytes, "not duplicated", msg, msglen);
    if (st != BYVAL_OK)
        return st;
    seen->dev = byval_fdk_dev(&stx);
    seen->ino = stx.stx_ino;
    seen->kind = kind;
    return BYVAL_OK;
}

byval_status_t byval_check_fd_kind(int dup, uint32_t pid, uint32_t fd, uint32_t fd_ino,
                                   uint64_t size, byval_obj_t obj, const byval_fd_seen_t *seen,
                                   char *msg, size_t msglen)
{
    struct statx stx;
    char link[256] = "";
    if (byval_fdk_stat(dup, "", AT_EMPTY_PATH, &stx) != 0)
        return byval_fail(BYVAL_E_SYS, msg, msglen,
                          "statx(fd %d, duplicate of fd %u in pid %u) failed: %s", dup, fd, pid,
                          strerror(errno));
    int kind;
    if (seen && seen->kind) {
        /* The object checked before pidfd_getfd, or another one? */
        if (byval_fdk_dev(&stx) != seen->dev || stx.stx_ino != seen->ino)
            return byval_fail(
                BYVAL_E_FDKIND, msg, msglen,
                "fd %u in pid %u became another object between its check and pidfd_getfd: not used",
                fd, pid);
        kind = seen->kind;
        if (kind == FDK_DMABUF_ANON) /* one anon inode for all: its name again */
            kind = classify_self(&stx, dup, link, sizeof(link));
    } else if ((kind = byval_fdk_classify_fast(&stx)) == FDK_NONE) {
        kind = classify_self(&stx, dup, link, sizeof(link));
    }
    if (!byval_fdk_allowed(kind, obj))
        return byval_fail(BYVAL_E_FDKIND, msg, msglen,
                          "fd %u from pid %u is %s%s%s, not %s: not used", fd, pid,
                          kind          ? byval_fdk_name[kind]
                              : link[0] ? link
                                        : "of an unknown kind",
                          kind ? " " : "", kind ? link : "", objs[obj].what);
    if (obj == BYVAL_OBJ_MANIFEST) {
        /* Sealed by its exporter against writes and resizing: what we
         * read is what the handle was made from, however long we take. */
        int seals = fcntl(dup, F_GET_SEALS), need = F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK;
        if (seals < 0 || (seals & need) != need)
            return byval_fail(BYVAL_E_FDKIND, msg, msglen,
                              "fd %u from pid %u is a memfd without the manifest's seals (0x%x): "
                              "not ipcbyval's manifest, not used",
                              fd, pid, seals < 0 ? 0 : seals);
    }
    int64_t bytes = -1;
    if (kind == FDK_SHMEM || ((kind == FDK_DMABUF || kind == FDK_DMABUF_ANON) && stx.stx_size))
        bytes = (int64_t)stx.stx_size;
    else if (size && (kind == FDK_DMABUF || kind == FDK_DMABUF_ANON))
        /* A proven dma-buf whose inode has no size (before 5.3): its llseek
         * answers SEEK_END and never writes the file position. */
        bytes = (int64_t)lseek(dup, 0, SEEK_END);
    else if (size)
        return byval_fail(
            BYVAL_E_FDKIND, msg, msglen,
            "fd %u from pid %u is %s, which has no size to compare with the handle's: not used", fd,
            pid, byval_fdk_name[kind]);
    if (size && bytes < 0)
        return byval_fail(BYVAL_E_FDKIND, msg, msglen,
                          "lseek(fd %d, duplicate of fd %u in pid %u, SEEK_END) failed: %s", dup,
                          fd, pid, strerror(errno));
    return same_object(pid, fd, fd_ino, size, stx.stx_ino, bytes, "not used", msg, msglen);
}
