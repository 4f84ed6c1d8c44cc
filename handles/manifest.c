/* SPDX-License-Identifier: MIT */
/*
 * manifest.c - the VMM manifest reader (see manifest.h).
 *
 * What a hostile manifest must not do: make us read bytes that were never
 * written (a header claiming more chunks than the file holds: the old
 * reader then used its own uninitialised heap as chunk fds and inodes and
 * asked the exporter for them), make us map outside the reservation, or
 * overflow a size computation. Every length is checked before the bytes
 * it covers are read, and the copy returned holds only bytes from the file.
 */
#include "handles/manifest.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "handles/self.h"

static uint64_t pages(uint64_t bytes)
{
    return bytes / BYVAL_WIRE_PAGE + (bytes % BYVAL_WIRE_PAGE != 0);
}

/* The chunks, in order, inside the reservation and apart. */
static int chunks_ok(const byval_manifest_t *m, uint32_t pid, char *msg, size_t msglen)
{
    uint64_t end = 0; /* of the chunk before */
    for (uint32_t i = 0; i < m->nchunks; i++) {
        const byval_manifest_chunk_t *c = &m->chunks[i];
        const char *why = NULL;
        if (c->size == 0)
            why = "is empty";
        else if (c->offset > m->reserve_size || c->size > m->reserve_size - c->offset)
            why = "lies outside the reservation";
        else if (i && c->offset != end)
            why = "does not follow the chunk before it";
        else if (c->fd > INT32_MAX)
            why = "names an fd number no process can have";
        else if (c->tag > BYVAL_WIRE_MAX_TAG)
            why = "carries a tag no export can have";
        else if (c->id == 0 || c->id > BYVAL_WIRE_MAX_ALLOC_ID)
            why = "has an id no export can have";
        if (why)
            return byval_fail(0, msg, msglen,
                              "manifest from pid %u: chunk %u (offset %llu, size %llu, fd %u) %s "
                              "(reservation of %llu bytes)",
                              pid, i, (unsigned long long)c->offset, (unsigned long long)c->size,
                              c->fd, why, (unsigned long long)m->reserve_size);
        end = c->offset + c->size;
    }
    return 1;
}

byval_manifest_t *byval_manifest_parse(const void *buf, size_t len, uint64_t rec_size, uint32_t pid,
                                       char *msg, size_t msglen)
{
    byval_manifest_t hdr;
    if (len < sizeof(hdr))
        return byval_fail_null(
            msg, msglen, "manifest from pid %u is %zu bytes long, shorter than its %zu-byte header",
            pid, len, sizeof(hdr));
    memcpy(&hdr, buf, sizeof(hdr));
    if (hdr.magic != BYVAL_MANIFEST_MAGIC || hdr.version != BYVAL_MANIFEST_VERSION)
        return byval_fail_null(
            msg, msglen,
            "manifest from pid %u has magic 0x%08x version %u, not an ipcbyval manifest of "
            "version %u",
            pid, hdr.magic, hdr.version, BYVAL_MANIFEST_VERSION);
    if (hdr.nchunks == 0 || hdr.nchunks > BYVAL_MANIFEST_MAX_CHUNKS)
        return byval_fail_null(msg, msglen,
                               "manifest from pid %u lists %u chunks (1 to %u allowed)", pid,
                               hdr.nchunks, BYVAL_MANIFEST_MAX_CHUNKS);
    size_t need = BYVAL_MANIFEST_LEN(hdr.nchunks); /* <= 40 MiB: no overflow */
    if (len != need)
        return byval_fail_null(
            msg, msglen,
            "manifest from pid %u is %zu bytes long, but its header lists %u chunks (%zu bytes)",
            pid, len, hdr.nchunks, need);
    if (pages(need) != pages(rec_size))
        return byval_fail_null(
            msg, msglen,
            "manifest from pid %u is %zu bytes long, but the handle records %llu bytes (%llu "
            "pages, not %llu)",
            pid, need, (unsigned long long)rec_size, (unsigned long long)pages(rec_size),
            (unsigned long long)pages(need));
    byval_manifest_t *m = malloc(need);
    if (!m)
        return byval_fail_null(msg, msglen, "manifest from pid %u: out of memory for %zu bytes",
                               pid, need);
    memcpy(m, buf, need);
    if (!chunks_ok(m, pid, msg, msglen)) {
        free(m);
        return NULL;
    }
    return m;
}

byval_manifest_t *byval_manifest_read(int fd, uint64_t rec_size, uint32_t pid, char *msg,
                                      size_t msglen)
{
    /* The record's size bounds what we read, and the chunk bound bounds
     * the record's size. */
    if (rec_size < BYVAL_MANIFEST_LEN(1) || pages(rec_size) > pages(BYVAL_MANIFEST_MAX_LEN))
        return byval_fail_null(
            msg, msglen,
            "handle from pid %u records a manifest of %llu bytes (%zu to %llu possible)", pid,
            (unsigned long long)rec_size, BYVAL_MANIFEST_LEN(1),
            (unsigned long long)pages(BYVAL_MANIFEST_MAX_LEN) * BYVAL_WIRE_PAGE);
    /* One byte more than the record covers, so that a longer file is seen
     * as longer rather than cut to a plausible length. */
    size_t cap = (size_t)rec_size + 1;
    uint8_t *buf = malloc(cap);
    if (!buf)
        return byval_fail_null(msg, msglen, "manifest from pid %u: out of memory for %zu bytes",
                               pid, cap);
    size_t len = 0;
    ssize_t n = 1;
    while (len < cap && (n = pread(fd, buf + len, cap - len, (off_t)len)) != 0)
        if (n > 0)
            len += (size_t)n;
        else if (errno != EINTR)
            break;
    byval_manifest_t *m = NULL;
    if (n < 0)
        byval_msg(msg, msglen, "pread(manifest fd %d of pid %u) failed: %s", fd, pid,
                  strerror(errno));
    else if (len == cap)
        byval_msg(msg, msglen,
                  "manifest from pid %u is longer than the %llu bytes its handle records", pid,
                  (unsigned long long)rec_size);
    else
        m = byval_manifest_parse(buf, len, rec_size, pid, msg, msglen);
    free(buf);
    return m;
}
