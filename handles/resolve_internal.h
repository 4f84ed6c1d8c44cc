/* SPDX-License-Identifier: MIT */
/* resolve_internal.h - helpers shared by the resolution's files (resolve.c,
 * resolve_socket.c, identity.c, pidfd.c, fdcheck.c, peers.c, self.c) and
 * their unit tests;
 * not part of the interface the shim uses. */
#ifndef BYVAL_HANDLES_RESOLVE_INTERNAL_H
#define BYVAL_HANDLES_RESOLVE_INTERNAL_H

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <sys/types.h>

#include "handles/resolve.h"
#include "handles/transport.h"

#include "handles/sys.h"
#define BYVAL_PIDFS_MAGIC 0x50494446u

/* Start time of pid (field 22 of /proc/<pid>/stat, clock ticks after
 * boot) into *start_p. 0, or an errno value: that of open/read, EIO when
 * the line cannot be parsed. */
int byval_proc_start_time(pid_t pid, uint64_t *start_p);

/* The pid the kernel shows for pidfd in our pid namespace (the "Pid:" of
 * its fdinfo): > 0; 0 when the process is outside our namespace tree; -1
 * once it exited; -2 when pidfd is not a pidfd we can read. */
int byval_pidfd_pid(int pidfd);

/* 1 if fd lives on pidfs (a pidfd's inode then identifies the process). */
int byval_pidfd_is_pidfs(int pidfd);

/* Is the process behind pidfd the one rec describes? BYVAL_OK, or
 * IDENTITY/GONE/PERM/NOFD/SYS with one line in msg. pid: its pid in our
 * namespace (byval_check_identity: rec->pid, a record of our namespace). */
byval_status_t byval_identify(const byval_record_t *rec, uint32_t pid, int pidfd, char *msg,
                              size_t msglen);
byval_status_t byval_check_identity(const byval_record_t *rec, int pidfd, char *msg, size_t msglen);

/* pidfd_open(pid) (pid: the exporter's in our namespace) and
 * byval_identify on it: *pidfd_p, or a status with one line. */
byval_status_t byval_open_exporter(const byval_record_t *rec, uint32_t pid, int *pidfd_p, char *msg,
                                   size_t msglen);

/* Status and explanation (*note_p) of a failed pidfd_getfd. */
byval_status_t byval_getfd_status(int err, int pidfd, const char **note_p);

/* The wording the steps share (identity.c). */
extern const char byval_perm_hint[], byval_gone_note[], byval_nofd_note[];

/* What the resolution learnt per exporter (peers.c): how auto reached it
 * (NONE, XLATED or SOCKET) and its pid here when translated. */
typedef struct byval_peer {
    byval_via_t via;
    uint32_t local_pid;
} byval_peer_t;
byval_peer_t byval_peer_get(const byval_record_t *rec);
void byval_peer_put(const byval_record_t *rec, byval_via_t via, uint32_t local_pid);

/* What the check before pidfd_getfd saw, for the check after it. */
typedef struct byval_fd_seen {
    uint64_t dev, ino;
    int kind; /* fdcheck.c's FDK_*; 0: nothing seen */
} byval_fd_seen_t;

/* Before pidfd_getfd(pidfd, fd): through /proc/pid/fd/fd, opening nothing
 * and asking no file system, is it a proven object of kind obj with the
 * record's inode (low 32 bits fd_ino) and, when size != 0, size in pages?
 * BYVAL_OK with *seen filled; FDKIND (not to be duplicated), BADFD, GONE,
 * PERM (cannot be checked: /proc not ours or not readable), NOFD or SYS,
 * with one line in msg. */
byval_status_t byval_fd_precheck(int pidfd, uint32_t pid, uint32_t fd, uint32_t fd_ino,
                                 uint64_t size, byval_obj_t obj, byval_fd_seen_t *seen, char *msg,
                                 size_t msglen);

/* After: is dup (a duplicate of fd in pid) the object seen before (seen
 * NULL: nothing was checked before, as for an fd from the socket: classify
 * it now), of kind obj, with the record's inode and size? BYVAL_OK, FDKIND
 * or SYS with one line in msg. Never blocks, never moves a file offset. */
byval_status_t byval_check_fd_kind(int dup, uint32_t pid, uint32_t fd, uint32_t fd_ino,
                                   uint64_t size, byval_obj_t obj, const byval_fd_seen_t *seen,
                                   char *msg, size_t msglen);

/* Close an fd nothing vouches for (one a peer sent over the socket): at
 * once when its kind's close cannot wait on a file system, else on a
 * thread of its own (a FUSE daemon may never answer its FLUSH). 0, or -1
 * when it had to stay open (too many such closes are stuck). */
int byval_fd_release(int fd);

/* What the pipeline fetches (resolve.c): fd (inode low bits ino, size
 * bytes when != 0, 0: not checked) of the exporter rec names (NULL: a
 * pidfd's process, no record), to be of kind obj; tag: what the socket
 * routes show for it (rec->tag for rec's own fd, else 0). */
typedef struct byval_want {
    const byval_record_t *rec;
    uint32_t fd, ino;
    uint64_t size;
    byval_obj_t obj;
    uint64_t tag;
} byval_want_t;

/* The exporter as this process reaches it. */
typedef struct byval_exporter {
    uint32_t pid; /* in our pid namespace; 0: not known yet */
    int pidfd;    /* identified (step 2), or -1 */
    int owned;    /* pidfd opened by this resolution (else the caller's) */
} byval_exporter_t;

/* Step 5, prove the object: the duplicate dup is what w asks for, and the
 * export proof (proof->word NULL: none) still holds (resolve.c). */
byval_status_t byval_prove_object(const byval_want_t *w, const byval_exporter_t *x,
                                  const byval_proof_t *proof, const byval_fd_seen_t *seen, int dup,
                                  char *msg, size_t msglen);

/* Step 4 on the socket routes, then step 5 (resolve_socket.c): the
 * exporter's broker at its abstract name, then at its socket in the
 * rendezvous directory. *fd_p the proven duplicate; info->via names the
 * route that served; x keeps the listener's pidfd when it proved the
 * identity (owned). */
byval_status_t byval_fetch_socket(const byval_want_t *w, byval_exporter_t *x, int *fd_p,
                                  byval_fetch_info_t *info, char *msg, size_t msglen);

/* snprintf into msg when the caller asked for a message (msg may be NULL). */
__attribute__((format(printf, 3, 4))) static inline void byval_msg(char *msg, size_t msglen,
                                                                   const char *fmt, ...)
{
    if (!msg || !msglen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, msglen, fmt, ap);
    va_end(ap);
}

/* msg becomes "FIRST; then the rendezvous directory: MSG" (both routes'
 * reasons, when the second failed too). */
static inline void byval_msg_prefix(char *msg, size_t msglen, const char *first)
{
    char both[1024];
    if (!msg || !msglen)
        return;
    snprintf(both, sizeof(both), "%s; then the rendezvous directory: %s", first, msg);
    byval_msg(msg, msglen, "%s", both);
}

#endif
