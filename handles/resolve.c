/* SPDX-License-Identifier: MIT */
/*
 * resolve.c - turn a record into a local duplicate of the exporter's fd.
 *
 * Order: cheap checks that need no syscall (arguments, boot id, pid
 * namespace), then pidfd_open, the identity check ON THAT PIDFD, the fd's
 * kind through /proc without opening it (fdcheck.c), then pidfd_getfd
 * THROUGH THAT PIDFD, then the check that the duplicate is what was seen.
 *
 * Why this order is race-free against PID reuse: a pidfd refers to one
 * process for its whole life, never to a later holder of the number.
 * - pidfs identity: we compare the inode of the pidfd itself; there is
 *   no window at all.
 * - start-time identity: /proc/<pid>/stat is read AFTER pidfd_open. The
 *   exporter E held the pid before the record existed, so before our
 *   pidfd_open; if /proc then shows E's start time, nothing else can have
 *   held the pid at pidfd_open time (a pid is never shared, and E kept
 *   it from before pidfd_open to the read), so our pidfd is E's. If the
 *   pid was reused after pidfd_open, /proc shows another start time or
 *   ENOENT: refused. If E dies after the check, pidfd_getfd on our pidfd
 *   fails with ESRCH (or EBADF once its fd table is gone) instead of
 *   reaching whoever gets the pid next. Reading /proc BEFORE pidfd_open
 *   would leave exactly that window open.
 *
 * Every failure closes what it opened (goto err_* in reverse order) and
 * writes one line naming the syscall, the pid, the fd and strerror.
 */
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "handles/resolve.h"
#include "handles/resolve_internal.h"

const char *byval_status_str(byval_status_t st)
{
    switch (st) {
    case BYVAL_OK: return "ok";
    case BYVAL_E_INVALID: return "invalid handle";
    case BYVAL_E_FOREIGN_HOST: return "foreign host";
    case BYVAL_E_FOREIGN_NS: return "foreign pid namespace";
    case BYVAL_E_GONE: return "exporter gone";
    case BYVAL_E_IDENTITY: return "pid reused or handle forged";
    case BYVAL_E_BADFD: return "fd not open in exporter";
    case BYVAL_E_PERM: return "permission denied";
    case BYVAL_E_NOSYS: return "pidfd unsupported";
    case BYVAL_E_NOFD: return "out of fds";
    case BYVAL_E_FDKIND: return "fd is not the object described";
    case BYVAL_E_SYS: return "system error";
    }
    return "unknown status";
}

int byval_pidfd_exited(int pidfd)
{
    /* A pidfd polls readable once its process has exited (zombie or
     * reaped). An fd that is not open (POLLNVAL) counts as exited: the
     * caller can no longer reach that exporter through it either. */
    struct pollfd p = {.fd = pidfd, .events = POLLIN};
    return poll(&p, 1, 0) == 1 && (p.revents & (POLLIN | POLLHUP | POLLERR | POLLNVAL));
}

static const char perm_hint[] =
    " (hint: ptrace access denied: pidfd_getfd needs the exporter's uid with Yama "
    "ptrace_scope 0, or 1 with a ptracer relationship (PR_SET_PTRACER), or CAP_SYS_PTRACE; "
    "under seccomp the profile must also allow pidfd_getfd (Docker: --cap-add SYS_PTRACE))";

static const char gone_note[] = " (exporter exited)";
static const char nofd_note[] = " (the importer is out of file descriptors)";

/* Status and explanation for a failed pidfd_getfd. */
static byval_status_t getfd_status(int err, int pidfd, const char **note_p)
{
    switch (err) {
    case ESRCH:
        *note_p = gone_note;
        return BYVAL_E_GONE;
    case EBADF:
        /* Older kernels say EBADF, not ESRCH, for an exiting process whose
         * fd table is already gone: the pidfd tells the two apart. */
        if (byval_pidfd_exited(pidfd)) {
            *note_p = gone_note;
            return BYVAL_E_GONE;
        }
        /* No such fd in that process: closed since, or never there. */
        *note_p = " (the exporter has no such fd now: closed since, or a stale or forged "
                  "handle)";
        return BYVAL_E_BADFD;
    case EPERM:
    case EACCES:
        *note_p = perm_hint;
        return BYVAL_E_PERM;
    case ENOSYS:
        *note_p = " (kernel before 5.6, or a sandbox such as gVisor)";
        return BYVAL_E_NOSYS;
    case EMFILE:
    case ENFILE:
        *note_p = nofd_note;
        return BYVAL_E_NOFD;
    default:
        *note_p = "";
        return BYVAL_E_SYS;
    }
}

