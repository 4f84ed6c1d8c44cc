/* SPDX-License-Identifier: MIT */
/*
 * broker.h - the socket fallback: where pidfd_getfd is not allowed (Yama
 * ptrace_scope 1 between siblings, container seccomp profiles without
 * CAP_SYS_PTRACE, gVisor) the importer asks the exporter for the fd over
 * an abstract Unix socket named after the exporter's identity (so the
 * handle needs no extra bytes) and receives it with SCM_RIGHTS.
 *
 * The exporter serves only fds it offered, only to peers of its own uid
 * (or root), from one thread started at the first offer: never at load
 * time, never on the application's threads.
 */
#ifndef BYVAL_HANDLES_BROKER_H
#define BYVAL_HANDLES_BROKER_H

#include <stddef.h>
#include <stdint.h>

#include "handles/resolve.h"

/* Exporter: serve fd (an exported object) from now on. 0, or -1 when the
 * server cannot start (then only pidfd_getfd can reach the fd). */
int byval_broker_offer(int fd);

/* Exporter: stop serving fd (before it is closed). */
void byval_broker_withdraw(int fd);

/* Importer: fetch the exporter's fd (checked against fd_ino, low 32 bits)
 * over its socket. Bounded by a 2 s timeout; never hangs the caller. */
byval_status_t byval_broker_fetch(const byval_record_t *rec, uint32_t fd, uint32_t fd_ino,
                                  int *fd_p, char *msg, size_t msglen);

/* Peers refused (wrong uid) and fds served, for tests and stats. */
void byval_broker_counts(uint64_t *served_p, uint64_t *refused_p);

#endif
