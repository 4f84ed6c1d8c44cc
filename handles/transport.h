/* SPDX-License-Identifier: MIT */
/* transport.h - how an importer gets the exporter's fd, by policy:
 * pidfd_getfd, the socket fallback (broker.h), or auto (pidfd first, the
 * socket where the kernel refuses or the exporter is out of reach,
 * remembered per exporter). The entries of resolve.c's pipeline; the shim
 * passes the mode. */
#ifndef BYVAL_HANDLES_TRANSPORT_H
#define BYVAL_HANDLES_TRANSPORT_H

#include "handles/self.h"

/* Modes: the values of IPCBYVAL_TRANSPORT (shim/config.h's enum). */
#define BYVAL_MODE_AUTO 0
#define BYVAL_MODE_PIDFD 1
#define BYVAL_MODE_SOCKET 2

typedef enum byval_via {
    BYVAL_VIA_NONE = 0,
    BYVAL_VIA_PIDFD = 1,      /* pidfd_getfd, the record's own pid */
    BYVAL_VIA_XLATED = 2,     /* pidfd_getfd, the pid translated into our namespace */
    BYVAL_VIA_SOCKET = 3,     /* the exporter's socket */
    BYVAL_VIA_RENDEZVOUS = 4, /* its socket in the rendezvous directory (rendezvous.h) */
} byval_via_t;

/* What a fetch did, for the caller's log. */
typedef struct byval_fetch_info {
    byval_via_t via;
    uint32_t local_pid; /* the exporter's pid in our namespace; 0 if not visible */
    int fell_back;      /* auto switched this exporter to the socket just now */
    char why[512];      /* fell_back: why pidfd_getfd could not serve it */
} byval_fetch_info_t;

/* A new fd (O_CLOEXEC, the caller's) for the record's object, never from
 * another host or boot. *pidfd_p: the exporter's pidfd to watch, or -1.
 * info may be NULL. On failure one line in msg, naming both transports
 * when auto tried both (the socket's status when the exporter answered). */
byval_status_t byval_transport_fetch_fd(const byval_record_t *rec, const byval_self_t *self,
                                        int mode, int *fd_p, int *pidfd_p, byval_fetch_info_t *info,
                                        char *msg, size_t msglen);

/* The same, lent the exporter's pidfd kept from an earlier open (kept >=
 * 0: identified then, so no pidfd_open and no identity check now; -1:
 * none). *pidfd_p: kept again when it was lent, else as above. */
byval_status_t byval_transport_fetch(const byval_record_t *rec, const byval_self_t *self, int mode,
                                     int kept, int *fd_p, int *pidfd_p, byval_fetch_info_t *info,
                                     char *msg, size_t msglen);

/* One more fd of the same exporter (manifest chunks) after a fetch that
 * gave pidfd, through whichever transport reached it. size 0: unchecked.
 * _obj: an fd that must be of kind obj (a registry, its pipe). */
byval_status_t byval_transport_fetch_more_fd(const byval_record_t *rec, int mode, int pidfd,
                                             uint32_t fd, uint32_t fd_ino, uint64_t size, int *fd_p,
                                             char *msg, size_t msglen);

byval_status_t byval_transport_fetch_obj(const byval_record_t *rec, int mode, int pidfd,
                                         uint32_t fd, uint32_t fd_ino, uint64_t size,
                                         byval_obj_t obj, int *fd_p, char *msg, size_t msglen);

/* Remember that rec's exporter is reached through its socket only (its
 * pid names nothing here). */
void byval_transport_remember_socket(const byval_record_t *rec);

#endif
