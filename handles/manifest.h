/* SPDX-License-Identifier: MIT */
/*
 * manifest.h - the layout of a VMM export manifest, and its reader.
 *
 * A by-value CUDA VMM handle names ONE fd in the exporter: a sealed memfd
 * holding this manifest. It lists the chunks the handle makes readable:
 * the pointer's chunk (cuMemGetAddressRange's mapping) and every chunk
 * mapped after it without a hole, as the exporter's reservation held them
 * at the get, each with the exporter's fd number of its POSIX-fd export,
 * that fd's tag (what a peer of another uid shows to fetch it) and its
 * chunk id (the registry key it is published under; never reused,
 * so a chunk mapped anew at the same offset is told apart). The pool id
 * names the reservation: an importer keeps one mirror per pool, into
 * which every chunk is mapped once at its offset. Host-endian: exporter
 * and importer share one host (the record's boot id says so).
 *
 * The reader is pure (no GPU API, nothing but pread on the fd it is
 * given): the importer runs it on bytes a peer wrote, possibly hostile.
 * Fuzzed by test/fuzz/fuzz_manifest.c.
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

/*
 * Check the len bytes at buf as the manifest of a record whose size is
 * rec_size (the exporter records the manifest's length; it travels in
 * 4 KiB pages, so rec_size is that length rounded up to a page). pid is
 * the exporter's, for the message. Returns a malloc'd copy of exactly
 * BYVAL_MANIFEST_LEN(nchunks) bytes, every one of them from buf, or NULL
 * with one line in msg (may be NULL) saying exactly what is wrong:
 * header, magic or version; a chunk count of 0 or above the bound; fewer
 * or more bytes than the count needs; a length the record's size does not
 * cover; a chunk that is empty, outside the reservation, not right after
 * the one before (a handle's chunks are one run), or whose fd number, id
 * or tag cannot be one.
 */
byval_manifest_t *byval_manifest_parse(const void *buf, size_t len, uint64_t rec_size, uint32_t pid,
                                       char *msg, size_t msglen);

/*
 * Read the manifest from fd (pread from offset 0: the file offset, which
 * the exporter shares, is never used) and check it with
 * byval_manifest_parse. fd must be the exported sealed memfd (fdcheck.c
 * proves that before: pread on another kind of file could block).
 */
byval_manifest_t *byval_manifest_read(int fd, uint64_t rec_size, uint32_t pid, char *msg,
                                      size_t msglen);

#endif
