/* SPDX-License-Identifier: MIT */
/*
 * cu_manifest.h - the layout of a VMM export manifest.
 *
 * A by-value CUDA VMM handle names ONE fd in the exporter: a sealed memfd
 * holding this manifest. It lists every physical chunk mapped into the
 * exporter's reservation (PyTorch expandable segments map many) with the
 * exporter's fd number for each chunk's POSIX-fd export, so the importer
 * can pidfd_getfd them all and rebuild the reservation with every byte at
 * the same offset.
 */
#ifndef BYVAL_SHIM_CU_MANIFEST_H
#define BYVAL_SHIM_CU_MANIFEST_H

#include <stdint.h>

#define BYVAL_MANIFEST_MAGIC 0x4d564249u /* "IBVM" */
#define BYVAL_MANIFEST_VERSION 1u
#define BYVAL_MANIFEST_MAX_CHUNKS 1024u

typedef struct byval_manifest_chunk {
    uint64_t offset; /* from the reservation start */
    uint64_t size;
    uint32_t fd;     /* in the exporter */
    uint32_t fd_ino; /* low 32 bits of its inode */
} byval_manifest_chunk_t;

typedef struct byval_manifest {
    uint32_t magic;
    uint32_t version;
    uint32_t nchunks;
    uint32_t device;
    uint64_t reserve_size; /* bytes of the exporter's reservation */
    byval_manifest_chunk_t chunks[];
} byval_manifest_t;

#endif
