/* SPDX-License-Identifier: MIT */
/*
 * resolve.c - turn a record into a local duplicate of the exporter's fd.
 *
 * Order matters for PID reuse: pidfd_open FIRST, then check the identity
 * of the process behind that pidfd, then pidfd_getfd through that pidfd.
 * With pidfs the identity is the pidfd's own inode (exact). Without, we
 * read /proc/<pid>/stat after pidfd_open: if the pid was reused in
 * between, /proc shows the new process (start time differs: refused) or
 * nothing (gone); if it matches, our pidfd was opened on the original
 * process, and pidfd_getfd on it fails with ESRCH if that one dies later.
 */
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
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
    case BYVAL_E_IDENTITY: return "pid reused";
    case BYVAL_E_BADFD: return "fd closed in exporter";
    case BYVAL_E_PERM: return "permission denied";
    case BYVAL_E_NOSYS: return "pidfd unsupported";
    case BYVAL_E_NOFD: return "out of fds";
    case BYVAL_E_FDKIND: return "fd is not the exported object";
    case BYVAL_E_SYS: return "system error";
    }
    return "unknown status";
}

uint64_t byval_fd_inode(int fd)
{
    struct stat st;
    return fstat(fd, &st) == 0 ? (uint64_t)st.st_ino : 0;
}

int byval_pidfd_exited(int pidfd)
{
    struct pollfd p = {.fd = pidfd, .events = POLLIN};
    return poll(&p, 1, 0) == 1 && (p.revents & (POLLIN | POLLHUP | POLLERR | POLLNVAL));
}

#define MSG(...) (msg ? (void)snprintf(msg, msglen, __VA_ARGS__) : (void)0)

static const char perm_hint[] =
    "(hint: pidfd_getfd needs ptrace access to the exporter: the same uid and "
    "Yama ptrace_scope 0 (or 1 with a ptracer relation), or CAP_SYS_PTRACE; "
    "containers need a seccomp profile that allows pidfd_getfd, e.g. Docker "
    "--cap-add SYS_PTRACE)";

static byval_status_t errno_status(int err, int pidfd)
{
    switch (err) {
    case ESRCH: return BYVAL_E_GONE;
    case EBADF: return pidfd >= 0 && byval_pidfd_exited(pidfd) ? BYVAL_E_GONE : BYVAL_E_BADFD;
    case EPERM:
    case EACCES: return BYVAL_E_PERM;
    case ENOSYS: return BYVAL_E_NOSYS;
    case EMFILE:
    case ENFILE: return BYVAL_E_NOFD;
    default: return BYVAL_E_SYS;
    }
}

static byval_status_t check_identity(const byval_record_t *rec, const byval_self_t *self,
                                     int pidfd, char *msg, size_t msglen)
{
    if (rec->flags & BYVAL_FLAG_ID_PIDFS) {
        struct stat st;
        if (!(self->id_flags & BYVAL_FLAG_ID_PIDFS)) {
            MSG("cannot verify exporter pid %u: handle identifies it by pidfs inode, this "
                "kernel has no pidfs",
                rec->pid);
            return BYVAL_E_IDENTITY;
        }
        if (fstat(pidfd, &st) != 0) {
            MSG("fstat(pidfd of pid %u) failed: %s", rec->pid, strerror(errno));
            return BYVAL_E_SYS;
        }
        if ((uint64_t)st.st_ino != rec->identity) {
            MSG("pid %u is not the exporter any more (pidfs inode %llu != %llu): the exporter "
                "exited and its pid was reused",
                rec->pid, (unsigned long long)st.st_ino, (unsigned long long)rec->identity);
            return BYVAL_E_IDENTITY;
        }
        return BYVAL_OK;
    }
    int err = 0;
    uint64_t start = byval_proc_start_time((pid_t)rec->pid, &err);
    if (start == 0) {
        MSG("exporter pid %u is gone (/proc/%u/stat: %s)", rec->pid, rec->pid,
            strerror(err ? err : ESRCH));
        return BYVAL_E_GONE;
    }
    if (start != rec->identity) {
        MSG("pid %u is not the exporter any more (start time %llu != %llu): the exporter "
            "exited and its pid was reused",
            rec->pid, (unsigned long long)start, (unsigned long long)rec->identity);
        return BYVAL_E_IDENTITY;
    }
    return BYVAL_OK;
}

/* The duplicate must be the object the exporter described: same inode
 * (low 32 bits) and, when the record has a size, the same size in pages. */
