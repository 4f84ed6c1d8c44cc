/* SPDX-License-Identifier: MIT */
/*
 * self.h - what every part of handles/ and its callers share without the
 * resolution pipeline: who a process is (ourselves, the exporter behind a
 * pidfd), the status of a resolution, the kinds of object a record leads
 * to, and the one-line messages every step writes (self.c).
 */
#ifndef BYVAL_HANDLES_SELF_H
#define BYVAL_HANDLES_SELF_H

#include <stdarg.h>
#include <stdio.h>
#include <sys/types.h>
#include <unistd.h>

#include "handles/wire.h"

#define BYVAL_PIDFS_MAGIC 0x50494446u

/* The calling process as an exporter describes itself in every record. */
typedef struct byval_self {
    uint32_t pid;
    uint32_t pidns; /* inode of /proc/self/ns/pid */
    uint32_t boot;  /* byval_fnv1a32 of the boot_id text (36 chars) */
    uint64_t identity;
    uint8_t id_flags; /* BYVAL_FLAG_ID_PIDFS or 0 */
} byval_self_t;

typedef enum byval_status {
    BYVAL_OK = 0,
    BYVAL_E_INVALID,      /* malformed record or argument */
    BYVAL_E_FOREIGN_HOST, /* boot id differs: handle from another node/boot */
    BYVAL_E_FOREIGN_NS,   /* exporter lives in another pid namespace */
    BYVAL_E_GONE,         /* exporter exited (ESRCH) */
    BYVAL_E_IDENTITY,     /* pid belongs to another process (reused, or forged) */
    BYVAL_E_BADFD,        /* fd not open in the exporter (EBADF) */
    BYVAL_E_PERM,         /* pidfd_getfd denied (EPERM): ptrace rules */
    BYVAL_E_NOSYS,        /* kernel has no pidfd_open/pidfd_getfd */
    BYVAL_E_NOFD,         /* out of fds in the importer (EMFILE/ENFILE) */
    BYVAL_E_FDKIND,       /* fd is not the object the record describes */
    BYVAL_E_SYS,          /* other syscall failure, see errno text */
} byval_status_t;

/* What an fd a record leads to must be. */
typedef enum byval_obj {
    BYVAL_OBJ_MEMORY = 1, /* GPU memory: a dma-buf, an NVIDIA device file, a memfd */
    BYVAL_OBJ_MANIFEST,   /* ipcbyval's CUDA VMM manifest: a sealed memfd */
    BYVAL_OBJ_REGISTRY,   /* an exporter's registry (registry.h): a memfd */
    BYVAL_OBJ_WAKE_PIPE,  /* its wake-up pipe, named by that registry: a pipe */
} byval_obj_t;

const char *byval_status_str(byval_status_t st);

/* Fill *self for the calling process, computed once; byval_self_reset()
 * forgets it (a fork child's handler). */
int byval_self_get(byval_self_t *self_p);
void byval_self_reset(void);

/* rec's exporter fields (pid, pidns, boot, identity, flags) from self. */
void byval_record_set_exporter(byval_record_t *rec, const byval_self_t *self);

/* inode of fd, 0 on error; the size of the object behind it (memfd:
 * st_size, dma-buf: its SEEK_END), or -1 (fdcheck.c). */
uint64_t byval_fd_inode(int fd);
int64_t byval_fd_size(int fd);

/* Up to len - 1 bytes of path into buf, NUL-terminated: how many, or
 * -errno. */
int byval_read_file(const char *path, char *buf, size_t len);

/* Start time of pid (field 22 of /proc/<pid>/stat) into *start_p: 0, or
 * an errno value (EIO: unparsable). */
int byval_proc_start_time(pid_t pid, uint64_t *start_p);

/* The pid of pidfd's process in our namespace: > 0; 0 outside our
 * namespace tree; -1 once it exited; -2 not a pidfd. */
int byval_pidfd_pid(int pidfd);
int byval_pidfd_is_pidfs(int pidfd);
int byval_pidfd_exited(int pidfd);

/* A record of the process behind pidfd (pid: its pid in our namespace):
 * its pidfs inode, else its start time read while the pidfd shows it
 * alive. 0, or -1: it exited. */
int byval_pidfd_record(int pidfd, uint32_t pid, const byval_self_t *self, byval_record_t *rec);

/* Is the process behind pidfd the one rec names (rec->pid: its pid here)?
 * BYVAL_OK, or IDENTITY/GONE/PERM/NOFD/SYS with one line in msg. */
byval_status_t byval_check_identity(const byval_record_t *rec, int pidfd, char *msg, size_t msglen);

/* pidfd_open(pid) and byval_identify on it. */
byval_status_t byval_open_exporter(const byval_record_t *rec, uint32_t pid, int *pidfd_p, char *msg,
                                   size_t msglen);

/* Status and explanation (*note_p) of a failed pidfd_getfd. */
byval_status_t byval_getfd_status(int err, int pidfd, const char **note_p);

/* Close *fd_p if open, and mark it closed (-1). */
static inline void byval_close_fd(int *fd_p)
{
    if (*fd_p >= 0)
        close(*fd_p);
    *fd_p = -1;
}

/* snprintf into msg when the caller asked for a message (msg may be NULL)
 * and return rc (a status, or an int): the one line a failing step
 * writes. _msg writes it only, _fail_null returns NULL. */
__attribute__((format(printf, 4, 5))) static inline int byval_fail(int rc, char *msg, size_t msglen,
                                                                   const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (msg && msglen)
        vsnprintf(msg, msglen, fmt, ap);
    va_end(ap);
    return rc;
}
#define byval_msg(msg, msglen, ...) ((void)byval_fail(0, msg, msglen, __VA_ARGS__))
#define byval_fail_null(msg, msglen, ...) (byval_fail(0, msg, msglen, __VA_ARGS__), NULL)

#endif
