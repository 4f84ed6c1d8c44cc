/* SPDX-License-Identifier: MIT */
/*
 * ptracer.c - IPCBYVAL_SET_PTRACER=1: under Yama ptrace_scope 1 a process
 * may only pidfd_getfd its descendants, so MPI peers (siblings) are
 * refused. prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY) in the exporter lifts
 * that for this process: any process of the same uid may then ptrace it -
 * read its memory, not only the exported fds. Intel's driver does the same
 * at every context creation; ipcbyval leaves it off unless asked.
 */
#include <sys/prctl.h>
#include <unistd.h>

#include "cache/config.h"
#include "cache/log.h"

#ifndef PR_SET_PTRACER
#define PR_SET_PTRACER 0x59616d61
#endif
#ifndef PR_SET_PTRACER_ANY
#define PR_SET_PTRACER_ANY ((unsigned long)-1)
#endif

void byval_ptracer_allow(void)
{
    static pid_t done_pid; /* per process: a forked child must set its own */
    if (!byval_cfg.set_ptracer)
        return;
    pid_t pid = getpid();
    if (__atomic_load_n(&done_pid, __ATOMIC_RELAXED) == pid)
        return;
    __atomic_store_n(&done_pid, pid, __ATOMIC_RELAXED);
    /* EINVAL means no Yama: nothing to lift. */
    if (prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0) == 0)
        BYVAL_LOG_INFO("IPCBYVAL_SET_PTRACER: any process may now ptrace pid %d", (int)pid);
}
