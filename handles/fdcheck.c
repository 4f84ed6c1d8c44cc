/* SPDX-License-Identifier: MIT */
/*
 * fdcheck.c - is an exporter's fd the object the handle describes, and of
 * a kind we may touch? Decided without ever blocking and without touching
 * a file offset (issue 15, item 3).
 *
 * A handle names (pid, fd). A forged one can name any fd of any process
 * we may ptrace: a lock file (closing our duplicate would drop OUR POSIX
 * locks on it), a file whose offset that process shares with us through
 * the duplicate (lseek would move it under its feet), a file on a FUSE
 * file system whose daemon stalls (fstat waits in the kernel for the
 * daemon, unkillable; even close() waits for its FLUSH answer). So:
 *
 * Before pidfd_getfd (byval_fd_precheck: only for what no registry lists,
 * an exporter's registry and its pipe, or where no registry proof is
 * installed; resolve.c's step 3), through /proc/PID/fd/N, which
 * opens nothing: readlink gives the link text, and statx on the link with
 * AT_STATX_DONT_SYNC gives the target's device, inode, type and size from
 * the kernel's cached attributes (FUSE answers DONT_SYNC without asking
 * its daemon; following the magic link revalidates nothing). The object
 * must be of a kind the record allows, PROVEN by something a file system
 * cannot fake, not by the link text (any path can read "/dmabuf:x" or
 * "/memfd:x" in a mount namespace its owner controls):
 *   memfd    the device of the kernel's internal shmem mount, learnt from
 *            a memfd of our own (no mounted tmpfs shares it)
 *   dma-buf  a line "exp_name:" in /proc/PID/fdinfo/N, which only the
 *            dma-buf code prints; its device is learnt from the first one.
 *            Kernels before 5.3: the link text "anon_inode:dmabuf", which
 *            no path can produce (paths start with '/')
 *   NVIDIA   a character device of major 195 (/dev/nvidiactl for VMM)
 * and its inode (and size, where the kind has one) must be the record's.
 * Anything else is refused before it is duplicated.
 *
 * After pidfd_getfd (byval_check_fd_kind, every route): statx on the
 * duplicate with AT_STATX_DONT_SYNC proves its kind from the fd itself,
 * and must show the device and inode checked before, if any (the
 * exporter cannot swap the object in between), a manifest must be a
 * sealed memfd (F_GET_SEALS: a VFS call), and the size is read where the
 * kind keeps it: st_size for memfds and for dma-bufs (5.3 on); before
 * 5.3 a dma-buf's st_size is 0, and lseek(SEEK_END) is used, which the
 * dma-buf's own llseek answers with the buffer size WITHOUT writing the
 * file position (SEEK_CUR is EINVAL there): only ever called on a proven
 * dma-buf, so no shared offset moves.
 *
 * (The kinds and their proofs are fdkind.c's; this file holds the two
 * checks.)
 *
 * An fd that arrived over the socket fallback had no check before: the
 * exporter's broker serves only what it offered, so only a hostile
 * exporter sends something else. The same checks run on it after the
 * fact, and an fd that is not proven safe to close is closed off the
 * caller's thread (byval_fd_release): its FLUSH may never be answered.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "handles/fdkind.h"
#include "handles/resolve.h"
#include "handles/resolve_internal.h"

/* Is /proc this process's pid namespace's? Then /proc/PID is the pid we
 * mean. Checked once per process (a fork child may be in another). */
static int proc_is_ours(void)
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
    if ((uint32_t)ino != fd_ino) {
        /* All that is established: the object there is another one. The
         * exporter may have closed the exported object and reused the
         * number, or the handle was made up: say neither as a fact. */
        byval_msg(msg, msglen,
                  "fd %u in pid %u holds another object than the handle describes (inode low "
                  "bits %u, the handle's %u): a stale or forged handle, %s",
                  fd, pid, (unsigned)(uint32_t)ino, fd_ino, what);
        return BYVAL_E_FDKIND;
    }
    if (!size || bytes < 0)
        return BYVAL_OK;
    if (pages_of((uint64_t)bytes) != pages_of(size)) {
        byval_msg(msg, msglen,
                  "fd %u in pid %u holds an object of %llu pages, the handle describes %llu: a "
                  "stale or forged handle (or an object resized since), %s",
                  fd, pid, (unsigned long long)pages_of((uint64_t)bytes),
                  (unsigned long long)pages_of(size), what);
        return BYVAL_E_FDKIND;
    }
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
    if (!proc_is_ours()) {
        byval_msg(msg, msglen,
                  "cannot check fd %u of pid %u before duplicating it: /proc is not this pid "
                  "namespace's (mount a /proc of our own), so it is not duplicated",
                  fd, pid);
        return BYVAL_E_PERM;
    }
    snprintf(path, sizeof(path), "/proc/%u/fd/%u", pid, fd);
    snprintf(info, sizeof(info), "/proc/%u/fdinfo/%u", pid, fd);
    /* statx follows the magic link (opening nothing); the link text is
     * read only when statx alone proves nothing (a dma-buf not seen yet,
     * an old kernel's, or a refusal to explain). */
    if (byval_fdk_stat(AT_FDCWD, path, 0, &stx) != 0) {
        int err = errno;
        char piddir[32];
        snprintf(piddir, sizeof(piddir), "/proc/%u", pid);
        if (byval_pidfd_exited(pidfd)) {
            byval_msg(msg, msglen, "read %s failed: %s (exporter exited)", path, strerror(err));
            return BYVAL_E_GONE;
        }
        if (err == ENOENT && access(piddir, F_OK) == 0) {
            byval_msg(msg, msglen,
                      "fd %u is not open in pid %u (%s: no such file): closed since, or a stale "
                      "or forged handle",
                      fd, pid, path);
            return BYVAL_E_BADFD;
        }
        if (err == ENOENT) {
            byval_msg(msg, msglen,
                      "cannot check fd %u of pid %u before duplicating it: this /proc does not "
                      "show pid %u, so it is not duplicated",
                      fd, pid, pid);
            return BYVAL_E_PERM;
        }
        if (err == EACCES || err == EPERM) {
            byval_msg(msg, msglen, "read %s failed: %s%s", path, strerror(err), perm_hint);
            return BYVAL_E_PERM;
        }
        byval_msg(msg, msglen, "read %s failed: %s", path, strerror(err));
        return err == EMFILE || err == ENFILE ? BYVAL_E_NOFD : BYVAL_E_SYS;
    }
    int kind = byval_fdk_classify_fast(&stx);
    if (kind == FDK_NONE || !byval_fdk_allowed(kind, obj))
        kind = byval_fdk_classify(&stx, byval_fdk_link(path, link, sizeof(link)), info);
    else
        link[0] = '\0';
    if (!byval_fdk_allowed(kind, obj)) {
        byval_msg(msg, msglen,
                  "fd %u in pid %u is %s%s%s, not %s: a forged or stale handle, "
                  "not duplicated",
                  fd, pid, kind ? byval_fdk_name[kind] : link, kind ? " " : "", kind ? link : "",
                  byval_fdk_expected(obj));
        return BYVAL_E_FDKIND;
    }
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

