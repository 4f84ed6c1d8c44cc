/* SPDX-License-Identifier: MIT */
/*
 * broker.h - the socket fallback: where pidfd_getfd is not allowed (Yama,
 * seccomp, gVisor) the importer asks the exporter's broker for the fd, at
 * its abstract name or its socket in the rendezvous directory, and
 * receives it with SCM_RIGHTS (broker_serve.c, broker_fetch.c).
 */
#ifndef BYVAL_HANDLES_BROKER_H
#define BYVAL_HANDLES_BROKER_H

#include "handles/self.h"

/* Exporter: serve the object fd refers to now, and only that object,
 * under fd's number (handles/fdproof.h). 0, or -1 with errno: EADDRINUSE
 * (another process holds our name), ENOSPC (65536 offered), ENOTSUP (the
 * file cannot be proven). Offering again is a no-op. _open: served to the
 * directory's group without a tag (the registry's page and pipe, the
 * short event-pool record's fd). */
int byval_broker_offer(int fd);
int byval_broker_offer_open(int fd);

/* Exporter: make sure the server runs, offering nothing. */
int byval_broker_serve(void);

/* Exporter: stop serving fd (before it can be closed). */
void byval_broker_withdraw(int fd);

/* Exporter: the one uid served (default: our effective uid). */
void byval_broker_set_allowed_uid(uid_t uid);

/* Importer: fd (checked against fd_ino), showing tag, from every socket
 * route in turn (the directory's when nobody, or an impostor, answers at
 * the abstract name), each bounded by a 2 s deadline. *pidfd_p (may be
 * NULL): the exporter's pidfd when SO_PEERPIDFD proved the identity, else
 * -1; *via_p (may be NULL): the route that answered (byval_via_t). */
byval_status_t byval_broker_fetch_routes(const byval_record_t *rec, uint32_t fd, uint32_t fd_ino,
                                         uint64_t tag, int *fd_p, int *pidfd_p, int *via_p,
                                         char *msg, size_t msglen);

/* Importer: the registry page of rec's exporter (its kind checked). */
byval_status_t byval_broker_registry(const byval_record_t *rec, int *mfd_p, char *msg,
                                     size_t msglen);

/* Importer: the pidfd of the listener on rec's socket in the rendezvous
 * directory when it proves rec's identity (nothing asked), else -1. */
int byval_broker_dir_pidfd(const byval_record_t *rec, int64_t deadline);

/* Fds served and peers refused (wrong uid); group requests refused for a
 * missing or wrong tag. */
void byval_broker_counts(uint64_t *served_p, uint64_t *refused_p);
uint64_t byval_broker_untagged(void);

#endif
