/* SPDX-License-Identifier: MIT */
/*
 * ze_event_import.c - zeEventPoolOpenIpcHandle / zeEventPoolCloseIpcHandle
 * for handles with a short record (ze_event.c says why short).
 *
 * A miss finds the exporter's registry from the record (pid, identity,
 * host and pid-namespace guard: handles/registry_short.c), the live entry
 * the record's serial names (gone: the pool was destroyed, refused), takes
 * the fd number, inode and size from it, duplicates the fd through the
 * configured transport, writes the local fd into bytes 0-7 of a copy of
 * the handle for the driver's import and closes the duplicate. The
 * imported pool is kept by the import lifecycle core (cache/imports.h)
 * under (guard, pid, identity's low 32 bits, serial, local context); its
 * liveness is the registry entry, so the exporter's zeEventPoolDestroy
 * releases a closed import at once (the watcher thread), and its exit or
 * exec releases them all. Close drops an open; a closed pool stays for a
 * re-open until then, the context's destruction, or a budget's need.
 *
 * The pool handle is what the application closes: it goes into the
 * core's open-pointer map tagged with bit 63 (no user-space address has
 * it), so it never meets a memory mapping's pointer there.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/exporters.h"
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

#define POOL_TAG(pool) ((uintptr_t)(pool) | (UINT64_C(1) << 63))
#define API_OPEN "zeEventPoolOpenIpcHandle"

typedef struct pool_key {
    uint32_t guard, pid, id32, serial;
    uintptr_t ctx;
} pool_key_t;

typedef struct pool_import {
    byval_ze_short_import_t s; /* first: the core's part and the handle */
    ze_event_pool_handle_t pool;
    ze_context_handle_t ctx;
} pool_import_t;

static byval_imports_t *imports;
static byval_once_t import_once = BYVAL_ONCE_INIT;
static ze_pfnEventPoolCloseIpcHandle_t real_close;

static void pool_release(byval_import_t *b)
{
    pool_import_t *m = (pool_import_t *)b;
    if (real_close && !__atomic_load_n(&b->dead, __ATOMIC_RELAXED)) {
        byval_enter();
        ze_result_t r = real_close(m->pool);
        byval_leave();
        if (r != ZE_RESULT_SUCCESS)
            BYVAL_LOG_WARN("zeEventPoolCloseIpcHandle(%p) on release returned 0x%x",
                           (void *)m->pool, (unsigned)r);
    }
}

/* Tracked at import already (the registry entry named by the record). */
static byval_imports_ops_t import_ops = {
    .name = "ze pool import",
    .key_len = sizeof(pool_key_t),
    .release = pool_release,
    .same = byval_ze_short_same,
};

static void import_init(void)
{
    real_close = (ze_pfnEventPoolCloseIpcHandle_t)byval_ze_sym("zeEventPoolCloseIpcHandle");
    imports = byval_track_cache(&import_ops);
    if (!imports)
        BYVAL_LOG_ERROR("cannot allocate the event-pool import cache: by-value opens will fail");
}

static ze_result_t import_miss(ze_pfnEventPoolOpenIpcHandle_t next, ze_context_handle_t ctx,
                               ze_ipc_event_pool_handle_t handle, const byval_short_t *s,
                               const byval_self_t *self, const pool_key_t *key,
                               ze_event_pool_handle_t *pool_p)
{
    byval_record_t rec;
    byval_reg_view_t *v = NULL;
    const uint64_t *w = NULL;
    byval_reg_slot_t slot;
    ze_result_t r = byval_ze_short_entry(API_OPEN, s, handle.data, BYVAL_KIND_ZE_EVENT_POOL, &rec,
                                         &v, &w, &slot);
    if (r != ZE_RESULT_SUCCESS)
        return r;
    int fd = -1;
    r = byval_ze_resolve_as(API_OPEN, &rec, &fd);
    if (r != ZE_RESULT_SUCCESS) {
        byval_reg_view_put(v);
        return r;
    }
    ze_ipc_event_pool_handle_t local = handle;
    uint64_t fd64 = (uint64_t)fd;
    memcpy(local.data, &fd64, sizeof(fd64));
    if (byval_ze_pool_decode(handle.data, &(byval_short_t){0}) == 2)
        byval_ze_opaque_local(local.data, fd, 1); /* a plain fd for the driver */
    ze_event_pool_handle_t pool = NULL;
    uint64_t t0 = byval_stats_now_ns();
    byval_enter();
    r = next(ctx, local, &pool);
    byval_leave();
    if (byval_ze_short_imported(API_OPEN, r, fd, &rec, v, t0) != ZE_RESULT_SUCCESS)
        return r;
    pool_import_t *m = calloc(1, sizeof(*m));
    if (!m) {
        byval_reg_view_put(v);
        if (real_close) {
            byval_enter();
            real_close(pool);
            byval_leave();
        }
        return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
    }
    m->pool = pool;
    m->ctx = ctx;
    /* base.ctx stays 0: byval_imports_purge_ctx is for mappings that die
     * with their context; pools are the application's until it closes
     * them (byval_ze_pools_ctx_gone releases only closed ones). */
    byval_ze_short_fill(&m->s, handle.data, &rec, w, slot.serial, v);
    byval_import_t *out;
    byval_lru_ref_t ref;
    byval_imports_insert(imports, key, &m->s.base, &out, &ref);
    pool = ((pool_import_t *)out)->pool;
    if (byval_imports_open(imports, out, ref, POOL_TAG(pool)) < 0)
        return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
    *pool_p = pool;
    return ZE_RESULT_SUCCESS;
}

