/* SPDX-License-Identifier: MIT */
/*
 * rendezvous.h - the socket fallback through a directory both sides can
 * reach (IPCBYVAL_RENDEZVOUS_DIR): for exporter and importer in separate
 * pid, network and mount namespaces (two Kubernetes pods, one container
 * per MPI rank) that share only a volume. The abstract socket lives in
 * the exporter's network namespace and pidfd_open cannot name a process
 * outside the importer's pid namespace tree; a pathname socket lives in
 * the file system and crosses both.
 *
 * The exporter's broker (broker_serve.c) also listens on
 * DIR/ipcbyval-<boot>-<pidfs inode>.sock: the name comes from the
 * identity a handle carries, unique across namespaces for the boot, never
 * from a pid another namespace may reuse. The importer's fetch
 * (broker_fetch.c) connects there when the abstract name does not answer,
 * and accepts the listener only when SO_PEERPIDFD's pidfs inode is the
 * handle's identity: exactly the proof the abstract socket gets, made
 * mandatory (a kernel without pidfs, before 6.9, has no identity that
 * holds across pid namespaces, so the directory is not used there).
 *
 * The directory is opened once without following a symlink and used
 * through that fd only (fstatat, renameat, unlinkat, and bind/connect on
 * /proc/self/fd/N/NAME, since Linux has no bindat): it must be owned by
 * us or root (or group IPCBYVAL_RENDEZVOUS_GID) and not writable by
 * others. A socket there is used only when it is a socket (not a symlink)
 * owned by our uid (or of group IPCBYVAL_RENDEZVOUS_GID); one nobody
 * listens on is stale (its exporter died) and ignored; exporters sweep
 * the stale ones of their uid. No GPU API and no configuration parsing
 * here: the shim passes the values (shim/rendezvous.c).
 */
#ifndef BYVAL_HANDLES_RENDEZVOUS_H
#define BYVAL_HANDLES_RENDEZVOUS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "handles/resolve.h"

/* No group: peers of our uid only. */
#define BYVAL_RENDEZVOUS_NO_GID (-1L)

/* Use dir (NULL or "": none, behaviour as without it) with group gid
 * (BYVAL_RENDEZVOUS_NO_GID: none). Once, before any other call (the
 * shim's init). 0, or -1 with the reason in msg: the directory is refused
 * (missing, a symlink, world-writable, owned by another uid ...) and not
 * used. */
int byval_rendezvous_setup(const char *dir, long gid, char *msg, size_t msglen);

/* A directory is in use. */
int byval_rendezvous_enabled(void);

/* The directory as configured (for messages), "" when none. */
const char *byval_rendezvous_dir(void);

/* Exporter (the broker's start): a listening socket (non-blocking,
 * close-on-exec) under our name in the directory, stale sockets of our
 * uid swept first. -1 with the reason in msg (then only the abstract
 * socket serves). Removed again at exit by the process that made it. */
int byval_rendezvous_listen(const byval_self_t *self, char *msg, size_t msglen);

/* Exporter (the broker's start, broker_serve.c): listen in the directory
 * when one is in use and add the socket to the server's epoll set efd
 * under tag; *fd_p the socket or -1. A failure is kept for
 * byval_rendezvous_take_error: the abstract socket serves as before. */
void byval_rendezvous_serve(const byval_self_t *self, int efd, uint64_t tag, int *fd_p);

/* Exporter (the broker's start): the server could not start (errno err),
 * so the directory is not listened on either; kept for
 * byval_rendezvous_take_error as any listen failure. */
void byval_rendezvous_start_failed(int err);

/* Why the exporter does not listen in the directory, once (1 and the
 * reason in msg), for the shim's log; 0 when there is nothing (new) to say. */
int byval_rendezvous_take_error(char *msg, size_t msglen);

/* Exporter: one fd served through the directory's socket (the broker);
 * how many so far (stats). */
void byval_rendezvous_served(void);
uint64_t byval_rendezvous_served_count(void);

/* Exporter: is the peer on a connection accepted from the directory's
 * socket served? Our uid as for the abstract socket
 * (byval_broker_uid_allowed), or, with a group, a peer whose primary or
 * supplementary groups include it. */
int byval_rendezvous_peer_allowed(int conn, const struct ucred *cred);

/* Importer: connect s (a blocking AF_UNIX stream socket) to the socket of
 * rec's exporter in the directory by deadline (CLOCK_MONOTONIC ms). The
 * listener is not proven yet: the caller must (broker_fetch.c). BYVAL_OK,
 * BYVAL_E_GONE (no socket, or a stale one), BYVAL_E_IDENTITY (a socket we
 * must not trust, or a record without a pidfs identity), BYVAL_E_SYS. */
byval_status_t byval_rendezvous_connect(int s, const byval_record_t *rec, int64_t deadline,
                                        char *msg, size_t msglen);

/* The fd number a rescue request (broker_internal.h) names to ask for
 * the exporter's registry memfd (rendezvous_registry.c). */
#define BYVAL_RENDEZVOUS_FD_REGISTRY 0x7fffffffu

/* Exporter (the broker's lookup): a duplicate of our registry memfd. 0,
 * or a negative errno. */
int32_t byval_rendezvous_registry_dup(int *dup_p);

/* Importer: rec's exporter's registry memfd (kind checked) from its
 * broker, for an exporter whose /proc we cannot see. */
byval_status_t byval_rendezvous_registry(const byval_record_t *rec, int *mfd_p, char *msg,
                                         size_t msglen);

/* Importer: the exporter of a short record (event pools) from another
 * pid namespace, found in the directory by its identity's 32 bits and
 * proven as for any fetch; as byval_reg_attach_short (registry_view.h). */
struct byval_reg_view;
byval_status_t byval_rendezvous_attach_short(const byval_short_t *s, const byval_self_t *self,
                                             int mode, struct byval_reg_view **v_p,
                                             byval_record_t *rec_p, int *pidfd_p, char *msg,
                                             size_t msglen);

/* The socket name of an exporter (boot, pidfs inode) into buf. */
void byval_rendezvous_name(char *buf, size_t len, uint32_t boot, uint64_t identity);

#endif
