/* SPDX-License-Identifier: MIT */
/*
 * ze_handle.c - what the bytes of a Level Zero handle say, both ends: the
 * classic layout (the driver's fd @0, our record after the driver's bytes)
 * told from the opaque one by a pattern the driver leaves alone in the
 * classic layout's free bytes; and the short record (handles/wire.h,
 * doc/level-zero-short-records.md) an exporter writes after a classic
 * event pool's driver bytes (@40) or in an opaque handle's reserved bytes
 * (@30), which an importer resolves to the live entry of the exporter's
 * registry it names, and from that to the fd to fetch.
 */
#include <string.h>
#include <unistd.h>

#include "cache/config.h"
#include "cache/log.h"
#include "cache/stats.h"
#include "cache/transport.h"
#include "handles/rendezvous.h"
#include "handles/resolve.h"
#include "shim/ze.h"

uint64_t byval_ze_handle_fd(const void *handle64)
{
    uint64_t fd;
    memcpy(&fd, handle64, sizeof(fd));
    return fd;
}

int byval_ze_read(const void *handle64, byval_record_t *rec_p, int checked)
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

/* The opaque layouts (driver 25.35+): memory's exporter pid @16, fd copy
 * @22; an event pool's fd copy @8, pid @20. */
#define COPY_OFF(pool) ((pool) ? 8 : 22)
#define COPY_LEN(pool) ((pool) ? 8u : 4u)
#define PID_OFF(pool) ((pool) ? 20 : 16)

static int layout_is_opaque(const uint8_t *h, int pool)
{
    uint64_t fd0 = 0, copy = 0;
    uint32_t pid;
    memcpy(&fd0, h, COPY_LEN(pool));
    memcpy(&copy, h + COPY_OFF(pool), COPY_LEN(pool));
    memcpy(&pid, h + PID_OFF(pool), 4);
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

#define RESERVED_LEN 32

/* An opaque handle a short record can describe: the rendezvous directory
 * in use, the reserved bytes left zero, handle type fd. */
static int describable(const void *handle64, int pool)
{
    const uint8_t *h = handle64;
    for (int i = BYVAL_ZE_OPAQUE_OFF; i < BYVAL_ZE_OPAQUE_OFF + RESERVED_LEN; i++)
        if (h[i]) /* fabric data, the driver's */
            return 0;
    /* memory: handle type @20 (0: fd); pools carry theirs @29 */
    return byval_rendezvous_enabled() && byval_cfg.transport != BYVAL_TRANSPORT_PIDFD &&
        (pool ? h[29] : h[20]) == 0;
}

int byval_ze_layout(uint8_t *h, int pool)
{
    if (byval_ze_pattern(h, pool ? BYVAL_ZE_POOL_RECORD_OFF : BYVAL_ZE_RECORD_OFF, 0))
        return 0;
    if (layout_is_opaque(h, pool) && describable(h, pool))
        return 1;
    byval_ze_pass(h, pool);
    return -1;
}

int byval_ze_short_write(void *handle64, size_t off, uint64_t serial)
{
    uint8_t *h = handle64;
    byval_self_t self;
    if (!serial || off + BYVAL_SHORT_LEN > ZE_MAX_IPC_HANDLE_SIZE || byval_self_get(&self) != 0)
        return -1;
    byval_short_t s = {self.id_flags, self.pid, (uint32_t)self.identity,
                       byval_short_guard(self.boot, self.pidns), (uint32_t)serial};
    return byval_short_encode(&s, h, off, h + off) == BYVAL_WIRE_OK ? 0 : -1;
}

int byval_ze_opaque_decode(const void *handle64, byval_short_t *s_p)
{
    const uint8_t *h = handle64;
    return byval_short_decode(h + BYVAL_ZE_OPAQUE_OFF, h, BYVAL_ZE_OPAQUE_OFF, s_p) ==
        BYVAL_WIRE_OK;
}

int byval_ze_opaque_whose(const byval_short_t *s)
{
    byval_self_t self;
    if (byval_self_get(&self) != 0 || s->guard != byval_short_guard(self.boot, self.pidns))
        return 2;
    return s->pid == self.pid && s->id32 == (uint32_t)self.identity ? 0 : 1;
}

void byval_ze_opaque_strip(void *handle64)
{
    memset((uint8_t *)handle64 + BYVAL_ZE_OPAQUE_OFF, 0, RESERVED_LEN);
}

void byval_ze_opaque_local(void *handle64, int fd, int pool)
{
    uint8_t *h = handle64;
    uint64_t fd64 = (uint64_t)fd, none = UINT64_MAX;
    memcpy(h, &fd64, sizeof(fd64));
    /* The copy differs (the driver's test for a handle changed by the
     * user) and no pid is left to import from. */
    memcpy(h + COPY_OFF(pool), &none, COPY_LEN(pool));
    memset(h + PID_OFF(pool), 0, 4);
    byval_ze_opaque_strip(h);
}
