/* SPDX-License-Identifier: MIT */
/*
 * resolve.h - who am I (exporter side) and how to get an exporter's fd
 * (importer side) with pidfd_open + pidfd_getfd. No GPU API here.
 */
#ifndef BYVAL_HANDLES_RESOLVE_H
#define BYVAL_HANDLES_RESOLVE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "handles/self.h"

/* The pid here of rec->pid of pid namespace rec->pidns (a descendant of
 * ours: NSpid in /proc/<pid>/status), or FOREIGN_NS. Proves nothing: the
 * pipeline then identifies the process behind a pidfd of it. */
byval_status_t byval_ns_translate(const byval_record_t *rec, uint32_t *local_pid_p, char *msg,
                                  size_t msglen);

/*
 * Resolve rec into a local duplicate of the exporter's fd with
 * pidfd_open + pidfd_getfd: resolve.c's pipeline (translate, identify,
 * prove the export, duplicate, prove the object) on the pidfd route
 * alone; transport.h's byval_transport_fetch_fd is the same with the
 * socket route too. Nothing on the way blocks on a file system or moves
 * a file offset.
 * On success *fd_p is a new fd owned by the caller (O_CLOEXEC).
 * On failure writes one exact, human-readable line (no trailing newline)
 * into msg (may be NULL) that names the syscall, pid, fd and errno text,
 * with a hint for EPERM.
 * pidfd_p: if non-NULL, receives the pidfd (caller owns it; -1 on error)
 * so callers can keep it to watch for exporter exit; else it is closed.
 */
byval_status_t byval_resolve_fd(const byval_record_t *rec, const byval_self_t *self, int *fd_p,
                                int *pidfd_p, char *msg, size_t msglen);

/*
 * Duplicate one more fd of an exporter already identified (pidfd from
 * byval_resolve_fd; pid: its pid in our namespace) that no record
 * describes (an exporter's registry or its pipe): its kind through /proc
 * before pidfd_getfd, then the duplicate must be that same object, of
 * kind obj (inode low 32 bits == fd_ino and, when size != 0, the size in
 * pages).
 */
byval_status_t byval_getfd_obj(int pidfd, uint32_t pid, uint32_t fd, uint32_t fd_ino, uint64_t size,
                               byval_obj_t obj, int *fd_p, char *msg, size_t msglen);

/*
 * The proof of export (the pipeline's step 3): pidfd_getfd can duplicate
 * any fd of a process we may ptrace, whether it exported it or not, so
 * nothing is duplicated before its exporter is shown to have exported it.
 * prove() finds fd (inode low 32 bits ino) listed, under the key rec
 * names it by (byval_record_key), in the registry of the exporter behind pidfd (pid: its pid here, for
 * messages) and fills *proof with the word that stays serial while that
 * export lives; the pipeline checks it again after the
 * duplicate (the exporter withdraws before it closes). done() drops what
 * prove() holds. The library installs the registry's (proof.c); without
 * one (the unit tests of this layer) /proc shows the fd's kind first.
 */
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
