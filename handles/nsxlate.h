/* SPDX-License-Identifier: MIT */
/*
 * nsxlate.h - find an exporter that lives in a descendant pid namespace
 * (a containerised rank seen from the host) by its pid in its own
 * namespace: the NSpid line of /proc/<pid>/status lists a process's pid
 * in every namespace from ours down to its own.
 */
#ifndef BYVAL_HANDLES_NSXLATE_H
#define BYVAL_HANDLES_NSXLATE_H

#include <stddef.h>
#include <stdint.h>

#include "handles/resolve.h"

/* The pid, in our namespace, of the process that is rec->pid in the pid
 * namespace rec->pidns. BYVAL_OK with *local_pid_p set, or
 * BYVAL_E_FOREIGN_NS when no visible process matches (a sibling or
 * unrelated namespace). The caller still verifies the identity on the
 * pidfd: a pid number alone proves nothing. */
byval_status_t byval_ns_translate(const byval_record_t *rec, uint32_t *local_pid_p, char *msg,
                                  size_t msglen);

#endif
