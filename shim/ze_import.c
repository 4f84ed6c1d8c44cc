/* SPDX-License-Identifier: MIT */
/*
 * ze_import.c - zeMemOpenIpcHandle / zeMemCloseIpcHandle for by-value
 * handles, and what zeContextDestroy must release first.
 *
 * A miss resolves the exporter's fd with pidfd_open + pidfd_getfd
 * (handles/resolve.c), writes the local fd into bytes 0-7 of a copy of the
 * handle, lets the driver import it and closes the duplicate. The mapping
 * is kept by the import lifecycle core (cache/imports.h) keyed by (pid
 * namespace, pid, identity, allocation id, flags, pool offset, local
 * context, local device): a re-open is a lookup. Close drops an open; a
 * closed mapping is released when the exporter frees the allocation or
 * exits, the context is destroyed, or a budget needs room (imports.h).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/exporters.h"
#include "cache/locks.h"
#include "cache/imports.h"
#include "handles/registry.h"
#include "handles/resolve.h"
#include "shim/config.h"
#include "shim/init.h"
#include "shim/log.h"
#include "shim/stats.h"
#include "shim/track.h"
#include "shim/transport.h"
#include "shim/ze.h"

typedef struct ze_import_key {
    uint32_t pidns;
    uint32_t pid;
    uint64_t identity;
    uint64_t alloc_flags; /* alloc id (48 bits) | open flags << 48 */
    uint64_t pool_offset; /* driver bytes 8-15 */
    uintptr_t ctx;
    uintptr_t dev;
} ze_import_key_t;

typedef struct ze_import {
    byval_import_t base; /* the lifecycle core's part (cache/imports.h) */
    void *ptr;
    ze_context_handle_t ctx;
    /* The whole record it was opened from: a hit must match it, so a
     * forged or corrupted handle that shares the key (another host's
     * exporter, another fd, size or inode) is resolved and refused, never
     * served from the cache. */
    uint8_t rec[BYVAL_WIRE_LEN];
} ze_import_t;

static byval_imports_t *imports;
static byval_once_t import_once = BYVAL_ONCE_INIT;
static ze_pfnMemCloseIpcHandle_t close_fn; /* the loader's, found at the first release */

void byval_ze_close_mapping(ze_context_handle_t ctx, void *ptr)
{
    ze_pfnMemCloseIpcHandle_t real_close = __atomic_load_n(&close_fn, __ATOMIC_ACQUIRE);
    if (!real_close) {
        real_close = (ze_pfnMemCloseIpcHandle_t)byval_ze_sym("zeMemCloseIpcHandle");
        __atomic_store_n(&close_fn, real_close, __ATOMIC_RELEASE);
    }
    if (!real_close)
        return;
    byval_enter();
    ze_result_t r = real_close(ctx, ptr);
    byval_leave();
    if (r != ZE_RESULT_SUCCESS)
        BYVAL_LOG_WARN("zeMemCloseIpcHandle(%p) on release returned 0x%x", ptr, (unsigned)r);
}

static void ze_release(byval_import_t *b)
{
    ze_import_t *m = (ze_import_t *)b;
    if (!__atomic_load_n(&b->dead, __ATOMIC_RELAXED))
        byval_ze_close_mapping(m->ctx, m->ptr);
}

static int ze_same(const byval_import_t *a, const byval_import_t *b)
{
    return memcmp(((const ze_import_t *)a)->rec, ((const ze_import_t *)b)->rec, BYVAL_WIRE_LEN) ==
        0;
}

/* At the first close: where the exporter says whether it still lives. */
static void ze_track(byval_import_t *b)
{
    byval_record_t rec;
    if (byval_wire_decode(((ze_import_t *)b)->rec, BYVAL_WIRE_LEN, &rec) == BYVAL_WIRE_OK)
        byval_track_record(b, &rec, BYVAL_REG_KEY(BYVAL_KIND_ZE_MEM, rec.alloc_id), rec.fd_ino);
}

static byval_imports_ops_t import_ops = {
    .name = "ze import",
    .key_len = sizeof(ze_import_key_t),
    .release = ze_release,
    .same = ze_same,
    .track = ze_track,
};

static void import_init(void)
{
    imports = byval_track_cache(&import_ops);
    if (!imports)
        BYVAL_LOG_ERROR("cannot allocate the import cache: by-value opens will fail");
}

/* One error line per kind of failure and API (shim/log.h). */
static void import_log_failure_as(const char *api, byval_status_t st, const char *msg)
{
    static int seen[BYVAL_E_SYS + 2];
    byval_log_once_per_kind(seen, BYVAL_E_SYS + 2, (int)st, api, "%s", msg);
}

static void import_log_failure(byval_status_t st, const char *msg)
{
    import_log_failure_as("zeMemOpenIpcHandle", st, msg);
}

