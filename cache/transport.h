/* SPDX-License-Identifier: MIT */
/*
 * transport.h - how an importer gets the exporter's fd, by policy
 * (IPCBYVAL_TRANSPORT): pidfd_getfd, the socket fallback, or auto (pidfd
 * first; on EPERM/ENOSYS/foreign pid namespace the socket, remembered per
 * exporter so later opens go straight to what worked).
 */
#ifndef BYVAL_CACHE_TRANSPORT_H
#define BYVAL_CACHE_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "cache/exports.h"
#include "handles/resolve.h"

/* Like byval_resolve_fd, through the configured transport
 * (handles/transport.h; byval_import_fetch sets the prover first). An
 * exporter met before lends its kept pidfd
 * (cache/exporters.h): one pidfd_getfd and the fd check, no pidfd_open and
 * no identity check. *pidfd_p is the exporter's pidfd (from the socket too
 * where the kernel gives one, SO_PEERPIDFD), or -1; whatever it is, the
 * caller hands it to byval_fetch_done once done with it, success or not. */
byval_status_t byval_fetch_fd(const byval_record_t *rec, const byval_self_t *self, int *fd_p,
                              int *pidfd_p, char *msg, size_t msglen);

/* What served this thread's last byval_fetch_fd (enum byval_route,
 * shim/log.h): pidfd_getfd or the socket. */
int byval_fetch_route(void);

/* Return or keep the pidfd byval_fetch_fd gave for rec's exporter. */
void byval_fetch_done(const byval_record_t *rec, int pidfd);

/* Exporter side: a table of exports (cache/exports.h) whose registry
 * entries, broker offers and rescue registrations go through this
 * transport (the pidfd-only transport offers and registers nothing),
 * IPCBYVAL_EXPORT_CACHE_SIZE exports at most, in the statistics under
 * ops->name. NULL when it cannot be allocated (logged). */
byval_exports_t *byval_export_table(const byval_backend_export_t *ops);

/* Exporter side: the tag a handle carries for exported fd (inode low 32
 * bits ino), handles/tag.h; 0 when no key could be made (logged once:
 * peers of another uid are then refused). */
uint64_t byval_export_tag(uint32_t fd, uint32_t ino);

/* Exporter side: fd is the application's own export (an opaque-layout
 * handle, cuMemExportToShareableHandle, an fd from an IPC handle): a peer
 * whose own pidfd_getfd the kernel refuses may get it from our broker
 * while it stays the same open file (the pidfd_getfd rescue,
 * handles/registry_fds.c). Starts the broker. Its close is the
 * application's: the proof drops the registration then. 0, or -1. */
int byval_export_register_fd(int fd);

#endif
