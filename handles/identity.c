/* SPDX-License-Identifier: MIT */
/*
 * identity.c - the pipeline's "identify the exporter" step (resolve.c):
 * a pidfd of the exporter's pid in OUR namespace, and the proof that the
 * process behind that pidfd is the one the record names; plus the
 * statuses' names and the wording every step shares.
 *
 * Why the order is race-free against PID reuse: a pidfd refers to one
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
 * pid here is always the exporter's pid in our namespace (the record's
 * own one only when it lives in ours): /proc paths and messages use it.
 */
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

const char byval_perm_hint[] =
    " (hint: ptrace access denied: pidfd_getfd needs the exporter's uid with Yama "
    "ptrace_scope 0, or 1 with a ptracer relationship (PR_SET_PTRACER), or CAP_SYS_PTRACE; "
    "under seccomp the profile must also allow pidfd_getfd (Docker: --cap-add SYS_PTRACE))";
const char byval_gone_note[] = " (exporter exited)";
const char byval_nofd_note[] = " (the importer is out of file descriptors)";

byval_status_t byval_getfd_status(int err, int pidfd, const char **note_p)
{
    switch (err) {
    case ESRCH: *note_p = byval_gone_note; return BYVAL_E_GONE;
    case EBADF:
        /* Older kernels say EBADF, not ESRCH, for an exiting process whose
         * fd table is already gone: the pidfd tells the two apart. */
        if (byval_pidfd_exited(pidfd)) {
            *note_p = byval_gone_note;
            return BYVAL_E_GONE;
        }
        /* No such fd in that process: closed since, or never there. */
        *note_p = " (the exporter has no such fd now: closed since, or a stale or forged "
                  "handle)";
        return BYVAL_E_BADFD;
    case EPERM:
    case EACCES: *note_p = byval_perm_hint; return BYVAL_E_PERM;
    case ENOSYS:
        *note_p = " (kernel before 5.6, or a sandbox such as gVisor)";
        return BYVAL_E_NOSYS;
    case EMFILE:
    case ENFILE: *note_p = byval_nofd_note; return BYVAL_E_NOFD;
    default: *note_p = ""; return BYVAL_E_SYS;
    }
}

/* The start-time flavour (see the top comment for the order). */
static byval_status_t check_start_time(const byval_record_t *rec, uint32_t pid, int pidfd,
                                       char *msg, size_t msglen)
{
    uint64_t start = 0;
    int err = byval_proc_start_time((pid_t)pid, &start);
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
                  pid, rec->fd, (unsigned long long)start, (unsigned long long)rec->identity);
        return BYVAL_E_IDENTITY;
    }
    const char *err_text = strerror(err);
    if ((err == ENOENT || err == ESRCH) && byval_pidfd_exited(pidfd)) {
        byval_msg(msg, msglen, "read /proc/%u/stat (exporter of fd %u) failed: %s%s", pid, rec->fd,
                  err_text, byval_gone_note);
        return BYVAL_E_GONE;
    }
    if (err == ENOENT || err == ESRCH) {
        /* Our pidfd's process still holds the pid, yet /proc does not show
         * it: hidepid=invisible, or a /proc of another pid namespace. The
         * start time cannot be read, so the identity cannot be verified. */
        byval_msg(msg, msglen,
                  "read /proc/%u/stat (exporter of fd %u) failed: %s: cannot verify the "
                  "exporter's identity (/proc hides the pid or is another namespace's)",
                  pid, rec->fd, err_text);
        return BYVAL_E_IDENTITY;
    }
    byval_status_t st = BYVAL_E_SYS;
    const char *note = "";
    if (err == EACCES || err == EPERM) { /* hidepid=noaccess: no ptrace read access */
        st = BYVAL_E_PERM;
        note = byval_perm_hint;
    } else if (err == EMFILE || err == ENFILE) {
        st = BYVAL_E_NOFD;
        note = byval_nofd_note;
    }
    byval_msg(msg, msglen, "read /proc/%u/stat (exporter of fd %u) failed: %s%s", pid, rec->fd,
              err_text, note);
    return st;
}

