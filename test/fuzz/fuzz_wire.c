/* SPDX-License-Identifier: MIT */
/*
 * fuzz_wire.c - libFuzzer target for the record decoder.
 *
 * 1. The input as is: any length must decode without a fault (ASan and
 *    UBSan watch every read; the buffer libFuzzer hands over is exactly
 *    size bytes), SHORT exactly when size < 47, and the verdict must not
 *    depend on whether the caller wants the fields.
 * 2. The input with the magic and a correct checksum forced in: random
 *    bytes almost never pass the checksum, so this is what reaches the
 *    version/kind/flags/fd checks. Whatever decodes OK must re-encode to
 *    the same 47 bytes: the encoding is canonical, so the decoder accepts
 *    nothing the encoder could not have written.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "handles/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_canonical(const uint8_t *rec_bytes, size_t size)
{
    byval_record_t rec;
    uint8_t again[BYVAL_WIRE_LEN];
    byval_wire_status_t st = byval_wire_decode(rec_bytes, size, &rec);
    if (st > BYVAL_WIRE_BAD_FIELD)
        abort();
    if ((st == BYVAL_WIRE_SHORT) != (size < BYVAL_WIRE_LEN))
        abort();
    if (byval_wire_decode(rec_bytes, size, NULL) != st) /* rec_p NULL: same verdict */
        abort();
    if (st != BYVAL_WIRE_OK)
        return;
    if (rec.version != BYVAL_WIRE_VERSION || rec.kind < 1 || rec.kind > BYVAL_KIND_MAX_ ||
        (rec.flags & ~BYVAL_FLAG_MASK) || rec.fd > BYVAL_WIRE_MAX_FD || rec.size % BYVAL_WIRE_PAGE ||
        rec.size > BYVAL_WIRE_MAX_SIZE || rec.alloc_id > BYVAL_WIRE_MAX_ALLOC_ID ||
        rec.identity > BYVAL_WIRE_MAX_IDENTITY || rec.tag > BYVAL_WIRE_MAX_TAG)
        abort();
    if (byval_wire_encode(&rec, again) != BYVAL_WIRE_OK)
        abort();
    if (memcmp(again, rec_bytes, BYVAL_WIRE_LEN) != 0)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check_canonical(data, size);
    if (size < BYVAL_WIRE_LEN - 6) /* 41 bytes: all but magic and checksum */
        return 0;
    uint8_t b[BYVAL_WIRE_LEN];
    b[0] = (uint8_t)(BYVAL_WIRE_MAGIC & 0xff);
    b[1] = (uint8_t)(BYVAL_WIRE_MAGIC >> 8);
    memcpy(b + 2, data, BYVAL_WIRE_LEN - 6);
    uint32_t sum = byval_fnv1a32(b, BYVAL_WIRE_LEN - 4);
    for (int i = 0; i < 4; i++)
        b[BYVAL_WIRE_LEN - 4 + i] = (uint8_t)(sum >> (8 * i));
    check_canonical(b, sizeof(b));
    return 0;
}
