/* SPDX-License-Identifier: MIT */
/* pidfd.c - what the kernel says about a pidfd: the process's pid in our
 * namespace (its fdinfo's "Pid:" line, the one parser of it) and whether
 * it has exited. */
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "handles/resolve.h"
#include "handles/resolve_internal.h"

/* PIDFD_GET_INFO (Linux 6.13, <linux/pidfd.h>; declared here for older
 * headers): the first 64 bytes of struct pidfd_info are all we read. */
#define BYVAL_PIDFD_INFO_PID 1ull
struct byval_pidfd_info {
    uint64_t mask, cgroupid;
    uint32_t pid, tgid, ppid, ruid, rgid, euid, egid, suid, sgid, fsuid, fsgid, exit_code;
};
_Static_assert(sizeof(struct byval_pidfd_info) == 64, "PIDFD_INFO_SIZE_VER0");
#define BYVAL_PIDFD_GET_INFO _IOWR(0xFF, 11, struct byval_pidfd_info)

/* The fdinfo's "Pid:" line (every kernel with pidfds). */
static int pid_from_fdinfo(int pidfd)
{
    char path[48], buf[1024];
    snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", pidfd);
    int f = open(path, O_RDONLY | O_CLOEXEC);
    if (f < 0)
        return -2;
    ssize_t n;
    do
        n = read(f, buf, sizeof(buf) - 1);
    while (n < 0 && errno == EINTR);
    close(f);
    if (n <= 0)
        return -2;
    buf[n] = '\0';
    const char *p = strstr(buf, "\nPid:");
    int pid;
    if (!p || sscanf(p + 5, "%d", &pid) != 1)
        return -2;
    return pid;
}

int byval_pidfd_pid(int pidfd)
{
    /* The ioctl answers in 0.3 us where opening and parsing the fdinfo
     * costs 9 (a registry attach asks once per exporter). It says ESRCH
     * both for a process outside our namespace tree and for one that
     * exited, and it is missing before 6.13 (ENOTTY, EINVAL): the fdinfo
     * then tells which (0 or -1). */
    struct byval_pidfd_info info = {.mask = BYVAL_PIDFD_INFO_PID};
    if (pidfd >= 0 && byval_sys3(SYS_ioctl, pidfd, (long)BYVAL_PIDFD_GET_INFO, (long)&info) == 0 &&
        (info.mask & BYVAL_PIDFD_INFO_PID) && info.pid > 0 && info.pid <= INT32_MAX)
        return (int)info.pid;
    return pid_from_fdinfo(pidfd);
}

int byval_pidfd_exited(int pidfd)
{
    /* A pidfd polls readable once its process has exited (zombie or
     * reaped). An fd that is not open (POLLNVAL) counts as exited: the
     * caller can no longer reach that exporter through it either. */
    struct pollfd p = {.fd = pidfd, .events = POLLIN};
    return poll(&p, 1, 0) == 1 && (p.revents & (POLLIN | POLLHUP | POLLERR | POLLNVAL));
}