/* pidfd_getfd(pidfd, fd) into *dup_p (the kernel sets O_CLOEXEC). */
static byval_status_t getfd(int pidfd, uint32_t pid, uint32_t fd, int *dup_p, char *msg,
                            size_t msglen)
{
    int dup = (int)syscall(SYS_pidfd_getfd, pidfd, (int)fd, 0);
    if (dup >= 0) {
        *dup_p = dup;
        return BYVAL_OK;
    }
    int err = errno;
    const char *note;
    byval_status_t st = getfd_status(err, pidfd, &note);
    byval_msg(msg, msglen, "pidfd_getfd(pid %u, fd %u) failed: %s%s", pid, fd, strerror(err),
              note);
    return st;
}

/* The start-time flavour (see the top comment for the order). */
static byval_status_t check_start_time(const byval_record_t *rec, int pidfd, char *msg,
                                       size_t msglen)
{
    uint64_t start = 0;
    int err = byval_proc_start_time((pid_t)rec->pid, &start);
    if (err == 0 && start == rec->identity)
        return BYVAL_OK;
    if (err == 0) {
        /* Established: pid is another process than the handle names. The
         * exporter may have exited and its pid been reused, or the handle
         * was made up: both are said, neither as a fact. */
        byval_msg(msg, msglen,
                  "pid %u is another process than the handle's exporter of fd %u (start time "
                  "%llu, the handle's %llu): pid reused after the exporter exited, or a stale "
                  "or forged handle",
                  rec->pid, rec->fd, (unsigned long long)start,
                  (unsigned long long)rec->identity);
        return BYVAL_E_IDENTITY;
    }
    const char *err_text = strerror(err);
    if ((err == ENOENT || err == ESRCH) && byval_pidfd_exited(pidfd)) {
        byval_msg(msg, msglen, "read /proc/%u/stat (exporter of fd %u) failed: %s%s", rec->pid,
                  rec->fd, err_text, gone_note);
        return BYVAL_E_GONE;
    }
    if (err == ENOENT || err == ESRCH) {
        /* Our pidfd's process still holds the pid, yet /proc does not show
         * it: hidepid=invisible, or a /proc of another pid namespace. The
         * start time cannot be read, so the identity cannot be verified. */
        byval_msg(msg, msglen,
                  "read /proc/%u/stat (exporter of fd %u) failed: %s: cannot verify the "
                  "exporter's identity (/proc hides the pid or is another namespace's)",
                  rec->pid, rec->fd, err_text);
        return BYVAL_E_IDENTITY;
    }
    byval_status_t st = BYVAL_E_SYS;
    const char *note = "";
    if (err == EACCES || err == EPERM) { /* hidepid=noaccess: no ptrace read access */
        st = BYVAL_E_PERM;
        note = perm_hint;
    } else if (err == EMFILE || err == ENFILE) {
        st = BYVAL_E_NOFD;
        note = nofd_note;
    }
    byval_msg(msg, msglen, "read /proc/%u/stat (exporter of fd %u) failed: %s%s", rec->pid,
              rec->fd, err_text, note);
    return st;
}

