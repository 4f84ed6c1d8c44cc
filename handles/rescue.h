/* SPDX-License-Identifier: MIT */
/* rescue.h - another library's pidfd_getfd(pidfd, fd, 0), refused by the
 * kernel (Yama, seccomp, gVisor), asked of the process's ipcbyval broker
 * instead, which serves only fds it registered as exported GPU memory and
 * still holds (registry_fds.c), to peers of its uid (broker_fetch.c). */
#ifndef BYVAL_HANDLES_RESCUE_H
#define BYVAL_HANDLES_RESCUE_H

#include "handles/self.h"

/* A new fd (O_CLOEXEC) for fd of pidfd's process, found by the pid the
 * kernel shows for pidfd (ours: *pid_p, 0 unknown) and proven by its
 * identity at the listening socket. BYVAL_OK, or a status with one line
 * in msg (the caller then returns the kernel's own error). */
byval_status_t byval_rescue_getfd(int pidfd, int fd, int *fd_p, uint32_t *pid_p, char *msg,
                                  size_t msglen);

#endif
