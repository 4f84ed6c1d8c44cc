/* SPDX-License-Identifier: MIT */
/* stale_peer.h - a same-uid bystander against an exporter's broker: it
 * finds the broker's abstract name in /proc/net/unix and speaks its wire
 * (handles/broker_internal.h) as any peer can. */
#ifndef BYVAL_TEST_STALE_PEER_H
#define BYVAL_TEST_STALE_PEER_H

#include <stdint.h>
#include <sys/types.h>

#define STALE_MAGIC 0x31427662u        /* by handle: fd and its inode */
#define STALE_MAGIC_RESCUE 0x52427662u /* by number: the pidfd_getfd rescue */

extern int stale_failures;

/* Print "PASS: what" or "FAIL: what: why"; count failures. */
void stale_check(int ok, const char *what, const char *why);

/* Ask pid's broker for fd (magic, ino): the answer's status, *got_p the fd
 * it sent (-1: none). */
int stale_ask(pid_t pid, uint32_t magic, uint32_t fd, uint32_t ino, int *got_p);

/* The inode of /proc/PID/fd/FD now (0: none). */
uint32_t stale_proc_ino(pid_t pid, uint32_t fd);

/* The verdicts once the export of fd (old_ino) ended: with the inode of
 * what sits at fd now (placed: the exporter put its socket there), with
 * the old inode, and through the rescue: each refused, nothing sent. */
void stale_after_end(pid_t pid, uint32_t fd, uint32_t old_ino, int placed, const char *path);

#endif