ze_result_t byval_ze_pool_open_ipc(ze_pfnEventPoolOpenIpcHandle_t next, ze_context_handle_t ctx,
                                   ze_ipc_event_pool_handle_t handle,
                                   ze_event_pool_handle_t *pool_p)
{
    byval_short_t s;
    byval_self_t self;
    if (!next)
        return ZE_RESULT_ERROR_UNINITIALIZED;
    if (!byval_init() || !byval_cfg.ze)
        return next(ctx, handle, pool_p);
    byval_exporters_poll(); /* releases dead exporters' entries when due */
    int layout = pool_p ? byval_ze_pool_decode(handle.data, &s) : 0;
    if (!layout || byval_self_get(&self) != 0) {
        BYVAL_STAT_INC(open_passthrough);
        return next(ctx, handle, pool_p);
    }
    if (layout == 2 && byval_ze_opaque_whose(&s) != 2) {
        /* opaque, of our pid namespace: the driver's own pidfd import */
        BYVAL_STAT_INC(open_passthrough);
        byval_ze_opaque_strip(handle.data);
        return next(ctx, handle, pool_p);
    }
    /* Our own handle: the fd in bytes 0-7 is valid here already. */
    if (s.pid == self.pid && s.id32 == (uint32_t)self.identity &&
        s.guard == byval_short_guard(self.boot, self.pidns)) {
        BYVAL_STAT_INC(open_passthrough);
        return next(ctx, handle, pool_p);
    }
    byval_once(&import_once, import_init);
    if (!imports)
        return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
    pool_key_t key;
    memset(&key, 0, sizeof(key));
    key.guard = s.guard;
    key.pid = s.pid;
    key.id32 = s.id32;
    key.serial = s.serial;
    key.ctx = (uintptr_t)ctx;
    unsigned long long t_open = BYVAL_LOG_T0();
    byval_lru_ref_t ref = 0;
    pool_import_t *m = (pool_import_t *)byval_ze_short_get(imports, &key, handle.data, &ref);
    BYVAL_STAT_INC(opens);
    BYVAL_STAT_INC(pool_opens);
    if (m) {
        if (byval_imports_open(imports, &m->s.base, ref, POOL_TAG(m->pool)) < 0)
            return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
        BYVAL_STAT_INC(open_hits);
        byval_log_open("event pool ", BYVAL_ROUTE_HIT, m->s.base.pid, m->s.base.bytes,
                       (void *)m->pool, t_open);
        *pool_p = m->pool;
        return ZE_RESULT_SUCCESS;
    }
    BYVAL_STAT_INC(open_misses);
    ze_result_t r = import_miss(next, ctx, handle, &s, &self, &key, pool_p);
    if (r == ZE_RESULT_SUCCESS)
        byval_log_open("event pool ", byval_fetch_route(), s.pid, 0, (void *)*pool_p, t_open);
    return r;
}

int byval_ze_pool_close_import(ze_event_pool_handle_t pool, ze_result_t *r_p)
{
    unsigned long long t_close = BYVAL_LOG_T0();
    switch (byval_imports_close(POOL_TAG(pool))) {
    case BYVAL_IMPORTS_CLOSED:
        BYVAL_STAT_INC(closes);
        byval_log_close("event pool ", (void *)pool, "closed (kept until its exporter destroys it)",
                        t_close);
        *r_p = ZE_RESULT_SUCCESS;
        return 1;
    case BYVAL_IMPORTS_NOT_OPEN:
        /* Natively a second close destroys a destroyed pool; the cached
         * pool behind it must not be touched. */
        BYVAL_STAT_INC(double_closes);
        byval_log_double_close("zeEventPoolCloseIpcHandle", (void *)pool);
        *r_p = ZE_RESULT_ERROR_INVALID_ARGUMENT;
        return 1;
    default: return 0;
    }
}

ze_result_t byval_ze_pool_close_ipc(ze_pfnEventPoolCloseIpcHandle_t next,
                                    ze_event_pool_handle_t pool)
{
    ze_result_t r;
    if (!next)
        return ZE_RESULT_ERROR_UNINITIALIZED;
    if (!pool || !byval_init() || !byval_cfg.ze || !byval_ze_pool_close_import(pool, &r))
        return next(pool);
    return r;
}

typedef struct ctx_of {
    byval_imports_t *home;
    ze_context_handle_t ctx;
} ctx_of_t;

static int of_ctx(void *arg, const byval_import_t *b)
{
    const ctx_of_t *c = arg;
    return b->home == c->home && ((const pool_import_t *)b)->ctx == c->ctx;
}

void byval_ze_pools_ctx_gone(ze_context_handle_t ctx)
{
    byval_imports_t *c = __atomic_load_n(&imports, __ATOMIC_ACQUIRE);
    if (!c)
        return;
    ctx_of_t arg = {c, ctx};
    size_t n = byval_imports_remove_if(of_ctx, &arg);
    if (n)
        BYVAL_LOG_DEBUG("zeContextDestroy(%p): released %zu closed event pool%s of it first",
                        (void *)ctx, n, n == 1 ? "" : "s");
}