byval_status_t byval_identify(const byval_record_t *rec, uint32_t pid, int pidfd, char *msg,
                              size_t msglen)
{
    if (!(rec->flags & BYVAL_FLAG_ID_PIDFS))
        return check_start_time(rec, pid, pidfd, msg, msglen);
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
        byval_msg(msg, msglen, "fstat(pidfd of pid %u, exporter of fd %u) failed: %s", pid, rec->fd,
                  strerror(errno));
        return BYVAL_E_SYS;
    }
    uint64_t known = __atomic_load_n(&pidfs_dev, __ATOMIC_RELAXED);
    if (known == 0 || (uint64_t)st.st_dev != known) {
        if (fstatfs(pidfd, &sfs) != 0) {
            byval_msg(msg, msglen, "fstatfs(pidfd of pid %u, exporter of fd %u) failed: %s", pid,
                      rec->fd, strerror(errno));
            return BYVAL_E_SYS;
        }
        if ((uint32_t)sfs.f_type != BYVAL_PIDFS_MAGIC) {
            byval_msg(msg, msglen,
                      "cannot verify that pid %u is the exporter of fd %u: the handle names it "
                      "by its pidfs inode, but this pidfd is not on pidfs (f_type 0x%lx)",
                      pid, rec->fd, (unsigned long)sfs.f_type);
            return BYVAL_E_IDENTITY;
        }
        __atomic_store_n(&pidfs_dev, (uint64_t)st.st_dev, __ATOMIC_RELAXED);
    }
    if ((uint64_t)st.st_ino != rec->identity) {
        byval_msg(msg, msglen,
                  "pid %u is another process than the handle's exporter of fd %u (pidfs inode "
                  "%llu, the handle's %llu): pid reused after the exporter exited, or a stale "
                  "or forged handle",
                  pid, rec->fd, (unsigned long long)st.st_ino, (unsigned long long)rec->identity);
        return BYVAL_E_IDENTITY;
    }
    return BYVAL_OK;
}

byval_status_t byval_check_identity(const byval_record_t *rec, int pidfd, char *msg, size_t msglen)
{
    return byval_identify(rec, rec->pid, pidfd, msg, msglen);
}

byval_status_t byval_open_exporter(const byval_record_t *rec, uint32_t pid, int *pidfd_p, char *msg,
                                   size_t msglen)
{
    int pidfd = byval_pidfd_open((pid_t)pid, 0);
    if (pidfd < 0) {
        int err = errno;
        byval_status_t st = BYVAL_E_SYS;
        const char *note = "";
        switch (err) {
        case ESRCH:
        case EINVAL: /* flags are 0 and pid > 0: the pid leads no thread */
        case ENOENT: /* group (6.15+ says ENOENT): the exporter is gone */
            st = BYVAL_E_GONE;
            note = byval_gone_note;
            break;
        case ENOSYS:
            st = BYVAL_E_NOSYS;
            note = " (kernel before 5.3, or a sandbox without pidfds)";
            break;
        case EMFILE:
        case ENFILE:
            st = BYVAL_E_NOFD;
            note = byval_nofd_note;
            break;
        case EPERM: /* only a seccomp filter or an LSM says this */
        case EACCES:
            st = BYVAL_E_PERM;
            note = byval_perm_hint;
            break;
        }
        byval_msg(msg, msglen, "pidfd_open(pid %u) for fd %u failed: %s%s", pid, rec->fd,
                  strerror(err), note);
        return st;
    }
    byval_status_t st = byval_identify(rec, pid, pidfd, msg, msglen);
    if (st != BYVAL_OK) {
        close(pidfd);
        return st;
    }
    *pidfd_p = pidfd;
    return BYVAL_OK;
}
