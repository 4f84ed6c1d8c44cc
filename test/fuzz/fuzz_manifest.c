/* SPDX-License-Identifier: MIT */
/*
 * fuzz_manifest.c - libFuzzer target for the CUDA VMM manifest reader
 * (handles/manifest.c), which the importer runs on a file a peer wrote.
 *
 * Input: one control byte, then the manifest bytes.
 *   bit 0   force a valid header (magic, version, and a chunk count that
 *           matches the length), so the chunk checks are what is fuzzed
 *   bit 1   go through byval_manifest_read on a memfd holding the bytes,
 *           not byval_manifest_parse on the buffer
 *   bits 2-4  the record's size: 0 the bytes' length rounded up to a
 *           page (what an honest exporter records), else that many pages
 * Checked: no read outside the bytes (ASan; the buffer is exactly their
 * length), and whatever is accepted is exactly the bytes given, with every
 * promise of manifest.h kept: 1 to the bound of chunks, the length they
 * need, the record's size in pages, each chunk non-empty, inside the
 * reservation, right after the one before, its fd a possible number and
 * its id a possible one.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "handles/manifest.h"
#include "handles/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint64_t pages(uint64_t b)
{
    return (b + BYVAL_WIRE_PAGE - 1) / BYVAL_WIRE_PAGE;
}

static void check_accepted(const byval_manifest_t *m, const uint8_t *bytes, size_t len,
                           uint64_t rec_size)
{
    if (m->magic != BYVAL_MANIFEST_MAGIC || m->version != BYVAL_MANIFEST_VERSION ||
        m->nchunks == 0 || m->nchunks > BYVAL_MANIFEST_MAX_CHUNKS ||
        BYVAL_MANIFEST_LEN(m->nchunks) != len || pages(len) != pages(rec_size) ||
        memcmp(m, bytes, len) != 0)
        abort();
    uint64_t end = 0;
    for (uint32_t i = 0; i < m->nchunks; i++) {
        const byval_manifest_chunk_t *c = &m->chunks[i];
        if (!c->size || (i && c->offset != end) || c->offset > m->reserve_size ||
            c->size > m->reserve_size - c->offset || c->fd > INT32_MAX ||
            c->tag > BYVAL_WIRE_MAX_TAG || !c->id ||
            c->id > BYVAL_WIRE_MAX_ALLOC_ID)
            abort();
        end = c->offset + c->size;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > (1u << 20)) /* long manifests differ only in their count */
        return 0;
    uint8_t ctl = data[0];
    size_t len = size - 1;
    uint8_t *bytes = malloc(len ? len : 1);
    if (!bytes)
        abort();
    memcpy(bytes, data + 1, len);
    if ((ctl & 1) && len >= sizeof(byval_manifest_t)) {
        uint32_t hdr[3] = {BYVAL_MANIFEST_MAGIC, BYVAL_MANIFEST_VERSION,
                           (uint32_t)((len - sizeof(byval_manifest_t)) /
                                      sizeof(byval_manifest_chunk_t))};
        memcpy(bytes, hdr, sizeof(hdr));
    }
    unsigned p = (ctl >> 2) & 7;
    uint64_t rec_size = p ? (uint64_t)p * BYVAL_WIRE_PAGE : pages(len) * BYVAL_WIRE_PAGE;
    byval_manifest_t *m;
    if (ctl & 2) {
        int fd = memfd_create("fuzz-manifest", MFD_CLOEXEC);
        if (fd < 0 || (len && write(fd, bytes, len) != (ssize_t)len))
            abort();
        m = byval_manifest_read(fd, rec_size, 1, NULL, 0);
        close(fd);
    } else {
        char msg[256];
        m = byval_manifest_parse(bytes, len, rec_size, 1, msg, sizeof(msg));
        if (!m && !msg[0])
            abort(); /* every refusal says why */
    }
    if (m) {
        check_accepted(m, bytes, len, rec_size);
        free(m);
    }
    free(bytes);
    return 0;
}
