/* SPDX-License-Identifier: MIT */
/*
 * broker.h - the socket fallback: where pidfd_getfd is not allowed (Yama
 * ptrace_scope 1 between siblings, container seccomp profiles without
 * CAP_SYS_PTRACE, gVisor) the importer asks the exporter for the fd over
 * an abstract Unix socket named after the exporter's identity (so the
 * handle needs no extra bytes) and receives it with SCM_RIGHTS.
 *
 * The exporter serves only fds it offered, only to peers of one uid
 * (SO_PEERCRED; its own effective uid unless set), from one thread started
 * at the first offer: never at load time, never on the application's
 * threads. The importer serves itself: before it sends anything it checks
 * that the listener is the exporter (SO_PEERPIDFD against the record's
 * pidfs identity), because any process in the network namespace can bind
 * an abstract name.
 */
#ifndef BYVAL_HANDLES_BROKER_H
#define BYVAL_HANDLES_BROKER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "handles/resolve.h"

/* Exporter: serve the object fd refers to now (an exported object), and
 * only that object, under fd's number from now on: a request must name its
 * inode, and the number must still refer to it (handles/fdproof.h). 0, or
 * -1 with errno when the server cannot start (EADDRINUSE: another process
 * holds our name), 65536 fds are offered already (ENOSPC) or the file can
 * be proven neither by epoll nor by its inode (ENOTSUP); then only
 * pidfd_getfd can reach the fd. Offering a number again is a no-op (a new
 * offer when the number now refers to another object). Owner: the export
 * core (cache/exports.h) for exports, the registry for its memfd and
 * pipe. */
int byval_broker_offer(int fd);

/* The same, served to the directory's group without a tag (handles/tag.h):
 * for objects that hold no secret (the registry's page and pipe) or whose
 * handle has no room for a tag (the short event-pool record). */
int byval_broker_offer_open(int fd);

/* Exporter: make sure the server runs (for the fds the registry lists,
 * registry.h), offering nothing. 0, or -1 with errno as above. */
int byval_broker_serve(void);

/* Exporter: stop serving fd. Called with the export's end, before the fd
 * can be closed (cache/exports.h); a request already past the check gets
 * the object offered (a duplicate proven under the lock), never whatever
 * reuses the number. */
void byval_broker_withdraw(int fd);

/* Exporter: the one uid served (default: our effective uid at each
 * connection). Others are refused and counted. */
void byval_broker_set_allowed_uid(uid_t uid);

/* Importer: fetch the exporter's fd (checked against fd_ino, low 32 bits)
 * over its socket, showing rec->tag when fd is rec->fd (else no tag).
 * Bounded by a 2 s deadline; never hangs the caller. */
byval_status_t byval_broker_fetch(const byval_record_t *rec, uint32_t fd, uint32_t fd_ino,
                                  int *fd_p, char *msg, size_t msglen);

/* The same; *pidfd_p (may be NULL) receives the exporter's pidfd when the
 * kernel gave one (SO_PEERPIDFD) and it proved the identity, else -1: the
 * caller can watch it for the exporter's exit as on the pidfd path. */
byval_status_t byval_broker_fetch_pidfd(const byval_record_t *rec, uint32_t fd, uint32_t fd_ino,
                                        int *fd_p, int *pidfd_p, char *msg, size_t msglen);

/* Where an importer asks an exporter's broker: the fetch step's two
 * socket routes (resolve_socket.c). */
typedef enum byval_broker_at {
    BYVAL_BROKER_ABSTRACT = 0, /* its abstract name, in our network namespace */
    BYVAL_BROKER_DIR = 1,      /* its socket in the rendezvous directory (rendezvous.h):
                                * the listener's pidfs proof is mandatory there */
} byval_broker_at_t;

/* byval_broker_fetch_pidfd at `at`, showing tag (0: none; a peer of
 * another uid than the exporter's needs the tag of fd's object). */
byval_status_t byval_broker_fetch_at(const byval_record_t *rec, byval_broker_at_t at, uint32_t fd,
                                     uint32_t fd_ino, uint64_t tag, int *fd_p, int *pidfd_p,
                                     char *msg, size_t msglen);

/* Importer: pidfd_getfd(fd) of the process rec names (its pid, pidns,
 * boot and identity; nothing else of rec is used) was refused by the
 * kernel: ask that process's broker for the fd it registered as exported
 * under that number (registry.h). The listener is proven to be that
 * process as for any fetch; *fd_p is O_CLOEXEC, as pidfd_getfd's. */
byval_status_t byval_broker_rescue(const byval_record_t *rec, uint32_t fd, int *fd_p, char *msg,
                                   size_t msglen);

/* Fds served and peers refused (wrong uid), for tests and stats. */
void byval_broker_counts(uint64_t *served_p, uint64_t *refused_p);

/* Requests of the group refused for a missing or wrong tag. */
uint64_t byval_broker_untagged(void);

#endif