static ze_result_t status_to_ze(byval_status_t st)
{
    return st == BYVAL_E_NOFD ? ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY
                              : ZE_RESULT_ERROR_INVALID_ARGUMENT;
}

ze_result_t byval_ze_resolve(const byval_record_t *rec, int *fd_p)
{
    return byval_ze_resolve_as("zeMemOpenIpcHandle", rec, fd_p);
}

ze_result_t byval_ze_resolve_as(const char *api, const byval_record_t *rec, int *fd_p)
{
    char msg[512];
    byval_self_t self;
    int pidfd = -1;
    if (byval_self_get(&self) != 0)
        return ZE_RESULT_ERROR_UNKNOWN;
    uint64_t t0 = byval_stats_now_ns();
    byval_status_t st = byval_fetch_fd(rec, &self, fd_p, &pidfd, msg, sizeof(msg));
    byval_fetch_done(rec, pidfd);
    BYVAL_STAT_ADD(miss_fetch_ns, byval_stats_now_ns() - t0);
    if (st != BYVAL_OK) {
        BYVAL_STAT_INC(open_errors);
        import_log_failure_as(api, st, msg);
        return status_to_ze(st);
    }
    return ZE_RESULT_SUCCESS;
}

/* Resolve, import and cache. On success *pptr is open once. */
static ze_result_t import_miss(ze_pfnMemOpenIpcHandle_t next, ze_context_handle_t ctx,
                               ze_device_handle_t dev, ze_ipc_mem_handle_t handle,
                               ze_ipc_memory_flags_t flags, const byval_record_t *rec,
                               const ze_import_key_t *key, void **pptr)
{
    int fd;
    unsigned long long t_open = BYVAL_LOG_T0();
    ze_result_t rr = byval_ze_resolve(rec, &fd);
    if (rr != ZE_RESULT_SUCCESS)
        return rr;
    ze_ipc_mem_handle_t local = handle;
    uint64_t fd64 = (uint64_t)fd;
    memcpy(local.data, &fd64, sizeof(fd64));
    void *p = NULL;
    uint64_t t0 = byval_stats_now_ns();
    byval_enter();
    ze_result_t r = next(ctx, dev, local, flags, &p);
    byval_leave();
    BYVAL_STAT_ADD(miss_import_ns, byval_stats_now_ns() - t0);
    close(fd); /* the driver holds its own reference to the buffer now */
    if (r != ZE_RESULT_SUCCESS) {
        BYVAL_STAT_INC(open_errors);
        char msg[160];
        snprintf(msg, sizeof(msg), "the driver refused fd %d (pid %u fd %u): 0x%x", fd, rec->pid,
                 rec->fd, (unsigned)r);
        import_log_failure(BYVAL_E_SYS, msg);
        return r;
    }
    ze_import_t *m = calloc(1, sizeof(*m));
    if (!m) {
        byval_ze_close_mapping(ctx, p);
        return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
    }
    m->ptr = p;
    m->ctx = ctx;
    memcpy(m->rec, handle.data + BYVAL_ZE_RECORD_OFF, BYVAL_WIRE_LEN);
    m->base.bytes = rec->size;
    m->base.ctx = (uintptr_t)ctx;
    m->base.addr = (uintptr_t)p;
    m->base.pidns = rec->pidns;
    m->base.pid = rec->pid;
    m->base.identity = rec->identity;
    byval_import_t *out;
    byval_lru_ref_t ref;
    byval_imports_insert(imports, key, &m->base, &out, &ref);
    if (!ref)
        BYVAL_LOG_DEBUG("import cache full of open mappings: %p not cached",
                        ((ze_import_t *)out)->ptr);
    p = ((ze_import_t *)out)->ptr;
    if (byval_imports_open(imports, out, ref, (uintptr_t)p) < 0)
        return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
    byval_log_open("", byval_fetch_route(), rec->pid, rec->size, p, t_open);
    *pptr = p;
    return ZE_RESULT_SUCCESS;
}

