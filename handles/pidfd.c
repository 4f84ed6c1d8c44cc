/* SPDX-License-Identifier: MIT */
/* pidfd.c - what the kernel says about a pidfd: the process's pid in our
 * namespace (its fdinfo's "Pid:" line, the one parser of it) and whether
 * it has exited. */
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "handles/resolve.h"
#include "handles/resolve_internal.h"

int byval_pidfd_pid(int pidfd)
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

int byval_pidfd_exited(int pidfd)
{
    /* A pidfd polls readable once its process has exited (zombie or
     * reaped). An fd that is not open (POLLNVAL) counts as exited: the
     * caller can no longer reach that exporter through it either. */
    struct pollfd p = {.fd = pidfd, .events = POLLIN};
    return poll(&p, 1, 0) == 1 && (p.revents & (POLLIN | POLLHUP | POLLERR | POLLNVAL));
}
