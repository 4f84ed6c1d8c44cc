/* SPDX-License-Identifier: MIT */
/*
 * self.c - who a process is (self.h): how an exporter describes itself in
 * a record, and how an importer proves that the process behind a pidfd is
 * the one a record names.
 *
 * Identity against pid reuse, chosen by the exporter: its pidfs inode
 * (Linux 6.9+: one per process, never reused during the boot; the
 * importer compares the inode of the very pidfd it duplicates from, no
 * window), else its start time in clock ticks, read by the importer
 * AFTER pidfd_open: the exporter held the pid before the record existed,
 * so if /proc still shows its start time, our pidfd is its (a pid reused
 * after pidfd_open shows another start time; one reused later makes
 * pidfd_getfd fail with ESRCH). man/ipcbyval.7 (SECURITY) says more.
 */
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>

#include "handles/self.h"
#include "handles/sys.h"

/* Written once by whoever wins EMPTY -> BUSY, immutable while READY: no
 * lock a fork child could inherit held, and a reset is one store. */
enum { SELF_EMPTY, SELF_BUSY, SELF_READY };
static int self_state;
static byval_self_t self_cached;

int byval_read_file(const char *path, char *buf, size_t len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    ssize_t n;
    while ((n = read(fd, buf, len - 1)) < 0 && errno == EINTR)
        ;
    int err = errno;
    close(fd);
    buf[n > 0 ? n : 0] = '\0';
    return n < 0 ? -err : (int)n;
}

int byval_proc_start_time(pid_t pid, uint64_t *start_p)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    int n = byval_read_file(path, buf, sizeof(buf));
    if (n < 0)
        return -n;
    /* comm may contain spaces and ')': the fields resume after the last
     * ')'; starttime is the 20th after it (field 22). */
    char *p = strrchr(buf, ')');
    unsigned long long start;
    if (!p ||
        sscanf(p + 1,
               " %*c %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %llu",
               &start) != 1)
        return EIO;
    *start_p = start;
    return 0;
}

int byval_pidfd_is_pidfs(int pidfd)
{
    struct statfs sfs;
    return fstatfs(pidfd, &sfs) == 0 && (uint32_t)sfs.f_type == BYVAL_PIDFS_MAGIC;
}

static int self_compute(byval_self_t *s)
{
    struct stat st;
    memset(s, 0, sizeof(*s));
    s->pid = (uint32_t)getpid();
    if (stat("/proc/self/ns/pid", &st) != 0)
        return -1;
    s->pidns = (uint32_t)st.st_ino;
    char boot[64]; /* a UUID in text form */
    if (byval_read_file("/proc/sys/kernel/random/boot_id", boot, sizeof(boot)) < 36)
        return -1;
    s->boot = byval_fnv1a32(boot, 36);
    int pidfd = byval_pidfd_open((pid_t)s->pid, 0);
    if (pidfd >= 0) {
        int pidfs = byval_pidfd_is_pidfs(pidfd) && fstat(pidfd, &st) == 0;
        close(pidfd);
        if (pidfs) {
            s->identity = (uint64_t)st.st_ino;
            s->id_flags = BYVAL_FLAG_ID_PIDFS;
            return 0;
        }
    }
    return byval_proc_start_time((pid_t)s->pid, &s->identity) == 0 ? 0 : -1;
}

int byval_self_get(byval_self_t *self_p)
{
    if (!self_p)
        return -1;
    if (__atomic_load_n(&self_state, __ATOMIC_ACQUIRE) == SELF_READY) {
        *self_p = self_cached;
        return 0;
    }
    /* Racing first uses each compute the same; one publishes it. */
    byval_self_t s;
    if (self_compute(&s) != 0)
        return -1;
    int expect = SELF_EMPTY;
    if (__atomic_compare_exchange_n(&self_state, &expect, SELF_BUSY, 0, __ATOMIC_ACQUIRE,
                                    __ATOMIC_RELAXED)) {
        self_cached = s;
        __atomic_store_n(&self_state, SELF_READY, __ATOMIC_RELEASE);
    }
    *self_p = s;
    return 0;
}

void byval_self_reset(void)
{
    /* A fork child: one store (a parent thread caught BUSY cannot stick). */
    __atomic_store_n(&self_state, SELF_EMPTY, __ATOMIC_RELEASE);
}

void byval_record_set_exporter(byval_record_t *rec, const byval_self_t *self)
{
    rec->version = BYVAL_WIRE_VERSION;
    rec->pid = self->pid;
    rec->pidns = self->pidns;
    rec->boot = self->boot;
    rec->identity = self->identity;
    rec->flags =
        (uint8_t)((rec->flags & ~BYVAL_FLAG_ID_PIDFS) | (self->id_flags & BYVAL_FLAG_ID_PIDFS));
}

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

