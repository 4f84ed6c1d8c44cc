/* SPDX-License-Identifier: MIT */
/*
 * ze_short.c - the short record (handles/wire.h) in Level Zero handles,
 * both ends: an exporter writes it after the driver's bytes (a classic
 * event pool's @40, an opaque handle's reserved bytes @30: ze_event.c,
 * ze_opaque.c); an importer resolves it to the live entry of the
 * exporter's registry it names, and from that to the record of the fd
 * to fetch (ze_event_import.c, ze_opaque_import.c).
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "handles/resolve.h"
#include "shim/config.h"
#include "shim/log.h"
#include "shim/stats.h"
#include "cache/transport.h"
#include "shim/ze_short.h"

int byval_ze_short_write(void *handle64, size_t off, uint64_t serial)
{
    uint8_t *h = handle64;
    byval_self_t self;
    if (!serial || off + BYVAL_SHORT_LEN > ZE_MAX_IPC_HANDLE_SIZE || byval_self_get(&self) != 0)
        return -1;
    byval_short_t s = {
        .flags = self.id_flags,
        .pid = self.pid,
        .id32 = (uint32_t)self.identity,
        .guard = byval_short_guard(self.boot, self.pidns),
        .serial = (uint32_t)serial,
    };
    return byval_short_encode(&s, h, off, h + off) == BYVAL_WIRE_OK ? 0 : -1;
}

ze_result_t byval_ze_short_refuse(const char *api, byval_status_t st, const char *msg)
{
    /* One error line per kind of failure and API (shim/log.h): memory, pools. */
    static int seen[2][BYVAL_E_SYS + 2];
    BYVAL_STAT_INC(open_errors);
    byval_log_once_per_kind(seen[strstr(api, "EventPool") != NULL], BYVAL_E_SYS + 2, (int)st, api,
                            "%s", msg);
    return st == BYVAL_E_NOFD ? ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY
                              : ZE_RESULT_ERROR_INVALID_ARGUMENT;
}

ze_result_t byval_ze_short_imported(const char *api, ze_result_t r, int fd,
                                    const byval_record_t *rec, byval_reg_view_t *v, uint64_t t0)
{
    BYVAL_STAT_ADD(miss_import_ns, byval_stats_now_ns() - t0);
    close(fd); /* the driver holds its own reference once open */
    if (r != ZE_RESULT_SUCCESS) {
        char msg[160];
        snprintf(msg, sizeof(msg), "the driver refused fd %d (pid %u fd %u): 0x%x", fd, rec->pid,
                 rec->fd, (unsigned)r);
        byval_ze_short_refuse(api, BYVAL_E_SYS, msg);
        byval_reg_view_put(v);
    }
    return r;
}

ze_result_t byval_ze_short_entry(const char *api, const byval_short_t *s, const void *handle64,
                                 uint8_t kind, byval_record_t *rec, byval_reg_view_t **v_p,
                                 const uint64_t **w_p, byval_reg_slot_t *slot)
{
    char msg[512] = "";
    int pidfd = -1;
    byval_self_t self;
    if (byval_self_get(&self) != 0)
        return ZE_RESULT_ERROR_UNKNOWN;
    byval_status_t st =
        byval_reg_attach_short(s, &self, byval_cfg.transport, v_p, rec, &pidfd, msg, sizeof(msg));
    if (st != BYVAL_OK)
        return byval_ze_short_refuse(api, st, msg);
    if (pidfd >= 0) /* verified for this exporter: kept for the fetch */
        byval_fetch_done(rec, pidfd);
    uint64_t fd;
    memcpy(&fd, handle64, sizeof(fd));
    *w_p = byval_reg_find_serial(*v_p, s->serial, slot);
    if (!*w_p || slot->key >> 56 != kind || slot->fd != fd) {
        byval_reg_view_put(*v_p);
        *v_p = NULL;
        snprintf(msg, sizeof(msg),
                 "pid %u exports no %s under serial %u with fd %llu (%s, or the handle was "
                 "altered)",
                 s->pid, kind == BYVAL_KIND_ZE_EVENT_POOL ? "event pool" : "memory", s->serial,
                 (unsigned long long)fd, kind == BYVAL_KIND_ZE_EVENT_POOL ? "destroyed" : "freed");
        return byval_ze_short_refuse(api, BYVAL_E_BADFD, msg);
    }
    rec->kind = kind;
    rec->fd = slot->fd;
    rec->fd_ino = slot->ino;
    rec->size = slot->size;
    rec->alloc_id = slot->key & BYVAL_WIRE_MAX_ALLOC_ID;
    return ZE_RESULT_SUCCESS;
}

int byval_ze_short_same(const byval_import_t *a, const byval_import_t *b)
{
    return memcmp(((const byval_ze_short_import_t *)a)->handle,
                  ((const byval_ze_short_import_t *)b)->handle, ZE_MAX_IPC_HANDLE_SIZE) == 0;
}

byval_ze_short_import_t *byval_ze_short_get(byval_imports_t *c, const void *key,
                                            const void *handle64, byval_lru_ref_t *ref_p)
{
    byval_ze_short_import_t *m = (byval_ze_short_import_t *)byval_imports_get(c, key, ref_p);
    if (m && memcmp(m->handle, handle64, ZE_MAX_IPC_HANDLE_SIZE) != 0) {
        byval_imports_unget(c, *ref_p); /* same key, another handle: resolve it */
        m = NULL;
    }
    return m;
}

void byval_ze_short_fill(byval_ze_short_import_t *m, const void *handle64,
                         const byval_record_t *rec, const uint64_t *w, uint64_t serial, void *v)
{
    memcpy(m->handle, handle64, ZE_MAX_IPC_HANDLE_SIZE);
    m->base.bytes = rec->size;
    m->base.pidns = rec->pidns;
    m->base.pid = rec->pid;
    m->base.identity = rec->identity;
    byval_import_track(&m->base, w, serial, v);
}
