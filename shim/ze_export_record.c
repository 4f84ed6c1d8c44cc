/* SPDX-License-Identifier: MIT */
/*
 * ze_export_record.c - what an exported Level Zero handle says: the
 * classic layout told from others by a pattern in the bytes the driver
 * leaves alone, and the by-value record written there (ze_export.c keeps
 * the export itself).
 */
#include <string.h>
#include <unistd.h>

#include "handles/resolve.h"
#include "cache/transport.h"
#include "shim/ze.h"

/* Pattern for bytes 17..63: position-dependent so that a driver that
 * zero-fills or copies a constant is noticed. */
static uint8_t pattern_byte(size_t i)
{
    return (uint8_t)(0xA5u ^ (i * 29u));
}

void byval_ze_pattern_fill(uint8_t *h)
{
    for (size_t i = BYVAL_ZE_RECORD_OFF; i < ZE_MAX_IPC_HANDLE_SIZE; i++)
        h[i] = pattern_byte(i);
}

int byval_ze_pattern_intact(const uint8_t *h)
{
    for (size_t i = BYVAL_ZE_RECORD_OFF; i < ZE_MAX_IPC_HANDLE_SIZE; i++)
        if (h[i] != pattern_byte(i))
            return 0;
    return 1;
}

/* Opaque layout (driver 25.35+): exporter pid @16, fd copy @22. */
int byval_ze_layout_is_opaque(const uint8_t *h)
{
    uint32_t pid, fd0, fd22;
    memcpy(&pid, h + 16, 4);
    memcpy(&fd0, h, 4);
    memcpy(&fd22, h + 22, 4);
    return pid == (uint32_t)getpid() && fd0 == fd22;
}

/* Device ordinal of dev within its driver (record field, diagnostics). */
static uint8_t device_ordinal(ze_device_handle_t dev)
{
    ze_pfnDriverGet_t drv_get = (ze_pfnDriverGet_t)byval_ze_sym("zeDriverGet");
    ze_pfnDeviceGet_t dev_get = (ze_pfnDeviceGet_t)byval_ze_sym("zeDeviceGet");
    if (!dev || !drv_get || !dev_get)
        return 0;
    ze_driver_handle_t drivers[8];
    uint32_t nd = 8;
    if (drv_get(&nd, drivers) != ZE_RESULT_SUCCESS)
        return 0;
    for (uint32_t d = 0; d < nd && d < 8; d++) {
        ze_device_handle_t devs[64];
        uint32_t n = 64;
        if (dev_get(drivers[d], &n, devs) != ZE_RESULT_SUCCESS)
            continue;
        for (uint32_t i = 0; i < n && i < 64; i++)
            if (devs[i] == dev)
                return (uint8_t)i;
    }
    return 0;
}

/* The record of the fd in bytes 0-7 of a handle the driver just filled
 * (either layout): 0, or -1. */
int byval_ze_opaque_record(const uint8_t *h, uint64_t alloc_id, byval_record_t *rec_p)
{
    byval_self_t self;
    uint64_t fd = byval_ze_handle_fd(h);
    if (fd > INT32_MAX || byval_self_get(&self) != 0)
        return -1;
    memset(rec_p, 0, sizeof(*rec_p));
    byval_record_set_exporter(rec_p, &self);
    rec_p->kind = BYVAL_KIND_ZE_MEM;
    rec_p->fd = (uint32_t)fd;
    rec_p->fd_ino = (uint32_t)byval_fd_inode((int)fd);
    rec_p->alloc_id = alloc_id & BYVAL_WIRE_MAX_ALLOC_ID;
    /* The object's own size (a pool's dma-buf is larger than the
     * allocation), checked by the importer against its duplicate. */
    int64_t size = byval_fd_size((int)fd);
    if (size > 0 && (uint64_t)size <= BYVAL_WIRE_MAX_SIZE)
        rec_p->size = (uint64_t)size;
    return 0;
}

/* Write the record into a classic handle the driver just filled. */
int byval_ze_write_record(uint8_t *h, uint64_t alloc_id, ze_device_handle_t dev)
{
    byval_record_t rec;
    if (byval_ze_opaque_record(h, alloc_id, &rec) != 0)
        return -1;
    rec.device = device_ordinal(dev);
    rec.tag = byval_export_tag(rec.fd, rec.fd_ino);
    return byval_wire_encode(&rec, h + BYVAL_ZE_RECORD_OFF) == BYVAL_WIRE_OK ? 0 : -1;
}
