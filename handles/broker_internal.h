/* SPDX-License-Identifier: MIT */
/* broker_internal.h - the socket fallback's name and wire protocol, shared
 * by its exporter side (broker_serve.c) and importer side (broker_fetch.c). */
#ifndef BYVAL_HANDLES_BROKER_INTERNAL_H
#define BYVAL_HANDLES_BROKER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>

#include "handles/broker.h"
#include "handles/resolve_internal.h"

/* One request per connection: {magic, fd, fd_ino} in, {magic, status} out
 * (status 0 or a negative errno; the fd rides along when it is 0).
 * BROKER_MAGIC asks for an fd ipcbyval offered, checked against fd_ino (a
 * by-value handle's); BROKER_MAGIC_RESCUE asks, for a pidfd_getfd the
 * kernel refused, for an fd number the registry lists as exported (fd_ino
 * is 0: the exporter proves the object itself, registry_fds.c). The
 * answer's magic is always BROKER_MAGIC. The first three bytes of both are
 * the same ("bvB"). */
#define BROKER_MAGIC 0x31427662u
#define BROKER_MAGIC_RESCUE 0x52427662u

struct broker_req {
    uint32_t magic, fd, fd_ino;
};

struct broker_rsp {
    uint32_t magic;
    int32_t status;
};

typedef enum byval_broker_parse {
    BYVAL_BROKER_MORE,  /* a valid beginning: wait for the rest */
    BYVAL_BROKER_READY, /* a whole, valid request in *req_p */
    BYVAL_BROKER_BAD,   /* not our protocol: answer -EPROTO and close */
} byval_broker_parse_t;

/* Parse the len bytes a peer sent so far on one connection (len <=
 * sizeof(struct broker_req) when the caller reads no further, but any len
 * is handled). Pure: broker_proto.c. req_p may be NULL. */
byval_broker_parse_t byval_broker_req_parse(const void *buf, size_t len, struct broker_req *req_p);

/* Exporter (broker_offers.c, for the server in broker_serve.c): the
 * status for req (0 or a negative errno) with *dup_p a duplicate of what
 * it asks for when 0; and whether a peer of uid is served (counted when
 * not). */
int32_t byval_broker_lookup(const struct broker_req *req, int *dup_p);
int byval_broker_uid_allowed(uid_t uid);

/* "\0ipcbyval-<boot>-<pidns>-<pid>-<identity>": abstract, so nothing on
 * disk, and per network namespace, like the exporter's peers. Returns the
 * address length; the printable name is a->sun_path + 1. */
static inline socklen_t byval_broker_addr(struct sockaddr_un *a, uint32_t boot, uint32_t pidns,
                                          uint32_t pid, uint64_t identity)
{
    memset(a, 0, sizeof(*a));
    a->sun_family = AF_UNIX;
    int n = snprintf(a->sun_path + 1, sizeof(a->sun_path) - 1, "ipcbyval-%08x-%u-%u-%llx", boot,
                     pidns, pid, (unsigned long long)identity);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

#endif
