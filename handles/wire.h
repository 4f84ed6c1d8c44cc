/* SPDX-License-Identifier: MIT */
/*
 * wire.h - the ipcbyval by-value record, wire format v2 (pure code).
 *
 * The record is BYVAL_WIRE_LEN (47) bytes, little endian, so it fits in the
 * bytes 17..63 that Intel's classic Level Zero layout leaves untouched.
 *
 *  off len field
 *    0   2 magic      0x7962 ("by")
 *    2   1 version    2
 *    3   1 kind:4 | flags:4
 *    4   4 pid        exporter pid, in the exporter's pid namespace
 *    8   4 pidns      inode of the exporter's /proc/self/ns/pid
 *   12   4 boot       hash of /proc/sys/kernel/random/boot_id (host guard)
 *   16   6 identity   pidfs inode of the exporter (flag ID_PIDFS) or its
 *                     start time in clock ticks (against PID reuse); both
 *                     stay far below 2^48
 *   22   3 fd         the fd number in the exporter (below 2^24)
 *   25   4 fd_ino     low 32 bits of the exported fd's inode number
 *   29   6 alloc_id   allocation id / export serial (48 bits)
 *   35   4 pages      size in 4 KiB pages, rounded up (16 TiB max)
 *   39   1 device     device ordinal in the exporter
 *   40   5 tag        the exporter's keyed hash of (fd, inode), 40 bits
 *                     (handles/tag.h): what a peer of another uid must show
 *   45   2 checksum   low 16 bits of FNV-1a 32 over bytes 0..44
 */
#ifndef BYVAL_HANDLES_WIRE_H
#define BYVAL_HANDLES_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define BYVAL_WIRE_LEN 47
#define BYVAL_WIRE_MAGIC 0x7962u
#define BYVAL_WIRE_VERSION 2u
#define BYVAL_WIRE_PAGE 4096u
#define BYVAL_WIRE_MAX_ALLOC_ID ((UINT64_C(1) << 48) - 1)
#define BYVAL_WIRE_MAX_SIZE ((uint64_t)UINT32_MAX * BYVAL_WIRE_PAGE)
#define BYVAL_WIRE_MAX_IDENTITY ((UINT64_C(1) << 48) - 1)
#define BYVAL_WIRE_MAX_FD ((UINT32_C(1) << 24) - 1)
#define BYVAL_WIRE_MAX_TAG ((UINT64_C(1) << 40) - 1)

/* What the handle describes. */
enum byval_kind {
    BYVAL_KIND_ZE_MEM = 1,          /* Level Zero memory, classic layout */
    BYVAL_KIND_ZE_EVENT_POOL = 2,   /* Level Zero event pool, classic layout */
    BYVAL_KIND_CU_VMM = 3,          /* CUDA VMM allocation (fd of one chunk) */
    BYVAL_KIND_CU_VMM_MANIFEST = 4, /* CUDA VMM reservation, fd of a manifest */
    BYVAL_KIND_MAX_ = 4
};

/* Flags (4 bits). */
#define BYVAL_FLAG_ID_PIDFS 0x1u /* identity is the pidfs inode, else start time */
#define BYVAL_FLAG_MASK 0x1u

typedef struct byval_record {
    uint8_t version;
    uint8_t kind;  /* enum byval_kind */
    uint8_t flags; /* BYVAL_FLAG_* */
    uint32_t pid;
    uint32_t pidns;
    uint32_t boot;
    uint64_t identity;
    uint32_t fd;
    uint32_t fd_ino;
    uint64_t alloc_id; /* only the low 48 bits travel */
    uint64_t size;     /* bytes; travels as pages, decodes as pages * 4096 */
    uint8_t device;
    uint64_t tag; /* 40 bits; 0 where the exporter had no key */
} byval_record_t;

