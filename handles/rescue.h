/* SPDX-License-Identifier: MIT */
/*
 * rescue.h - another library's own pidfd_getfd(pidfd, fd, 0) was refused
 * by the kernel (EPERM: Yama ptrace_scope, a container's seccomp profile;
 * ENOSYS: gVisor): ask the process the pidfd names for that fd through its
 * ipcbyval broker, which serves only fds it registered as exported GPU
 * memory and still holds (registry.h, registry_fds.c), to peers of its
 * uid. No GPU API and no configuration: the shim decides when to call.
 */
#ifndef BYVAL_HANDLES_RESCUE_H
#define BYVAL_HANDLES_RESCUE_H

#include <stddef.h>
#include <stdint.h>

#include "handles/self.h"

/*
 * A new fd (O_CLOEXEC, as pidfd_getfd's) for fd of the process pidfd
 * refers to. That process is found by the pid the kernel shows for pidfd
 * (in our pid namespace: a process we cannot see is not asked) and proven
 * by its identity (pidfs inode, else start time) at the listening socket;
 * it must share our pid namespace (the broker's name is per namespace).
 * *pid_p: that pid (0 when unknown). BYVAL_OK, or a status with one line
 * in msg; the caller then returns the kernel's own error unchanged.
 */
byval_status_t byval_rescue_getfd(int pidfd, int fd, int *fd_p, uint32_t *pid_p, char *msg,
                                  size_t msglen);

#endif
