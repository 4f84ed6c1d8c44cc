/* SPDX-License-Identifier: MIT */
/*
 * rescue.c - fetch a refused pidfd_getfd's fd from its owner's broker
 * (see rescue.h).
 *
 * The process asked is the one the caller's pidfd names, never another:
 * the pid comes from the kernel's own view of the pidfd
 * (/proc/self/fdinfo: "Pid:", -1 once it exited, 0 outside our pid
 * namespace), its identity from the pidfd itself (a pidfs inode is the
 * process) or, on kernels before pidfs, from its start time read while
 * the pidfd still shows it alive (so the pid was not reused in between).
 * The broker's listener must then prove that identity (broker_fetch.c).
 */
#include "handles/rescue.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "handles/broker.h"
#include "handles/resolve_internal.h"

byval_status_t byval_rescue_getfd(int pidfd, int fd, int *fd_p, uint32_t *pid_p, char *msg,
                                  size_t msglen)
{
    byval_self_t self;
    byval_record_t rec;
    struct stat st;
    *fd_p = -1;
    *pid_p = 0;
    if (fd < 0) {
        byval_msg(msg, msglen, "fd %d is no fd number", fd);
        return BYVAL_E_BADFD;
    }
    int pid = byval_pidfd_pid(pidfd);
    if (pid == -2) {
        byval_msg(msg, msglen, "fd %d is not a pidfd", pidfd);
        return BYVAL_E_SYS;
    }
    if (pid == -1) {
        byval_msg(msg, msglen, "the process of pidfd %d exited", pidfd);
        return BYVAL_E_GONE;
    }
    if (pid == 0) {
        byval_msg(msg, msglen,
                  "the process of pidfd %d is outside our pid namespace: its broker is not "
                  "reachable by name from here",
                  pidfd);
        return BYVAL_E_GONE;
    }
    *pid_p = (uint32_t)pid;
    if (byval_self_get(&self) != 0) {
        byval_msg(msg, msglen, "cannot read this process's own identity");
        return BYVAL_E_SYS;
    }
    memset(&rec, 0, sizeof(rec));
    rec.pid = (uint32_t)pid;
    rec.pidns = self.pidns;
    rec.boot = self.boot;
    if (byval_pidfd_is_pidfs(pidfd) && fstat(pidfd, &st) == 0) {
        rec.identity = (uint64_t)st.st_ino;
        rec.flags = BYVAL_FLAG_ID_PIDFS;
    } else if (byval_proc_start_time(pid, &rec.identity) != 0 || byval_pidfd_pid(pidfd) != pid) {
        byval_msg(msg, msglen, "pid %d exited while we read its start time", pid);
        return BYVAL_E_GONE;
    }
    return byval_broker_rescue(&rec, (uint32_t)fd, fd_p, msg, msglen);
}