byval_status_t byval_check_identity(const byval_record_t *rec, int pidfd, char *msg,
                                    size_t msglen)
{
    if (!(rec->flags & BYVAL_FLAG_ID_PIDFS))
        return check_start_time(rec, pidfd, msg, msglen);
    /* The record holds a pidfs inode and nothing else: if our pidfd is not
     * on pidfs, no other check is equivalent, so refuse instead of
     * guessing. Same boot id means same kernel, so this only happens when
     * something between us and the kernel (a sandbox) differs. pidfs is
     * one superblock: once fstatfs showed a pidfd on it, its device number
     * (from the fstat needed anyway) recognises the next pidfds without a
     * second syscall on every first open from an exporter. */
    static uint64_t pidfs_dev; /* 0: not seen yet */
    struct statfs sfs;
    struct stat st;
    if (fstat(pidfd, &st) != 0) {
        byval_msg(msg, msglen, "fstat(pidfd of pid %u, exporter of fd %u) failed: %s", rec->pid,
                  rec->fd, strerror(errno));
        return BYVAL_E_SYS;
    }
    uint64_t known = __atomic_load_n(&pidfs_dev, __ATOMIC_RELAXED);
    if (known == 0 || (uint64_t)st.st_dev != known) {
        if (fstatfs(pidfd, &sfs) != 0) {
            byval_msg(msg, msglen, "fstatfs(pidfd of pid %u, exporter of fd %u) failed: %s",
                      rec->pid, rec->fd, strerror(errno));
            return BYVAL_E_SYS;
        }
        if ((uint32_t)sfs.f_type != BYVAL_PIDFS_MAGIC) {
            byval_msg(msg, msglen,
                      "cannot verify that pid %u is the exporter of fd %u: the handle names it "
                      "by its pidfs inode, but this pidfd is not on pidfs (f_type 0x%lx)",
                      rec->pid, rec->fd, (unsigned long)sfs.f_type);
            return BYVAL_E_IDENTITY;
        }
        __atomic_store_n(&pidfs_dev, (uint64_t)st.st_dev, __ATOMIC_RELAXED);
    }
    if ((uint64_t)st.st_ino != rec->identity) {
        byval_msg(msg, msglen,
                  "pid %u is another process than the handle's exporter of fd %u (pidfs inode "
                  "%llu, the handle's %llu): pid reused after the exporter exited, or a stale "
                  "or forged handle",
                  rec->pid, rec->fd, (unsigned long long)st.st_ino,
                  (unsigned long long)rec->identity);
        return BYVAL_E_IDENTITY;
    }
    return BYVAL_OK;
}

/* pidfd_open(rec->pid) into *pidfd_p (always O_CLOEXEC). */
static byval_status_t open_pidfd(const byval_record_t *rec, int *pidfd_p, char *msg,
                                 size_t msglen)
{
    int pidfd = (int)syscall(SYS_pidfd_open, (pid_t)rec->pid, 0);
    if (pidfd >= 0) {
        *pidfd_p = pidfd;
        return BYVAL_OK;
    }
    int err = errno;
    byval_status_t st = BYVAL_E_SYS;
    const char *note = "";
    switch (err) {
    case ESRCH:
    case EINVAL: /* flags are 0 and pid > 0: the pid leads no thread */
    case ENOENT: /* group (6.15+ says ENOENT): the exporter is gone */
        st = BYVAL_E_GONE;
        note = gone_note;
        break;
    case ENOSYS:
        st = BYVAL_E_NOSYS;
        note = " (kernel before 5.3, or a sandbox without pidfds)";
        break;
    case EMFILE:
    case ENFILE:
        st = BYVAL_E_NOFD;
        note = nofd_note;
        break;
    case EPERM: /* only a seccomp filter or an LSM says this */
    case EACCES:
        st = BYVAL_E_PERM;
        note = perm_hint;
        break;
    }
    byval_msg(msg, msglen, "pidfd_open(pid %u) for fd %u failed: %s%s", rec->pid, rec->fd,
              strerror(err), note);
    return st;
}

static byval_evidence_fn evidence;

void byval_resolve_set_evidence(byval_evidence_fn fn)
{
    __atomic_store_n(&evidence, fn, __ATOMIC_RELEASE);
}

byval_status_t byval_export_evidence(const byval_record_t *rec, int pidfd, uint32_t fd,
                                     uint32_t ino, char *msg, size_t msglen)
{
    byval_evidence_fn fn = __atomic_load_n(&evidence, __ATOMIC_ACQUIRE);
    return fn ? fn(rec, pidfd, fd, ino, msg, msglen) : BYVAL_OK;
}