/* The kind of our own fd dup from its /proc/self links: the paths are
 * formatted only here, off the common path (a cold open's duplicate is
 * proven by statx alone; two snprintf calls were a tenth of its cost). */
static int classify_self(const struct statx *stx, int dup, char self_link[64], char self_info[64],
                         char *link, size_t len)
{
    snprintf(self_link, 64, "/proc/self/fd/%d", dup);
    snprintf(self_info, 64, "/proc/self/fdinfo/%d", dup);
    return byval_fdk_classify(stx, byval_fdk_link(self_link, link, len), self_info);
}

byval_status_t byval_check_fd_kind(int dup, uint32_t pid, uint32_t fd, uint32_t fd_ino,
                                   uint64_t size, byval_obj_t obj, const byval_fd_seen_t *seen,
                                   char *msg, size_t msglen)
{
    struct statx stx;
    char self_link[64], self_info[64], link[256] = "";
    if (byval_fdk_stat(dup, "", AT_EMPTY_PATH, &stx) != 0) {
        byval_msg(msg, msglen, "statx(fd %d, duplicate of fd %u in pid %u) failed: %s", dup, fd,
                  pid, strerror(errno));
        return BYVAL_E_SYS;
    }
    int kind;
    if (seen && seen->kind) {
        /* The object checked before pidfd_getfd, or another one? */
        if (byval_fdk_dev(&stx) != seen->dev || stx.stx_ino != seen->ino) {
            byval_msg(msg, msglen,
                      "fd %u in pid %u became another object between its check and "
                      "pidfd_getfd: not used",
                      fd, pid);
            return BYVAL_E_FDKIND;
        }
        kind = seen->kind;
        if (kind == FDK_DMABUF_ANON) /* one anon inode for all: its name again */
            kind = classify_self(&stx, dup, self_link, self_info, link, sizeof(link));
    } else if ((kind = byval_fdk_classify_fast(&stx)) == FDK_NONE) {
        kind = classify_self(&stx, dup, self_link, self_info, link, sizeof(link));
    }
    if (!byval_fdk_allowed(kind, obj)) {
        byval_msg(msg, msglen, "fd %u from pid %u is %s%s%s, not %s: not used", fd, pid,
                  kind          ? byval_fdk_name[kind]
                      : link[0] ? link
                                : "of an unknown kind",
                  kind ? " " : "", kind ? link : "", byval_fdk_expected(obj));
        return BYVAL_E_FDKIND;
    }
    if (obj == BYVAL_OBJ_MANIFEST) {
        /* Sealed by its exporter against writes and resizing: what we
         * read is what the handle was made from, however long we take. */
        int seals = fcntl(dup, F_GET_SEALS);
        int need = F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK;
        if (seals < 0 || (seals & need) != need) {
            byval_msg(msg, msglen,
                      "fd %u from pid %u is a memfd without the manifest's seals (0x%x): not "
                      "ipcbyval's manifest, not used",
                      fd, pid, seals < 0 ? 0 : seals);
            return BYVAL_E_FDKIND;
        }
    }
    int64_t bytes = -1;
    if (kind == FDK_SHMEM || ((kind == FDK_DMABUF || kind == FDK_DMABUF_ANON) && stx.stx_size))
        bytes = (int64_t)stx.stx_size;
    else if (size && (kind == FDK_DMABUF || kind == FDK_DMABUF_ANON))
        /* A proven dma-buf whose inode has no size (before 5.3): its llseek
         * answers SEEK_END and never writes the file position. */
        bytes = (int64_t)lseek(dup, 0, SEEK_END);
    else if (size) {
        byval_msg(msg, msglen,
                  "fd %u from pid %u is %s, which has no size to compare with the "
                  "handle's: not used",
                  fd, pid, byval_fdk_name[kind]);
        return BYVAL_E_FDKIND;
    }
    if (size && bytes < 0) {
        byval_msg(msg, msglen, "lseek(fd %d, duplicate of fd %u in pid %u, SEEK_END) failed: %s",
                  dup, fd, pid, strerror(errno));
        return BYVAL_E_FDKIND;
    }
    return same_object(pid, fd, fd_ino, size, stx.stx_ino, bytes, "not used", msg, msglen);
}
