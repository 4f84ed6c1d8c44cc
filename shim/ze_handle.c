/* SPDX-License-Identifier: MIT */
/* ze_handle.c - reading a classic-layout handle (shared by export/import
 * and event pools). */
#include <string.h>

#include "handles/wire.h"
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
    if (st != BYVAL_WIRE_OK)
        return 0;
    /* Programs that pass the fd with SCM_RIGHTS themselves overwrite bytes
     * 0-3 with their local fd: then the driver must see their handle. */
    return byval_ze_handle_fd(h) == rec_p->fd;
}

int byval_ze_decode(const void *handle64, byval_record_t *rec_p)
{
    return ze_read(handle64, rec_p, 1);
}

int byval_ze_parse(const void *handle64, byval_record_t *rec_p)
{
    return ze_read(handle64, rec_p, 0);
}