byval_status_t byval_resolve_fd(const byval_record_t *rec, const byval_self_t *self, int *fd_p,
                                int *pidfd_p, char *msg, size_t msglen)
{
    byval_status_t st;
    int pidfd = -1, dup = -1;
    if (fd_p)
        *fd_p = -1;
    if (pidfd_p)
        *pidfd_p = -1;
    if (msg && msglen)
        msg[0] = '\0';
    if (!rec || !self || !fd_p) {
        byval_msg(msg, msglen, "byval_resolve_fd: invalid arguments (NULL record, self or fd_p)");
        return BYVAL_E_INVALID;
    }
    /* Fields a decoded record always has in range; a hand-made one may not,
     * and pid_t/int casts below must not turn them into -1 or 0. */
    if (rec->pid == 0 || rec->pid > INT32_MAX || rec->fd > INT32_MAX || rec->kind < 1 ||
        rec->kind > BYVAL_KIND_MAX_ || (rec->flags & ~BYVAL_FLAG_MASK)) {
        byval_msg(msg, msglen, "invalid record: pid %u, fd %u, kind %u, flags 0x%x out of range",
                  rec->pid, rec->fd, rec->kind, rec->flags);
        return BYVAL_E_INVALID;
    }
    if (rec->boot != self->boot) {
        byval_msg(msg, msglen,
                  "handle was exported on another host or boot (boot id 0x%08x != local 0x%08x)",
                  rec->boot, self->boot);
        return BYVAL_E_FOREIGN_HOST;
    }
    if (rec->pidns != self->pidns) {
        byval_msg(msg, msglen,
                  "exporter pid %u (fd %u) lives in another pid namespace (pid:[%u] != local "
                  "pid:[%u])",
                  rec->pid, rec->fd, rec->pidns, self->pidns);
        return BYVAL_E_FOREIGN_NS;
    }
    st = open_pidfd(rec, &pidfd, msg, msglen);
    if (st != BYVAL_OK)
        return st;
    st = byval_check_identity(rec, pidfd, msg, msglen);
    if (st != BYVAL_OK)
        goto err_pidfd;
    /* That it exported the fd (its registry), then the fd's kind before
     * duplicating it (fdcheck.c): never a file that could block us or
     * whose locks a close would drop. */
    st = byval_export_evidence(rec, pidfd, rec->fd, rec->fd_ino, msg, msglen);
    if (st != BYVAL_OK)
        goto err_pidfd;
    byval_fd_seen_t seen;
    byval_obj_t obj = byval_record_obj(rec, rec->fd);
    st = byval_fd_precheck(pidfd, rec->pid, rec->fd, rec->fd_ino, rec->size, obj, &seen, msg,
                           msglen);
    if (st != BYVAL_OK)
        goto err_pidfd;
    st = getfd(pidfd, rec->pid, rec->fd, &dup, msg, msglen);
    if (st != BYVAL_OK)
        goto err_pidfd;
    st = byval_check_fd_kind(dup, rec->pid, rec->fd, rec->fd_ino, rec->size, obj, &seen, msg,
                             msglen);
    if (st != BYVAL_OK)
        goto err_dup;
    *fd_p = dup;
    if (pidfd_p)
        *pidfd_p = pidfd;
    else
        close(pidfd);
    return BYVAL_OK;

err_dup:
    close(dup);
err_pidfd:
    close(pidfd);
    return st;
}

byval_status_t byval_getfd_more(int pidfd, uint32_t pid, uint32_t fd, uint32_t fd_ino,
                                uint64_t size, int *fd_p, char *msg, size_t msglen)
{
    return byval_getfd_obj(pidfd, pid, fd, fd_ino, size, BYVAL_OBJ_MEMORY, fd_p, msg, msglen);
}

byval_status_t byval_getfd_obj(int pidfd, uint32_t pid, uint32_t fd, uint32_t fd_ino,
                               uint64_t size, byval_obj_t obj, int *fd_p, char *msg,
                               size_t msglen)
{
    int dup = -1;
    if (fd_p)
        *fd_p = -1;
    if (msg && msglen)
        msg[0] = '\0';
    if (!fd_p || pidfd < 0 || fd > INT32_MAX) {
        byval_msg(msg, msglen, "byval_getfd_more: invalid arguments (pidfd %d, pid %u, fd %u)",
                  pidfd, pid, fd);
        return BYVAL_E_INVALID;
    }
    byval_fd_seen_t seen;
    byval_status_t st = byval_fd_precheck(pidfd, pid, fd, fd_ino, size, obj, &seen, msg, msglen);
    if (st != BYVAL_OK)
        return st;
    st = getfd(pidfd, pid, fd, &dup, msg, msglen);
    if (st != BYVAL_OK)
        return st;
    st = byval_check_fd_kind(dup, pid, fd, fd_ino, size, obj, &seen, msg, msglen);
    if (st != BYVAL_OK)
        goto err_dup;
    *fd_p = dup;
    return BYVAL_OK;

err_dup:
    close(dup);
    return st;
}
