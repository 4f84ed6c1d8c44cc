/* SPDX-License-Identifier: MIT */
/* wire.c - encode/decode of the 47-byte record (layout in wire.h). Pure:
 * no syscalls, no allocation; the decoder checks len before every read. */
#include "handles/wire.h"

#include <string.h>

uint32_t byval_fnv1a32(const void *data, size_t len)
{
    const uint8_t *p = data;
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < len; i++)
        h = (h ^ p[i]) * 16777619u;
    return h;
}

static void put_le(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* n (<= 8) little-endian bytes at p. Inlined with a constant n it is one
 * or two loads on a little-endian CPU (the byte loop was a tenth of a
 * cached CUDA re-open, which parses the record on every call). */
static inline __attribute__((always_inline)) uint64_t get_le(const uint8_t *p, int n)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    /* Loads of the field's own widths: a 6-byte field copied into a
     * zeroed uint64_t was two stores read back by one 8-byte load, a
     * failed store forward (some 15 cycles) on every cached CUDA re-open. */
    uint32_t lo32;
    uint16_t lo16;
    uint64_t v;
    switch (n) {
    case 1: return p[0];
    case 2: memcpy(&lo16, p, 2); return lo16;
    case 4: memcpy(&lo32, p, 4); return lo32;
    case 6:
        memcpy(&lo32, p, 4);
        memcpy(&lo16, p + 4, 2);
        return lo32 | (uint64_t)lo16 << 32;
    case 8: memcpy(&v, p, 8); return v;
    default:
        v = 0;
        memcpy(&v, p, (size_t)n);
        return v;
    }
#else
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
#endif
}

#define OFF_MAGIC 0
#define OFF_VERSION 2
#define OFF_KIND 3
#define OFF_PID 4
#define OFF_PIDNS 8
#define OFF_BOOT 12
#define OFF_IDENTITY 16
#define OFF_FD 22
#define OFF_FD_INO 25
#define OFF_ALLOC_ID 29
#define OFF_PAGES 35
#define OFF_DEVICE 39
#define OFF_TAG 40
#define OFF_CHECKSUM 45

static uint16_t wire_checksum(const uint8_t *b)
{
    /* The low half of FNV-1a: each step is a bijection on the low 16
     * bits, so any one changed byte still changes it. */
    return (uint16_t)byval_fnv1a32(b, OFF_CHECKSUM);
}

byval_wire_status_t byval_wire_encode(const byval_record_t *rec, uint8_t out[BYVAL_WIRE_LEN])
{
    if (!rec || !out)
        return BYVAL_WIRE_BAD_FIELD;
    if (rec->kind < 1 || rec->kind > BYVAL_KIND_MAX_ || (rec->flags & ~BYVAL_FLAG_MASK) ||
        rec->size > BYVAL_WIRE_MAX_SIZE || rec->alloc_id > BYVAL_WIRE_MAX_ALLOC_ID ||
        rec->identity > BYVAL_WIRE_MAX_IDENTITY || rec->fd > BYVAL_WIRE_MAX_FD ||
        rec->tag > BYVAL_WIRE_MAX_TAG)
        return BYVAL_WIRE_BAD_FIELD;
    uint8_t b[BYVAL_WIRE_LEN];
    put_le(b + OFF_MAGIC, BYVAL_WIRE_MAGIC, 2);
    b[OFF_VERSION] = BYVAL_WIRE_VERSION;
    b[OFF_KIND] = (uint8_t)(rec->kind | (rec->flags << 4));
    put_le(b + OFF_PID, rec->pid, 4);
    put_le(b + OFF_PIDNS, rec->pidns, 4);
    put_le(b + OFF_BOOT, rec->boot, 4);
    put_le(b + OFF_IDENTITY, rec->identity, 6);
    put_le(b + OFF_FD, rec->fd, 3);
    put_le(b + OFF_FD_INO, rec->fd_ino, 4);
    put_le(b + OFF_ALLOC_ID, rec->alloc_id, 6);
    put_le(b + OFF_PAGES, (rec->size + BYVAL_WIRE_PAGE - 1) / BYVAL_WIRE_PAGE, 4);
    b[OFF_DEVICE] = rec->device;
    put_le(b + OFF_TAG, rec->tag, 5);
    put_le(b + OFF_CHECKSUM, wire_checksum(b), 2);
    memcpy(out, b, BYVAL_WIRE_LEN);
    return BYVAL_WIRE_OK;
}

int byval_wire_is_candidate(const uint8_t *in, size_t len)
{
    return in && len >= 2 && get_le(in, 2) == BYVAL_WIRE_MAGIC;
}

byval_wire_status_t byval_wire_decode(const uint8_t *in, size_t len, byval_record_t *rec_p)
{
    if (!in || len < BYVAL_WIRE_LEN)
        return BYVAL_WIRE_SHORT;
    if (get_le(in + OFF_MAGIC, 2) != BYVAL_WIRE_MAGIC)
        return BYVAL_WIRE_NOT_OURS;
    if (get_le(in + OFF_CHECKSUM, 2) != wire_checksum(in))
        return BYVAL_WIRE_CHECKSUM;
    return byval_wire_parse(in, len, rec_p);
}

