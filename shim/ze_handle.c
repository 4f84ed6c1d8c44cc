/* SPDX-License-Identifier: MIT */
/*
 * ze_handle.c - what the bytes of a Level Zero handle say, both ends: the
 * classic layout (the driver's fd @0, our record after the driver's bytes)
 * told from the opaque one by a pattern the driver leaves alone in the
 * classic layout's free bytes.
 */
#include <string.h>
#include <unistd.h>

#include "handles/wire.h"
#include "shim/log.h"
#include "shim/stats.h"
#include "shim/transport.h"
#include "shim/ze.h"

uint64_t byval_ze_handle_fd(const void *handle64)
{
    uint64_t fd;
    memcpy(&fd, handle64, sizeof(fd));
    return fd;
}

static int ze_read(const void *handle64, byval_record_t *rec_p, int checked)
{
    const uint8_t *h = handle64;
    if (!byval_wire_is_candidate(h + BYVAL_ZE_RECORD_OFF, BYVAL_WIRE_LEN))
        return 0;
    byval_wire_status_t st = checked
        ? byval_wire_decode(h + BYVAL_ZE_RECORD_OFF, BYVAL_WIRE_LEN, rec_p)
        : byval_wire_parse(h + BYVAL_ZE_RECORD_OFF, BYVAL_WIRE_LEN, rec_p);
    /* A program that passes the fd itself (SCM_RIGHTS) overwrites bytes
     * 0-3 with its local fd: then the driver must see its handle. */
    return st == BYVAL_WIRE_OK && byval_ze_handle_fd(h) == rec_p->fd;
}

int byval_ze_decode(const void *handle64, byval_record_t *rec_p)
{
    return ze_read(handle64, rec_p, 1);
}

int byval_ze_parse(const void *handle64, byval_record_t *rec_p)
{
    return ze_read(handle64, rec_p, 0);
}

int byval_ze_pattern(uint8_t *h, size_t off, int fill)
{
    /* Position-dependent: a driver that zero-fills or copies a constant
     * is noticed. */
    for (size_t i = off; i < ZE_MAX_IPC_HANDLE_SIZE; i++) {
        uint8_t b = (uint8_t)(0xA5u ^ (i * 29u));
        if (fill)
            h[i] = b;
        else if (h[i] != b)
            return 0;
    }
    return 1;
}

void byval_ze_pattern_fill(uint8_t *h)
{
    byval_ze_pattern(h, BYVAL_ZE_RECORD_OFF, 1);
}

/* The opaque layout (driver 25.35+): memory's exporter pid @16, fd copy
 * @22; an event pool's fd copy @8, pid @20. */
static int layout_is_opaque(const uint8_t *h, int pool)
{
    uint64_t fd0 = 0, copy = 0;
    uint32_t pid;
    memcpy(&fd0, h, pool ? 8 : 4);
    memcpy(&copy, h + (pool ? 8 : 22), pool ? 8 : 4);
    memcpy(&pid, h + (pool ? 20 : 16), 4);
    return pid == (uint32_t)getpid() && fd0 == copy;
}

void byval_ze_pass(const uint8_t *h, int pool)
{
    uint64_t fd = byval_ze_handle_fd(h);
    BYVAL_STAT_INC(export_passthrough);
    if (!layout_is_opaque(h, pool))
        BYVAL_LOG_INFO("unknown %sIPC handle layout from the driver: passed through",
                       pool ? "event-pool " : "");
    else if (fd <= INT32_MAX) /* the importer's driver fetches fd @0 with its own pidfd_getfd */
        byval_export_register_fd((int)fd);
}

int byval_ze_layout(uint8_t *h, int pool)
{
    if (byval_ze_pattern(h, pool ? BYVAL_ZE_POOL_RECORD_OFF : BYVAL_ZE_RECORD_OFF, 0))
        return 0;
    if (layout_is_opaque(h, pool) && byval_ze_opaque_describable(h, pool))
        return 1;
    byval_ze_pass(h, pool);
    return -1;
}
