/* SPDX-License-Identifier: MIT */
/* broker_internal.h - the socket fallback's names and wire protocol, shared
 * by its exporter side (broker_serve.c) and importer side (broker_fetch.c). */
#ifndef BYVAL_HANDLES_BROKER_INTERNAL_H
#define BYVAL_HANDLES_BROKER_INTERNAL_H

#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>

/* Linux 6.5+; the asm-generic number (alpha, mips, parisc and sparc have
 * their own tables: there we go without it and check SO_PEERCRED only). */
#ifndef SO_PEERPIDFD
#if defined(__alpha__) || defined(__mips__) || defined(__hppa__) || defined(__sparc__)
#define SO_PEERPIDFD (-1)
#else
#define SO_PEERPIDFD 77
#endif
#endif

#include "handles/broker.h"

/* One request per connection: {magic, fd, fd_ino, tag} in, {BROKER_MAGIC,
 * status} out (0 or a negative errno; the fd rides along with 0).
 * BROKER_MAGIC asks for an fd ipcbyval offered, checked against fd_ino
 * and, from a peer of another uid than the one served, against tag
 * (handles/tag.h); BROKER_MAGIC_RESCUE, for a pidfd_getfd the kernel
 * refused, for an fd number the registry lists as exported (registry_fds.c);
 * BROKER_MAGIC_REGISTRY for the exporter's registry page, for an importer
 * that cannot find it in the exporter's /proc. The last two name nothing
 * else (0). All magics begin "bvB". */
#define BROKER_MAGIC 0x31427662u
#define BROKER_MAGIC_RESCUE 0x52427662u
#define BROKER_MAGIC_REGISTRY 0x50427662u

struct broker_req {
    uint32_t magic, fd, fd_ino;
    uint64_t tag; /* 40 bits */
} __attribute__((packed));

struct broker_rsp {
    uint32_t magic;
    int32_t status;
};

typedef enum byval_broker_parse {
    BYVAL_BROKER_MORE,  /* a valid beginning: wait for the rest */
    BYVAL_BROKER_READY, /* a whole, valid request in *req_p */
    BYVAL_BROKER_BAD,   /* not our protocol: answer -EPROTO and close */
} byval_broker_parse_t;

/* Parse the len bytes a peer sent so far on one connection, possibly
 * hostile, possibly in pieces. Pure (fuzzed: test/fuzz/fuzz_broker_req.c);
 * req_p may be NULL. The magic decides at its first bytes. */
static inline byval_broker_parse_t byval_broker_req_parse(const void *buf, size_t len,
                                                          struct broker_req *req_p)
{
    static const uint32_t magics[] = {BROKER_MAGIC, BROKER_MAGIC_RESCUE, BROKER_MAGIC_REGISTRY};
    size_t head = len < sizeof(uint32_t) ? len : sizeof(uint32_t);
    int known = 0;
    for (size_t i = 0; i < sizeof(magics) / sizeof(magics[0]); i++)
        known |= memcmp(buf, &magics[i], head) == 0;
    if (!known)
        return BYVAL_BROKER_BAD;
    if (len < sizeof(struct broker_req))
        return BYVAL_BROKER_MORE;
    struct broker_req req;
    memcpy(&req, buf, sizeof(req));
    if (len > sizeof(req) || req.fd > INT32_MAX || (req.tag >> 40) ||
        (req.magic != BROKER_MAGIC && (req.fd_ino != 0 || req.tag != 0)) ||
        (req.magic == BROKER_MAGIC_REGISTRY && req.fd != 0))
        return BYVAL_BROKER_BAD; /* one request, nothing after it; fields that cannot be */
    if (req_p)
        *req_p = req;
    return BYVAL_BROKER_READY;
}

/* Exporter: the status for req (0 or a negative errno), *dup_p what it
 * asks for when 0; own_uid: the peer is of the uid served (not only of
 * the directory's group, which gets no rescue and must show tags). */
int32_t byval_broker_lookup(const struct broker_req *req, int own_uid, int *dup_p);

/* Importer: one fetch's whole budget, connect to answer. */
#define BROKER_FETCH_MS 2000

/* CLOCK_MONOTONIC in ms: the broker's deadlines, both sides. */
static inline int64_t byval_broker_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Bound the next blocking call on s (opt: SO_SNDTIMEO or SO_RCVTIMEO) by
 * what is left until deadline (at least 1 ms). */
static inline void byval_broker_until(int s, int opt, int64_t deadline)
{
    int64_t left = deadline - byval_broker_now_ms();
    if (left < 1)
        left = 1;
    struct timeval tv = {(time_t)(left / 1000), (suseconds_t)(left % 1000) * 1000};
    setsockopt(s, SOL_SOCKET, opt, &tv, sizeof(tv));
}

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