static byval_status_t check_fd_kind(const byval_record_t *rec, int fd, char *msg, size_t msglen)
{
    struct stat st;
    if (fstat(fd, &st) != 0) {
        MSG("fstat(fd %u of pid %u) failed: %s", rec->fd, rec->pid, strerror(errno));
        return BYVAL_E_SYS;
    }
    if ((uint32_t)st.st_ino != rec->fd_ino) {
        MSG("fd %u in pid %u is not the exported object (inode %u != %u): the exporter closed "
            "it and reused the number",
            rec->fd, rec->pid, (unsigned)st.st_ino, rec->fd_ino);
        return BYVAL_E_FDKIND;
    }
    if (rec->size) {
        off_t size = S_ISREG(st.st_mode) ? st.st_size : lseek(fd, 0, SEEK_END);
        uint64_t pages = size > 0 ? ((uint64_t)size + BYVAL_WIRE_PAGE - 1) / BYVAL_WIRE_PAGE : 0;
        if (pages != rec->size / BYVAL_WIRE_PAGE) {
            MSG("fd %u in pid %u is not the exported object (%llu pages != %llu)", rec->fd,
                rec->pid, (unsigned long long)pages,
                (unsigned long long)(rec->size / BYVAL_WIRE_PAGE));
            return BYVAL_E_FDKIND;
        }
    }
    return BYVAL_OK;
}

byval_status_t byval_resolve_fd(const byval_record_t *rec, const byval_self_t *self, int *fd_p,
                                int *pidfd_p, char *msg, size_t msglen)
{
    if (fd_p)
        *fd_p = -1;
    if (pidfd_p)
        *pidfd_p = -1;
    if (msg && msglen)
        msg[0] = '\0';
    if (!rec || !self || !fd_p) {
        MSG("invalid arguments");
        return BYVAL_E_INVALID;
    }
    if (rec->boot != self->boot) {
        MSG("handle was exported on another host or boot (boot id 0x%08x != local 0x%08x)",
            rec->boot, self->boot);
        return BYVAL_E_FOREIGN_HOST;
    }
    if (rec->pidns != self->pidns) {
        MSG("exporter pid %u lives in another pid namespace (pid:[%u] != local pid:[%u])",
            rec->pid, rec->pidns, self->pidns);
        return BYVAL_E_FOREIGN_NS;
    }
    int pidfd = (int)syscall(SYS_pidfd_open, (pid_t)rec->pid, 0);
    if (pidfd < 0) {
        int err = errno;
        MSG("pidfd_open(pid %u) failed: %s", rec->pid, strerror(err));
        return errno_status(err, -1);
    }
    byval_status_t st = check_identity(rec, self, pidfd, msg, msglen);
    if (st != BYVAL_OK)
        goto err_pidfd;
    int fd = (int)syscall(SYS_pidfd_getfd, pidfd, (int)rec->fd, 0);
    if (fd < 0) {
        int err = errno;
        st = errno_status(err, pidfd);
        MSG("pidfd_getfd(pid %u, fd %u) failed: %s%s%s", rec->pid, rec->fd, strerror(err),
            st == BYVAL_E_PERM ? " " : "", st == BYVAL_E_PERM ? perm_hint : "");
        goto err_pidfd;
    }
    st = check_fd_kind(rec, fd, msg, msglen);
    if (st != BYVAL_OK)
        goto err_fd;
    *fd_p = fd;
    if (pidfd_p)
        *pidfd_p = pidfd;
    else
        close(pidfd);
    return BYVAL_OK;

err_fd:
    close(fd);
err_pidfd:
    close(pidfd);
    return st;
}

byval_status_t byval_getfd_more(int pidfd, uint32_t pid, uint32_t fd, uint32_t fd_ino, int *fd_p,
                                char *msg, size_t msglen)
{
    if (!fd_p || pidfd < 0 || fd > INT32_MAX)
        return BYVAL_E_INVALID;
    *fd_p = -1;
    int dup = (int)syscall(SYS_pidfd_getfd, pidfd, (int)fd, 0);
    if (dup < 0) {
        int err = errno;
        byval_status_t st = errno_status(err, pidfd);
        MSG("pidfd_getfd(pid %u, fd %u) failed: %s%s%s", pid, fd, strerror(err),
            st == BYVAL_E_PERM ? " " : "", st == BYVAL_E_PERM ? perm_hint : "");
        return st;
    }
    byval_record_t rec = {.pid = pid, .fd = fd, .fd_ino = fd_ino};
    byval_status_t st = check_fd_kind(&rec, dup, msg, msglen);
    if (st != BYVAL_OK) {
        close(dup);
        return st;
    }
    *fd_p = dup;
    return BYVAL_OK;
}
