/* SPDX-License-Identifier: MIT */
/*
 * ze_opaque_import.c - zeMemOpenIpcHandle of an opaque handle that carries
 * a short record (ze_opaque.c) from an exporter in another pid namespace.
 *
 * As an event pool's (ze_event_import.c): the short record names the
 * exporter (pid, 32 bits of identity, guard) and an entry of its registry
 * (serial). A miss finds the exporter (through the rendezvous directory:
 * registry_short.c), the live entry (gone: freed, refused), the fd, inode,
 * size and allocation id from it, fetches the fd (the directory's socket,
 * proven by SO_PEERPIDFD), and hands the driver the handle as a plain fd
 * (byval_ze_opaque_local). The mapping is kept by the import lifecycle
 * core under (guard, pid, id32, serial, flags, pool offset, context,
 * device), its liveness the registry entry: the exporter's free releases
 * a closed mapping at once, its exit all of them; a context's destruction
 * releases its mappings first (base.ctx). A hit is a lookup. Close is
 * ze_import.c's (the core's open-pointer map holds every mapping).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/locks.h"
#include "cache/imports.h"
#include "handles/registry_view.h"
#include "handles/resolve.h"
#include "shim/config.h"
#include "shim/init.h"
#include "shim/log.h"
#include "shim/stats.h"
#include "shim/track.h"
#include "shim/transport.h"
#include "shim/ze.h"
#include "shim/ze_short.h"

#define API_OPEN "zeMemOpenIpcHandle"

typedef struct opaque_key {
    uint32_t guard, pid, id32, serial;
    uint64_t flags;
    uint64_t pool_offset; /* driver bytes 8-15 */
    uintptr_t ctx, dev;
} opaque_key_t;

typedef struct opaque_import {
    byval_ze_short_import_t s; /* first: the core's part and the handle */
    void *ptr;
    ze_context_handle_t ctx;
} opaque_import_t;

static byval_imports_t *imports;
static byval_once_t import_once = BYVAL_ONCE_INIT;

static void opaque_release(byval_import_t *b)
{
    opaque_import_t *m = (opaque_import_t *)b;
    if (!__atomic_load_n(&b->dead, __ATOMIC_RELAXED))
        byval_ze_close_mapping(m->ctx, m->ptr);
}

/* Tracked at import already (the registry entry named by the record). */
static byval_imports_ops_t import_ops = {
    .name = "ze opaque import",
    .key_len = sizeof(opaque_key_t),
    .release = opaque_release,
    .same = byval_ze_short_same,
};

static void import_init(void)
{
    imports = byval_track_cache(&import_ops);
    if (!imports)
        BYVAL_LOG_ERROR("cannot allocate the opaque import cache: by-value opens will fail");
}

static ze_result_t import_miss(ze_pfnMemOpenIpcHandle_t next, ze_context_handle_t ctx,
                               ze_device_handle_t dev, ze_ipc_mem_handle_t handle,
                               ze_ipc_memory_flags_t flags, const byval_short_t *s,
                               const opaque_key_t *key, void **pptr)
{
    byval_record_t rec;
    byval_reg_view_t *v = NULL;
    const uint64_t *w = NULL;
    byval_reg_slot_t slot;
    unsigned long long t_open = BYVAL_LOG_T0();
    ze_result_t r =
        byval_ze_short_entry(API_OPEN, s, handle.data, BYVAL_KIND_ZE_MEM, &rec, &v, &w, &slot);
    if (r != ZE_RESULT_SUCCESS)
        return r;
    int fd = -1;
    if ((r = byval_ze_resolve_as(API_OPEN, &rec, &fd)) != ZE_RESULT_SUCCESS) {
        byval_reg_view_put(v);
        return r;
    }
    ze_ipc_mem_handle_t local = handle;
    byval_ze_opaque_local((uint8_t *)local.data, fd, 0);
    void *p = NULL;
    uint64_t t0 = byval_stats_now_ns();
    byval_enter();
    r = next(ctx, dev, local, flags, &p);
    byval_leave();
    if (byval_ze_short_imported(API_OPEN, r, fd, &rec, v, t0) != ZE_RESULT_SUCCESS)
        return r;
    opaque_import_t *m = calloc(1, sizeof(*m));
    if (!m) {
        byval_reg_view_put(v);
        byval_ze_close_mapping(ctx, p);
        return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
    }
    m->ptr = p;
    m->ctx = ctx;
    m->s.base.ctx = (uintptr_t)ctx; /* dies with its context, as ze_import.c's */
    m->s.base.addr = (uintptr_t)p;
    byval_ze_short_fill(&m->s, handle.data, &rec, w, slot.serial, v);
    byval_import_t *out;
    byval_lru_ref_t ref;
    byval_imports_insert(imports, key, &m->s.base, &out, &ref);
    p = ((opaque_import_t *)out)->ptr;
    if (byval_imports_open(imports, out, ref, (uintptr_t)p) < 0)
        return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
    byval_log_open("", byval_fetch_route(), rec.pid, rec.size, p, t_open);
    *pptr = p;
    return ZE_RESULT_SUCCESS;
}

ze_result_t byval_ze_open_opaque(ze_pfnMemOpenIpcHandle_t next, ze_context_handle_t ctx,
                                 ze_device_handle_t dev, ze_ipc_mem_handle_t handle,
                                 ze_ipc_memory_flags_t flags, const byval_short_t *s, void **pptr)
{
    if (byval_ze_opaque_whose(s) != 2) {
        /* Ours, or our pid namespace's: the driver's own pidfd import, on
         * the handle as the driver wrote it. */
        BYVAL_STAT_INC(open_passthrough);
        byval_ze_opaque_strip((uint8_t *)handle.data);
        return next(ctx, dev, handle, flags, pptr);
    }
    byval_once(&import_once, import_init);
    if (!imports)
        return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
    opaque_key_t key;
    memset(&key, 0, sizeof(key));
    key.guard = s->guard;
    key.pid = s->pid;
    key.id32 = s->id32;
    key.serial = s->serial;
    key.flags = flags;
    memcpy(&key.pool_offset, handle.data + 8, sizeof(key.pool_offset));
    key.ctx = (uintptr_t)ctx;
    key.dev = (uintptr_t)dev;
    unsigned long long t_open = BYVAL_LOG_T0();
    byval_lru_ref_t ref = 0;
    opaque_import_t *m = (opaque_import_t *)byval_ze_short_get(imports, &key, handle.data, &ref);
    BYVAL_STAT_INC(opens);
    if (m) {
        if (byval_imports_open(imports, &m->s.base, ref, (uintptr_t)m->ptr) < 0)
            return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
        BYVAL_STAT_INC(open_hits);
        byval_log_open("", BYVAL_ROUTE_HIT, m->s.base.pid, m->s.base.bytes, m->ptr, t_open);
        *pptr = m->ptr;
        return ZE_RESULT_SUCCESS;
    }
    BYVAL_STAT_INC(open_misses);
    return import_miss(next, ctx, dev, handle, flags, s, &key, pptr);
}
