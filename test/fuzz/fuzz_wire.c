/* SPDX-License-Identifier: MIT */
/*
 * fuzz_wire.c - libFuzzer target for the record decoder. Any input must
 * decode without a fault (ASan/UBSan watch every read), and a record that
 * decodes OK must re-encode to exactly its first 47 bytes: the encoding is
 * canonical, so the decoder accepts nothing the encoder could not write.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "handles/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    byval_record_t rec;
    uint8_t again[BYVAL_WIRE_LEN];
    byval_wire_status_t st = byval_wire_decode(data, size, &rec);
    if (st > BYVAL_WIRE_BAD_FIELD)
        abort();
    if (st == BYVAL_WIRE_SHORT && size >= BYVAL_WIRE_LEN)
        abort();
    if (byval_wire_decode(data, size, NULL) != st) /* rec_p NULL: same verdict */
        abort();
    if (st != BYVAL_WIRE_OK)
        return 0;
    if (byval_wire_encode(&rec, again) != BYVAL_WIRE_OK)
        abort();
    if (memcmp(again, data, BYVAL_WIRE_LEN) != 0)
        abort();
    return 0;
}