static const char byval_perm_hint[] =
    " (hint: ptrace access denied: pidfd_getfd needs the exporter's uid with Yama "
    "ptrace_scope 0, or 1 with a ptracer relationship (PR_SET_PTRACER), or CAP_SYS_PTRACE; "
    "under seccomp the profile must also allow pidfd_getfd (Docker: --cap-add SYS_PTRACE))";
static const char byval_gone_note[] = " (exporter exited)";
static const char byval_nofd_note[] = " (the importer is out of file descriptors)";

/* The status and note of the errors every step shares. */
static byval_status_t err_status(int err, const char **note_p)
{
    switch (err) {
    case ESRCH: *note_p = byval_gone_note; return BYVAL_E_GONE;
    case EPERM: /* pidfd_open: only a seccomp filter or an LSM says this */
    case EACCES: *note_p = byval_perm_hint; return BYVAL_E_PERM;
    case EMFILE:
    case ENFILE: *note_p = byval_nofd_note; return BYVAL_E_NOFD;
    default: *note_p = ""; return BYVAL_E_SYS;
    }
}

byval_status_t byval_getfd_status(int err, int pidfd, const char **note_p)
{
    switch (err) {
    case EBADF:
        /* Older kernels say EBADF, not ESRCH, for an exiting process whose
         * fd table is already gone: the pidfd tells the two apart. */
        if (byval_pidfd_exited(pidfd))
            return err_status(ESRCH, note_p);
        /* No such fd in that process: closed since, or never there. */
        *note_p = " (the exporter has no such fd now: closed since, or a stale or forged "
                  "handle)";
        return BYVAL_E_BADFD;
    case ENOSYS:
        *note_p = " (kernel before 5.6, or a sandbox such as gVisor)";
        return BYVAL_E_NOSYS;
    default: return err_status(err, note_p);
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
    if (err == 0)
        return byval_fail(
            BYVAL_E_IDENTITY, msg, msglen,
            "pid %u is another process than the handle's exporter of fd %u (start time %llu, the "
            "handle's %llu): pid reused after the exporter exited, or a stale or forged handle",
            pid, rec->fd, (unsigned long long)start, (unsigned long long)rec->identity);
    /* Our pidfd's process holds the pid, yet /proc does not show it. */
    if ((err == ENOENT || err == ESRCH) && !byval_pidfd_exited(pidfd))
        return byval_fail(BYVAL_E_IDENTITY, msg, msglen,
                          "read /proc/%u/stat (exporter of fd %u) failed: %s: cannot verify the "
                          "exporter's identity (/proc hides the pid or is another namespace's)",
                          pid, rec->fd, strerror(err));
    const char *note; /* EACCES: hidepid=noaccess */
    byval_status_t st = err_status(err == ENOENT ? ESRCH : err, &note);
    return byval_fail(st, msg, msglen, "read /proc/%u/stat (exporter of fd %u) failed: %s%s", pid,
                      rec->fd, strerror(err), note);
}

/* Is the process behind pidfd (pid: its pid here) the one rec names? */
static byval_status_t identify(const byval_record_t *rec, uint32_t pid, int pidfd, char *msg,
                               size_t msglen)
{
    if (!(rec->flags & BYVAL_FLAG_ID_PIDFS))
        return check_start_time(rec, pid, pidfd, msg, msglen);
    /* A pidfs inode and nothing else: a pidfd not on pidfs (a sandbox) is
     * refused. pidfs is one superblock: its device, once seen, spares the
     * fstatfs of the next pidfds. */
    static uint64_t pidfs_dev; /* 0: not seen yet */
    struct statfs sfs;
    struct stat st;
    if (fstat(pidfd, &st) != 0)
        return byval_fail(BYVAL_E_SYS, msg, msglen,
                          "fstat(pidfd of pid %u, exporter of fd %u) failed: %s", pid, rec->fd,
                          strerror(errno));
    uint64_t known = __atomic_load_n(&pidfs_dev, __ATOMIC_RELAXED);
    if (known == 0 || (uint64_t)st.st_dev != known) {
        if (fstatfs(pidfd, &sfs) != 0)
            return byval_fail(BYVAL_E_SYS, msg, msglen,
                              "fstatfs(pidfd of pid %u, exporter of fd %u) failed: %s", pid,
                              rec->fd, strerror(errno));
        if ((uint32_t)sfs.f_type != BYVAL_PIDFS_MAGIC)
            return byval_fail(
                BYVAL_E_IDENTITY, msg, msglen,
                "cannot verify that pid %u is the exporter of fd %u: the handle names it by its "
                "pidfs inode, but this pidfd is not on pidfs (f_type 0x%lx)",
                pid, rec->fd, (unsigned long)sfs.f_type);
        __atomic_store_n(&pidfs_dev, (uint64_t)st.st_dev, __ATOMIC_RELAXED);
    }
    if ((uint64_t)st.st_ino != rec->identity)
        return byval_fail(
            BYVAL_E_IDENTITY, msg, msglen,
            "pid %u is another process than the handle's exporter of fd %u (pidfs inode %llu, the "
            "handle's %llu): pid reused after the exporter exited, or a stale or forged handle",
            pid, rec->fd, (unsigned long long)st.st_ino, (unsigned long long)rec->identity);
    return BYVAL_OK;
}

byval_status_t byval_check_identity(const byval_record_t *rec, int pidfd, char *msg, size_t msglen)
{
    return identify(rec, rec->pid, pidfd, msg, msglen);
}

byval_status_t byval_open_exporter(const byval_record_t *rec, uint32_t pid, int *pidfd_p, char *msg,
                                   size_t msglen)
{
    int pidfd = byval_pidfd_open((pid_t)pid, 0);
    if (pidfd < 0) {
        /* EINVAL: the pid leads no thread; ENOENT (6.15+): a gone group. */
        int err = errno;
        const char *note = " (kernel before 5.3, or a sandbox without pidfds)";
        byval_status_t st = err == ENOSYS
            ? BYVAL_E_NOSYS
            : err_status(err == EINVAL || err == ENOENT ? ESRCH : err, &note);
        return byval_fail(st, msg, msglen, "pidfd_open(pid %u) for fd %u failed: %s%s", pid,
                          rec->fd, strerror(err), note);
    }
    byval_status_t st = identify(rec, pid, pidfd, msg, msglen);
    if (st != BYVAL_OK) {
        close(pidfd);
        return st;
    }
    *pidfd_p = pidfd;
    return BYVAL_OK;
}

/* PIDFD_GET_INFO (Linux 6.13, <linux/pidfd.h>; declared here for older
 * headers): the first 64 bytes of struct pidfd_info are all we read. */
#define BYVAL_PIDFD_INFO_PID 1ull
struct byval_pidfd_info {
    uint64_t mask, cgroupid;
    uint32_t pid, tgid, ppid, ruid, rgid, euid, egid, suid, sgid, fsuid, fsgid, exit_code;
};
_Static_assert(sizeof(struct byval_pidfd_info) == 64, "PIDFD_INFO_SIZE_VER0");
#define BYVAL_PIDFD_GET_INFO _IOWR(0xFF, 11, struct byval_pidfd_info)

int byval_pidfd_pid(int pidfd)
{
    /* PIDFD_GET_INFO (6.13) answers in 0.3 us, the fdinfo in 9; its ESRCH
     * (outside our tree, or exited) the fdinfo tells apart (0 or -1). */
    struct byval_pidfd_info info = {.mask = BYVAL_PIDFD_INFO_PID};
    if (pidfd >= 0 && byval_sys3(SYS_ioctl, pidfd, (long)BYVAL_PIDFD_GET_INFO, (long)&info) == 0 &&
        (info.mask & BYVAL_PIDFD_INFO_PID) && info.pid > 0 && info.pid <= INT32_MAX)
        return (int)info.pid;
    /* The fdinfo's "Pid:" line (every kernel with pidfds). */
    char path[48], buf[1024];
    snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", pidfd);
    const char *p = byval_read_file(path, buf, sizeof(buf)) > 0 ? strstr(buf, "\nPid:") : NULL;
    int pid;
    return p && sscanf(p + 5, "%d", &pid) == 1 ? pid : -2;
}

int byval_pidfd_exited(int pidfd)
{
    /* Readable once its process exited; a closed fd (POLLNVAL) counts too. */
    struct pollfd p = {.fd = pidfd, .events = POLLIN};
    return poll(&p, 1, 0) == 1 && (p.revents & (POLLIN | POLLHUP | POLLERR | POLLNVAL));
}

int byval_pidfd_record(int pidfd, uint32_t pid, const byval_self_t *self, byval_record_t *rec)
{
    struct stat st;
    memset(rec, 0, sizeof(*rec));
    rec->pid = pid;
    rec->pidns = self->pidns;
    rec->boot = self->boot;
    if (byval_pidfd_is_pidfs(pidfd) && fstat(pidfd, &st) == 0) {
        rec->identity = (uint64_t)st.st_ino;
        rec->flags = BYVAL_FLAG_ID_PIDFS;
        return 0;
    }
    return byval_proc_start_time((pid_t)pid, &rec->identity) == 0 &&
            byval_pidfd_pid(pidfd) == (int)pid
        ? 0
        : -1;
}