ze_result_t byval_ze_open_ipc(ze_pfnMemOpenIpcHandle_t next, ze_context_handle_t ctx,
                              ze_device_handle_t dev, ze_ipc_mem_handle_t handle,
                              ze_ipc_memory_flags_t flags, void **pptr)
{
    byval_record_t rec;
    byval_self_t self;
    if (!next)
        return ZE_RESULT_ERROR_UNINITIALIZED;
    if (!byval_init() || !byval_cfg.ze)
        return next(ctx, dev, handle, flags, pptr); /* disabled, or our own inner call */
    byval_exporters_poll(); /* cheap when nothing is due: releases dead exporters' entries */
    /* Parsed without the checksum: a hit below must equal a cached record,
     * which was checked; anything else is checked before it is used. */
    byval_short_t s;
    if (pptr && byval_ze_opaque_decode(handle.data, &s)) /* an opaque one's (ze_opaque.c) */
        return byval_ze_open_opaque(next, ctx, dev, handle, flags, &s, pptr);
    if (!pptr || !byval_ze_parse(handle.data, &rec) || rec.kind != BYVAL_KIND_ZE_MEM ||
        byval_self_get(&self) != 0) {
        BYVAL_STAT_INC(open_passthrough);
        return next(ctx, dev, handle, flags, pptr);
    }
    /* Our own handle: the fd in bytes 0-7 is valid here already. */
    if (rec.pid == self.pid && rec.pidns == self.pidns && rec.identity == self.identity) {
        BYVAL_STAT_INC(open_passthrough);
        return next(ctx, dev, handle, flags, pptr);
    }
    byval_once(&import_once, import_init);
    if (!imports)
        return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;

    ze_import_key_t key;
    memset(&key, 0, sizeof(key));
    key.pidns = rec.pidns;
    key.pid = rec.pid;
    key.identity = rec.identity;
    key.alloc_flags = (rec.alloc_id & BYVAL_WIRE_MAX_ALLOC_ID) | ((uint64_t)flags << 48);
    memcpy(&key.pool_offset, handle.data + 8, sizeof(key.pool_offset));
    key.ctx = (uintptr_t)ctx;
    key.dev = (uintptr_t)dev;

    unsigned long long t_open = BYVAL_LOG_T0();
    byval_lru_ref_t ref = 0;
    ze_import_t *m = (ze_import_t *)byval_imports_get(imports, &key, &ref);
    if (m && memcmp(m->rec, handle.data + BYVAL_ZE_RECORD_OFF, BYVAL_WIRE_LEN) != 0) {
        /* Same key, another record: resolve it (and most likely refuse). */
        byval_imports_unget(imports, ref);
        m = NULL;
    }
    if (m) {
        if (byval_imports_open(imports, &m->base, ref, (uintptr_t)m->ptr) < 0)
            return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
        BYVAL_STAT_INC(opens);
        BYVAL_STAT_INC(open_hits);
        byval_log_open("", BYVAL_ROUTE_HIT, m->base.pid, m->base.bytes, m->ptr, t_open);
        *pptr = m->ptr;
        return ZE_RESULT_SUCCESS;
    }
    if (!byval_ze_decode(handle.data, &rec)) { /* bad checksum: not ours after all */
        BYVAL_STAT_INC(open_passthrough);
        return next(ctx, dev, handle, flags, pptr);
    }
    BYVAL_STAT_INC(opens);
    BYVAL_STAT_INC(open_misses);
    return import_miss(next, ctx, dev, handle, flags, &rec, &key, pptr);
}

ze_result_t byval_ze_close_ipc(ze_pfnMemCloseIpcHandle_t next, ze_context_handle_t ctx,
                               const void *ptr)
{
    if (!next)
        return ZE_RESULT_ERROR_UNINITIALIZED;
    if (!byval_init() || !byval_cfg.ze)
        return next(ctx, ptr);
    unsigned long long t_close = BYVAL_LOG_T0();
    switch (byval_imports_close((uintptr_t)ptr)) {
    case BYVAL_IMPORTS_CLOSED:
        BYVAL_STAT_INC(closes);
        byval_log_close("", ptr, "closed (the mapping stays cached until its exporter frees it)",
                        t_close);
        return ZE_RESULT_SUCCESS;
    case BYVAL_IMPORTS_NOT_OPEN:
        /* The driver would refuse a pointer that is not open; the cached
         * mapping behind it must not be touched. */
        BYVAL_STAT_INC(double_closes);
        byval_log_double_close("zeMemCloseIpcHandle", ptr);
        return ZE_RESULT_ERROR_INVALID_ARGUMENT;
    default: return next(ctx, ptr); /* not a mapping we handed out */
    }
}

ze_result_t byval_ze_context_destroy(ze_pfnContextDestroy_t next, ze_context_handle_t ctx)
{
    if (!next)
        return ZE_RESULT_ERROR_UNINITIALIZED;
    if (byval_init() && byval_cfg.ze) {
        byval_ze_exports_ctx_gone(ctx);
        byval_ze_pool_exports_ctx_gone(ctx);
        byval_ze_pools_ctx_gone(ctx);
        /* The driver would close our mappings of ctx with it; closing them
         * later with a dead context handle (or one reused by a new
         * context) is what must not happen. */
        size_t n = byval_imports_purge_ctx((uintptr_t)ctx);
        if (n)
            BYVAL_LOG_DEBUG("zeContextDestroy(%p): released %zu mapping%s of it first", (void *)ctx,
                            n, n == 1 ? "" : "s");
    }
    return next(ctx);
}
