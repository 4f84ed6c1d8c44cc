/* SPDX-License-Identifier: MIT */
/*
 * doctor.h - `ipcbyval-run --doctor`: what ipcbyval will do on this
 * machine or inside this container, and why. The library is loaded into
 * ipcbyval-run's helper, /bin/true, with IPCBYVAL_DOCTOR=1 (as for
 * --print-config; only that helper obeys it, init.c), so the probes
 * run in the environment the ranks will have: its kernel, Yama, seccomp
 * filter, capabilities, namespaces and library path.
 */
#ifndef BYVAL_CACHE_DOCTOR_H
#define BYVAL_CACHE_DOCTOR_H

/* What two sibling processes (as two ranks are) could do: the probes of
 * doctor_probe.c. Errors are errno values, 0 when it worked. */
typedef struct byval_probe {
    int pidfd_open_err;    /* pidfd_open of a child of ours */
    int pidfs;             /* that pidfd is a pidfs inode (Linux 6.9+) */
    int child_getfd_err;   /* pidfd_getfd of our own child's fd */
    int sibling_getfd_err; /* pidfd_getfd of a sibling's fd, as rank to rank */
    int socket_err;        /* the sibling's fd over an abstract Unix socket */
    int peerpidfd;         /* SO_PEERPIDFD answered (the broker's proof) */
} byval_probe_t;

/* Fork an exporter and an importer (siblings) and try each way of
 * passing an fd between them; set_ptracer: the exporter calls
 * PR_SET_PTRACER as IPCBYVAL_SET_PTRACER=1 makes ipcbyval's do. */
void byval_probe_run(byval_probe_t *p, int set_ptracer);

/* Print the report to stdout; the exit status: 0 when by-value works. */
int byval_doctor(void);

#endif
