/* SPDX-License-Identifier: MIT */
/*
 * manifest.h - a CUDA VMM export manifest and its reader. A by-value VMM
 * handle names one fd: a sealed memfd listing the chunks it makes
 * readable (the pointer's and every one mapped after it without a hole),
 * each with its POSIX-fd export's number, tag and chunk id (its registry
 * key, never reused). The pool id names the reservation, mirrored once
 * per importer. Host-endian (one host). The reader is pure and runs on
 * bytes a peer wrote (fuzzed: test/fuzz/fuzz_manifest.c).
 */
#ifndef BYVAL_HANDLES_MANIFEST_H
#define BYVAL_HANDLES_MANIFEST_H

#include <stddef.h>
#include <stdint.h>

#define BYVAL_MANIFEST_MAGIC 0x4d564249u /* "IBVM" */
#define BYVAL_MANIFEST_VERSION 3u
/* A bound on what an importer reads (40 MiB), far above a GPU's worth of
 * 2 MiB chunks. */
#define BYVAL_MANIFEST_MAX_CHUNKS (1u << 20)

typedef struct byval_manifest_chunk {
    uint64_t offset; /* from the reservation start */
    uint64_t size;
    uint64_t id;     /* the exporter's chunk id (48 bits) */
    uint32_t fd;     /* in the exporter */
    uint32_t fd_ino; /* low 32 bits of its inode */
    uint64_t tag;    /* the exporter's tag of (fd, fd_ino), handles/tag.h (40 bits) */
} byval_manifest_chunk_t;

typedef struct byval_manifest {
    uint32_t magic;
    uint32_t version;
    uint32_t nchunks;
    uint32_t device;
    uint64_t reserve_size; /* bytes of the exporter's reservation */
    uint64_t pool_id;      /* the reservation, as the exporter names it */
    byval_manifest_chunk_t chunks[];
} byval_manifest_t;

/* Bytes of a manifest of n chunks; the largest one. */
#define BYVAL_MANIFEST_LEN(n) \
    (sizeof(byval_manifest_t) + (size_t)(n) * sizeof(byval_manifest_chunk_t))
#define BYVAL_MANIFEST_MAX_LEN BYVAL_MANIFEST_LEN(BYVAL_MANIFEST_MAX_CHUNKS)

/* Check len bytes at buf as the manifest of a record of size rec_size
 * (its length rounded up to a page; pid for the message): a malloc'd copy
 * of exactly BYVAL_MANIFEST_LEN(nchunks) bytes, or NULL with one line in
 * msg saying what is wrong (header, count, length, or a chunk empty,
 * outside the reservation, not right after the one before, or with a
 * field that cannot be). */
byval_manifest_t *byval_manifest_parse(const void *buf, size_t len, uint64_t rec_size, uint32_t pid,
                                       char *msg, size_t msglen);

/* The same, read with pread from fd (the shared offset never moves),
 * which must be a proven sealed memfd (fdcheck.c). */
byval_manifest_t *byval_manifest_read(int fd, uint64_t rec_size, uint32_t pid, char *msg,
                                      size_t msglen);

#endif
