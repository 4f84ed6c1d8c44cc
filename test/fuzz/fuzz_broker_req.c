/* SPDX-License-Identifier: MIT */
/*
 * fuzz_broker_req.c - libFuzzer target for the socket fallback's request
 * parser (handles/broker_internal.h), which the exporter runs on whatever a
 * peer of its uid sends.
 *
 * The input is what one connection sends. Checked for every prefix, as
 * the exporter sees the bytes arrive in pieces:
 * - no read outside the buffer (ASan: each prefix is parsed from its own
 *   heap copy of exactly that length);
 * - the verdict only moves forward: MORE, MORE, ..., then READY or BAD,
 *   and once BAD always BAD (a connection is never revived by more bytes);
 * - READY exactly at the request's length, with the fields as sent;
 * - MORE never at or beyond that length.
 * The first byte also picks a mode that forces one of the two magics in
 * front (a by-handle request or a rescue), so that the fields' checks are
 * reached, not only the magic's.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "handles/broker_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_stream(const uint8_t *in, size_t size)
{
    byval_broker_parse_t prev = BYVAL_BROKER_MORE;
    for (size_t len = 0; len <= size; len++) {
        uint8_t *copy = malloc(len ? len : 1);
        if (!copy)
            abort();
        memcpy(copy, in, len);
        struct broker_req req, again;
        memset(&req, 0xa5, sizeof(req));
        byval_broker_parse_t st = byval_broker_req_parse(copy, len, &req);
        if (st != BYVAL_BROKER_MORE && st != BYVAL_BROKER_READY && st != BYVAL_BROKER_BAD)
            abort();
        if (byval_broker_req_parse(copy, len, NULL) != st) /* req_p NULL: same verdict */
            abort();
        if (prev == BYVAL_BROKER_BAD && st != BYVAL_BROKER_BAD)
            abort();
        if (prev == BYVAL_BROKER_READY && st != BYVAL_BROKER_BAD)
            abort(); /* bytes after a request are not a second one */
        if (st == BYVAL_BROKER_MORE && len >= sizeof(struct broker_req))
            abort();
        if (st == BYVAL_BROKER_READY) {
            if (len != sizeof(struct broker_req))
                abort();
            memcpy(&again, copy, sizeof(again));
            if ((again.magic != BROKER_MAGIC && again.magic != BROKER_MAGIC_RESCUE) ||
                again.fd > INT32_MAX || req.magic != again.magic || req.fd != again.fd ||
                req.fd_ino != again.fd_ino || req.tag != again.tag || (again.tag >> 40))
                abort();
            if (again.magic == BROKER_MAGIC_RESCUE && (again.fd_ino != 0 || again.tag != 0))
                abort(); /* a rescue names a number, nothing else */
        }
        free(copy);
        prev = st;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    if (size > 64)
        size = 64; /* the exporter never reads past one request */
    if (!(data[0] & 1)) {
        check_stream(data + 1, size - 1);
        return 0;
    }
    uint8_t b[64 + sizeof(uint32_t)];
    uint32_t magic = data[0] & 2 ? BROKER_MAGIC_RESCUE : BROKER_MAGIC;
    memcpy(b, &magic, sizeof(magic));
    memcpy(b + sizeof(magic), data + 1, size - 1);
    check_stream(b, sizeof(magic) + size - 1);
    return 0;
}
