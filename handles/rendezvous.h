/* SPDX-License-Identifier: MIT */
/*
 * rendezvous.h - the socket fallback through a directory both sides can
 * reach (IPCBYVAL_RENDEZVOUS_DIR), across pid, network and mount
 * namespaces: the broker also listens on DIR/ipcbyval-<boot>-<pidfs
 * inode>.sock, proven by SO_PEERPIDFD (rendezvous.c says how it is
 * trusted). The shim passes the configuration.
 */
#ifndef BYVAL_HANDLES_RENDEZVOUS_H
#define BYVAL_HANDLES_RENDEZVOUS_H

#include <sys/socket.h>

#include "handles/self.h"

/* No group: peers of our uid only. */
#define BYVAL_RENDEZVOUS_NO_GID (-1L)

/* Use dir (NULL or "": none) with group gid. Once, before any other call
 * (the shim's init). 0, or -1 with the reason in msg: not used. */
int byval_rendezvous_setup(const char *dir, long gid, char *msg, size_t msglen);
int byval_rendezvous_enabled(void);
/* The directory as configured, "" when none. */
const char *byval_rendezvous_dir(void);

/* The socket name of an exporter (boot, pidfs inode) into buf. */
void byval_rendezvous_name(char *buf, size_t len, uint32_t boot, uint64_t identity);

/* Exporter: a listening socket (non-blocking, close-on-exec) under our
 * name, stale sockets of our uid swept first; removed at exit by the
 * process that made it. -1 with the reason in msg. */
int byval_rendezvous_listen(const byval_self_t *self, char *msg, size_t msglen);

/* Exporter (the broker's start): listen when a directory is in use and add
 * the socket to epoll set efd under tag; *fd_p the socket or -1. A
 * failure, or start_failed's, is kept for byval_rendezvous_take_error. */
void byval_rendezvous_serve(const byval_self_t *self, int efd, uint64_t tag, int *fd_p);
void byval_rendezvous_start_failed(int err);

/* Why the exporter does not listen in the directory, once (1 and msg). */
int byval_rendezvous_take_error(char *msg, size_t msglen);

/* Exporter: a peer on a connection from the directory's socket of
 * another uid than ours whose groups include the directory's group. */
int byval_rendezvous_group_peer(int conn, const struct ucred *cred);

/* Exporter: fds served through the directory's socket (stats). */
void byval_rendezvous_served(void);
uint64_t byval_rendezvous_served_count(void);

/* Importer: connect s (blocking AF_UNIX stream) to rec's exporter's
 * socket by deadline (CLOCK_MONOTONIC ms); the listener is not proven
 * yet. BYVAL_OK, GONE (none, or stale), IDENTITY (a socket we must not
 * trust, or no pidfs identity), SYS. */
byval_status_t byval_rendezvous_connect(int s, const byval_record_t *rec, int64_t deadline,
                                        char *msg, size_t msglen);

/* Importer: fn(name, boot, identity, arg) for each exporter's socket in
 * the directory, until it returns non-zero. */
typedef int (*byval_rdv_each_fn)(const char *name, uint32_t boot, uint64_t identity, void *arg);
void byval_rendezvous_each(byval_rdv_each_fn fn, void *arg);

#endif
