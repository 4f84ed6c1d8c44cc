/* SPDX-License-Identifier: MIT */
/* resolve.h - the resolution pipeline (resolve.c) on the pidfd route, and
 * the proof of export it asks for; transport.h has its other entries. */
#ifndef BYVAL_HANDLES_RESOLVE_H
#define BYVAL_HANDLES_RESOLVE_H

#include "handles/self.h"

/* The pid here of rec->pid of pid namespace rec->pidns (a descendant of
 * ours: NSpid in /proc/<pid>/status), or FOREIGN_NS. Proves nothing: the
 * pipeline then identifies the process behind a pidfd of it. */
byval_status_t byval_ns_translate(const byval_record_t *rec, uint32_t *local_pid_p, char *msg,
                                  size_t msglen);

/* rec's object as a new fd of ours (*fd_p, O_CLOEXEC) through the pidfd
 * route alone; *pidfd_p (may be NULL) the exporter's pidfd, the caller's
 * to keep and watch. On failure one line in msg (may be NULL) naming the
 * syscall, pid, fd and errno text. Never blocks on a file system. */
byval_status_t byval_resolve_fd(const byval_record_t *rec, const byval_self_t *self, int *fd_p,
                                int *pidfd_p, char *msg, size_t msglen);

/* One more fd of an identified exporter (pid: its pid here) that no
 * record describes (a registry, its pipe): of kind obj, inode low bits
 * fd_ino and, when size != 0, that size in pages. */
byval_status_t byval_getfd_obj(int pidfd, uint32_t pid, uint32_t fd, uint32_t fd_ino, uint64_t size,
                               byval_obj_t obj, int *fd_p, char *msg, size_t msglen);

/* The proof of export (step 3): pidfd_getfd duplicates any fd of a
 * process we may ptrace, so nothing is duplicated before its exporter is
 * shown to have exported it. prove() fills *proof with the word that
 * stays serial while the export of fd (inode ino, under byval_record_key)
 * lives, checked again after the duplicate; done() drops what it holds.
 * The library installs the registry's (registry_view.c); without one,
 * /proc shows the fd's kind first. */
typedef struct byval_proof {
    const uint64_t *word; /* NULL: nothing held */
    uint64_t serial;
    void *hold;
} byval_proof_t;

typedef struct byval_prover {
    byval_status_t (*prove)(const byval_record_t *rec, int pidfd, uint32_t pid, uint32_t fd,
                            uint32_t ino, byval_proof_t *proof, char *msg, size_t msglen);
    void (*done)(byval_proof_t *proof);
} byval_prover_t;

void byval_resolve_set_prover(const byval_prover_t *p);

/* The registry key under which rec's exporter published fd: the record's
 * own fd under its kind and allocation id, a chunk its manifest lists
 * under the chunk kind and that id. */
uint64_t byval_record_key(const byval_record_t *rec, uint32_t fd);

#endif
