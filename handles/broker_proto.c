/* SPDX-License-Identifier: MIT */
/*
 * broker_proto.c - the socket fallback's request parser, pure (no
 * syscalls, no state but its arguments): the exporter runs it on bytes a
 * peer of its uid sent, possibly hostile, possibly in pieces. Fuzzed by
 * test/fuzz/fuzz_broker_req.c.
 */
#include <string.h>

#include "handles/broker_internal.h"

byval_broker_parse_t byval_broker_req_parse(const void *buf, size_t len, struct broker_req *req_p)
{
    const uint8_t *b = buf;
    uint32_t magic = BROKER_MAGIC, rescue = BROKER_MAGIC_RESCUE;
    size_t head = len < sizeof(magic) ? len : sizeof(magic);
    /* The magic decides as soon as its bytes are here: a peer sending
     * anything else is dropped at its first bytes, not at its deadline. */
    if (memcmp(b, &magic, head) != 0 && memcmp(b, &rescue, head) != 0)
        return BYVAL_BROKER_BAD;
    if (len < sizeof(struct broker_req))
        return BYVAL_BROKER_MORE;
    if (len > sizeof(struct broker_req))
        return BYVAL_BROKER_BAD; /* one request per connection, nothing after it */
    struct broker_req req;
    memcpy(&req, b, sizeof(req));
    if (req.fd > INT32_MAX)
        return BYVAL_BROKER_BAD; /* no fd number is that large */
    if (req.magic == BROKER_MAGIC_RESCUE && (req.fd_ino != 0 || req.tag != 0))
        return BYVAL_BROKER_BAD; /* a rescue names a number, nothing else */
    if (req.tag >> 40)
        return BYVAL_BROKER_BAD; /* no tag is that large */
    if (req_p)
        *req_p = req;
    return BYVAL_BROKER_READY;
}