typedef enum byval_wire_status {
    BYVAL_WIRE_OK = 0,
    BYVAL_WIRE_SHORT,    /* fewer than BYVAL_WIRE_LEN bytes */
    BYVAL_WIRE_NOT_OURS, /* magic does not match: not an ipcbyval record */
    BYVAL_WIRE_CHECKSUM, /* magic matches, checksum does not */
    BYVAL_WIRE_VERSION_UNKNOWN,
    BYVAL_WIRE_BAD_FIELD, /* kind or flags out of range */
} byval_wire_status_t;

/* Encode rec into out[0..46]. Returns BYVAL_WIRE_BAD_FIELD (writing
 * nothing) when a field cannot travel (kind unknown, size > MAX_SIZE,
 * alloc_id or identity > 48 bits, fd > MAX_FD, tag > 40 bits). */
byval_wire_status_t byval_wire_encode(const byval_record_t *rec, uint8_t out[BYVAL_WIRE_LEN]);

/* Decode and validate len bytes at in. Never reads past in[len-1]. */
byval_wire_status_t byval_wire_decode(const uint8_t *in, size_t len, byval_record_t *rec_p);

/* Decode without the checksum (a third of a cache hit's cost): only for
 * a record the caller compares byte for byte with one it decoded before. */
byval_wire_status_t byval_wire_parse(const uint8_t *in, size_t len, byval_record_t *rec_p);

/* Cheap pre-check: 1 if the bytes start with the magic (no checksum). */
int byval_wire_is_candidate(const uint8_t *in, size_t len);

/* Static string for a status, e.g. "checksum mismatch". */
const char *byval_wire_status_str(byval_wire_status_t st);

/*
 * The short record: 24 bytes, for handles whose driver leaves fewer than
 * 47 bytes free (Level Zero's classic IpcEventPoolData). It names an entry
 * of the exporter's registry (registry.h), which holds the rest. Little
 * endian:
 *
 *  off len field
 *    0   2 magic      0x6562 ("be")
 *    2   1 version    1
 *    3   1 flags      BYVAL_FLAG_ID_PIDFS; other bits 0
 *    4   4 pid        exporter pid, in the exporter's pid namespace
 *    8   4 id32       low 32 bits of the exporter's identity (as wire.h)
 *   12   4 guard      byval_short_guard(boot, pidns): host and pid namespace
 *   16   4 serial     low 32 bits of the export's registry serial
 *   20   4 checksum   FNV-1a 32 over the bound bytes (the driver's part of
 *                     the handle), then bytes 0..19
 *
 * A handle whose driver bytes the program replaced fails the checksum:
 * not ours, it goes to the driver unchanged.
 */
#define BYVAL_SHORT_LEN 24
#define BYVAL_SHORT_MAGIC 0x6562u
#define BYVAL_SHORT_VERSION 1u

typedef struct byval_short {
    uint8_t flags; /* BYVAL_FLAG_* */
    uint32_t pid;
    uint32_t id32;   /* identity & 0xffffffff */
    uint32_t guard;  /* byval_short_guard() of the exporter */
    uint32_t serial; /* registry serial & 0xffffffff */
} byval_short_t;

/* The host and pid-namespace guard of (boot, pidns). */
uint32_t byval_short_guard(uint32_t boot, uint32_t pidns);

/* Encode s into out[0..23], the checksum over bound[0..bound_len) first. */
byval_wire_status_t byval_short_encode(const byval_short_t *s, const uint8_t *bound,
                                       size_t bound_len, uint8_t out[BYVAL_SHORT_LEN]);

/* Decode and validate in[0..23] against bound (as encoded). */
byval_wire_status_t byval_short_decode(const uint8_t in[BYVAL_SHORT_LEN], const uint8_t *bound,
                                       size_t bound_len, byval_short_t *s_p);

/* FNV-1a 32-bit, exposed for tests and for hashing boot ids. */
uint32_t byval_fnv1a32(const void *data, size_t len);

#endif