byval_wire_status_t byval_wire_parse(const uint8_t *in, size_t len, byval_record_t *rec_p)
{
    if (!in || len < BYVAL_WIRE_LEN)
        return BYVAL_WIRE_SHORT;
    if (get_le(in + OFF_MAGIC, 2) != BYVAL_WIRE_MAGIC)
        return BYVAL_WIRE_NOT_OURS;
    if (in[OFF_VERSION] != BYVAL_WIRE_VERSION)
        return BYVAL_WIRE_VERSION_UNKNOWN;
    uint8_t kind = in[OFF_KIND] & 0xF, flags = in[OFF_KIND] >> 4;
    if (kind < 1 || kind > BYVAL_KIND_MAX_ || (flags & ~BYVAL_FLAG_MASK))
        return BYVAL_WIRE_BAD_FIELD;
    if (rec_p) {
        rec_p->version = in[OFF_VERSION];
        rec_p->kind = kind;
        rec_p->flags = flags;
        rec_p->pid = (uint32_t)get_le(in + OFF_PID, 4);
        rec_p->pidns = (uint32_t)get_le(in + OFF_PIDNS, 4);
        rec_p->boot = (uint32_t)get_le(in + OFF_BOOT, 4);
        rec_p->identity = get_le(in + OFF_IDENTITY, 6);
        rec_p->fd = (uint32_t)get_le(in + OFF_FD, 3);
        rec_p->fd_ino = (uint32_t)get_le(in + OFF_FD_INO, 4);
        rec_p->alloc_id = get_le(in + OFF_ALLOC_ID, 6);
        rec_p->size = get_le(in + OFF_PAGES, 4) * BYVAL_WIRE_PAGE;
        rec_p->device = in[OFF_DEVICE];
        rec_p->tag = get_le(in + OFF_TAG, 5);
    }
    return BYVAL_WIRE_OK;
}

/* ---- the short record (layout in wire.h) --------------------------------- */

#define S_OFF_MAGIC 0
#define S_OFF_VERSION 2
#define S_OFF_FLAGS 3
#define S_OFF_PID 4
#define S_OFF_ID32 8
#define S_OFF_GUARD 12
#define S_OFF_SERIAL 16
#define S_OFF_CHECKSUM 20

uint32_t byval_short_guard(uint32_t boot, uint32_t pidns)
{
    uint8_t b[8];
    put_le(b, boot, 4);
    put_le(b + 4, pidns, 4);
    return byval_fnv1a32(b, sizeof(b));
}

static uint32_t short_checksum(const uint8_t *rec, const uint8_t *bound, size_t bound_len)
{
    uint32_t h = 2166136261u; /* FNV-1a over bound, then rec[0..19] */
    for (size_t i = 0; i < bound_len; i++)
        h = (h ^ bound[i]) * 16777619u;
    for (size_t i = 0; i < S_OFF_CHECKSUM; i++)
        h = (h ^ rec[i]) * 16777619u;
    return h;
}

byval_wire_status_t byval_short_encode(const byval_short_t *s, const uint8_t *bound,
                                       size_t bound_len, uint8_t out[BYVAL_SHORT_LEN])
{
    if (!s || !out || (bound_len && !bound) || (s->flags & ~BYVAL_FLAG_MASK))
        return BYVAL_WIRE_BAD_FIELD;
    uint8_t b[BYVAL_SHORT_LEN];
    put_le(b + S_OFF_MAGIC, BYVAL_SHORT_MAGIC, 2);
    b[S_OFF_VERSION] = BYVAL_SHORT_VERSION;
    b[S_OFF_FLAGS] = s->flags;
    put_le(b + S_OFF_PID, s->pid, 4);
    put_le(b + S_OFF_ID32, s->id32, 4);
    put_le(b + S_OFF_GUARD, s->guard, 4);
    put_le(b + S_OFF_SERIAL, s->serial, 4);
    put_le(b + S_OFF_CHECKSUM, short_checksum(b, bound, bound_len), 4);
    memcpy(out, b, BYVAL_SHORT_LEN);
    return BYVAL_WIRE_OK;
}

byval_wire_status_t byval_short_decode(const uint8_t in[BYVAL_SHORT_LEN], const uint8_t *bound,
                                       size_t bound_len, byval_short_t *s_p)
{
    if (!in || (bound_len && !bound))
        return BYVAL_WIRE_SHORT;
    if (get_le(in + S_OFF_MAGIC, 2) != BYVAL_SHORT_MAGIC)
        return BYVAL_WIRE_NOT_OURS;
    if (get_le(in + S_OFF_CHECKSUM, 4) != short_checksum(in, bound, bound_len))
        return BYVAL_WIRE_CHECKSUM;
    if (in[S_OFF_VERSION] != BYVAL_SHORT_VERSION)
        return BYVAL_WIRE_VERSION_UNKNOWN;
    if (in[S_OFF_FLAGS] & ~BYVAL_FLAG_MASK)
        return BYVAL_WIRE_BAD_FIELD;
    if (s_p) {
        s_p->flags = in[S_OFF_FLAGS];
        s_p->pid = (uint32_t)get_le(in + S_OFF_PID, 4);
        s_p->id32 = (uint32_t)get_le(in + S_OFF_ID32, 4);
        s_p->guard = (uint32_t)get_le(in + S_OFF_GUARD, 4);
        s_p->serial = (uint32_t)get_le(in + S_OFF_SERIAL, 4);
    }
    return BYVAL_WIRE_OK;
}

const char *byval_wire_status_str(byval_wire_status_t st)
{
    switch (st) {
    case BYVAL_WIRE_OK: return "ok";
    case BYVAL_WIRE_SHORT: return "record too short";
    case BYVAL_WIRE_NOT_OURS: return "not an ipcbyval record";
    case BYVAL_WIRE_CHECKSUM: return "checksum mismatch";
    case BYVAL_WIRE_VERSION_UNKNOWN: return "unknown record version";
    case BYVAL_WIRE_BAD_FIELD: return "field out of range";
    }
    return "unknown status";
}
