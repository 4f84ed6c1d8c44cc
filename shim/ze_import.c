/* SPDX-License-Identifier: MIT */
/*
 * ze_import.c - the Level Zero import backends (cache/imports.h):
 *  - memory handles with a record (bytes 17-63), keyed by exporter,
 *    allocation id, flags, pool offset, context and device;
 *  - opaque-layout memory handles and event pools with a short record
 *    (ze_handle.c): it names an entry of the exporter's registry, which
 *    gives the fd and the liveness, keyed by that entry, context (and
 *    flags, pool offset, device);
 * zexMemOpenIpcHandles, and zeContextDestroy, whose mappings are
 * released first. A miss writes the fetched local fd into a copy of the
 * handle for the driver's import.
 * An event pool's open pointer is its handle tagged with bit 63 (no
 * user-space address has it); pools do not die with their context (its
 * destroy releases the closed ones; open ones are the application's).
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/config.h"
#include "cache/exporters.h"
#include "cache/imports.h"
#include "cache/init.h"
#include "cache/log.h"
#include "cache/stats.h"
#include "cache/transport.h"
#include "handles/registry_view.h"
#include "shim/ze.h"

#define POOL_TAG (UINT64_C(1) << 63)
#define HANDLE_LEN ZE_MAX_IPC_HANDLE_SIZE

typedef struct ze_import {
    byval_import_t base;
    uint8_t handle[HANDLE_LEN]; /* as opened: a hit must match it from off */
    unsigned off;               /* memory: the record; short records: all */
    void *ptr;                  /* the mapping, or the event pool */
    ze_context_handle_t ctx;
} ze_import_t;

/* An open: what the flow's callbacks are given. */
typedef struct ze_req {
    ze_context_handle_t ctx;
    ze_device_handle_t dev;
    const uint8_t *handle;
    ze_ipc_memory_flags_t flags;
    ze_pfnMemOpenIpcHandle_t mem;        /* a memory open's next */
    ze_pfnEventPoolOpenIpcHandle_t pool; /* an event pool open's */
    byval_record_t rec;
    byval_short_t s;
    int layout; /* an event pool's: 2 opaque */
} ze_req_t;

/* Memory: pidns, pid, identity, allocation id | flags << 48; short
 * records: guard, pid, id32 << 32 | serial, flags. */
typedef struct ze_key {
    uint32_t a, b;
    uint64_t c, d;
    uint64_t pool_offset; /* driver bytes 8-15 (memory) */
    uintptr_t ctx, dev;
} ze_key_t;

static void *close_fns[2]; /* the loader's zeMemCloseIpcHandle, zeEventPoolCloseIpcHandle */

/* Give the mapping (addr set) or the event pool back to the driver. */
static void ze_release(byval_import_t *b)
{
    static const char *const names[2] = {"zeMemCloseIpcHandle", "zeEventPoolCloseIpcHandle"};
    ze_import_t *m = (ze_import_t *)b;
    int pool = !b->addr;
    void *fn = __atomic_load_n(&close_fns[pool], __ATOMIC_ACQUIRE);
    if (!fn)
        __atomic_store_n(&close_fns[pool], fn = byval_ze_sym(names[pool]), __ATOMIC_RELEASE);
    if (!fn || __atomic_load_n(&b->dead, __ATOMIC_RELAXED))
        return;
    byval_enter();
    ze_result_t r = pool ? ((ze_pfnEventPoolCloseIpcHandle_t)fn)(m->ptr)
                         : ((ze_pfnMemCloseIpcHandle_t)fn)(m->ctx, m->ptr);
    byval_leave();
    if (r != ZE_RESULT_SUCCESS)
        BYVAL_LOG_WARN("%s(%p) on release returned 0x%x", names[pool], m->ptr, (unsigned)r);
}

/* The mapping, or the event pool tagged (its addr is 0). */
static uintptr_t ze_serves(const byval_import_t *b, const void *req)
{
    const ze_import_t *m = (const ze_import_t *)b;
    if (memcmp(m->handle + m->off, ((const ze_req_t *)req)->handle + m->off, HANDLE_LEN - m->off))
        return 0;
    return b->addr ? b->addr : (uintptr_t)m->ptr | POOL_TAG;
}

static int ze_same(const byval_import_t *a, const byval_import_t *b)
{
    return ze_serves(a, &(ze_req_t){.handle = ((const ze_import_t *)b)->handle}) != 0;
}

/* At the first close: where the exporter says whether it still lives. */
static void mem_track(byval_import_t *b)
{
    byval_record_t rec;
    if (byval_wire_decode(((ze_import_t *)b)->handle + BYVAL_ZE_RECORD_OFF, BYVAL_WIRE_LEN, &rec) ==
        BYVAL_WIRE_OK)
        byval_track_record(b, &rec, BYVAL_TRACK_KEPT,
                           BYVAL_REG_KEY(BYVAL_KIND_ZE_MEM, rec.alloc_id), rec.fd_ino);
}

/* A memory miss's record, checked (it was parsed without its checksum),
 * and not our own (a hit equals a record that was both). */
static int mem_check(void *req)
{
    ze_req_t *q = req;
    return byval_ze_foreign(q->handle, &q->rec) ? 0 : BYVAL_IMPORT_PASS;
}

static int mem_import(void *req, byval_import_t *had, byval_import_t **m_p);
static int short_import(void *req, byval_import_t *had, byval_import_t **m_p);

#define ZE_BACKEND(nm, api_, close_, what_, kept_)                                           \
    .name = nm, .api = api_, .close_api = close_, .what = what_, .kept = kept_,              \
    .key_len = sizeof(ze_key_t), .nomem = ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY,                \
    .invalid = ZE_RESULT_ERROR_INVALID_ARGUMENT, .serves = ze_serves, .release = ze_release, \
    .same = ze_same
#define MEM_KEPT "closed (the mapping stays cached until its exporter frees it)"

static byval_backend_import_t mem = {
    ZE_BACKEND("ze import", "zeMemOpenIpcHandle", "zeMemCloseIpcHandle", "", MEM_KEPT),
    .check = mem_check,
    .import = mem_import,
    .track = mem_track,
};
/* Tracked at import already: the registry entry the record names. */
static byval_backend_import_t opaque = {
    ZE_BACKEND("ze opaque import", "zeMemOpenIpcHandle", "zeMemCloseIpcHandle", "", MEM_KEPT),
    .import = short_import,
};
static byval_backend_import_t pool = {
    ZE_BACKEND("ze pool import", "zeEventPoolOpenIpcHandle", "zeEventPoolCloseIpcHandle",
               "event pool ", "closed (kept until its exporter destroys it)"),
    .import = short_import,
};

ze_result_t byval_ze_resolve_as(const char *api, const byval_record_t *rec, int *fd_p)
{
    ze_result_t r = byval_import_fetch(&mem, api, rec, fd_p, NULL);
    if (r != ZE_RESULT_SUCCESS)
        BYVAL_STAT_INC(open_errors);
    return r;
}

int byval_ze_foreign(const void *handle64, byval_record_t *rec_p)
{
    byval_self_t self; /* our own handles are the driver's business */
    return byval_ze_read(handle64, rec_p, 1) && rec_p->kind == BYVAL_KIND_ZE_MEM &&
        byval_self_get(&self) == 0 &&
        !(rec_p->pid == self.pid && rec_p->pidns == self.pidns && rec_p->identity == self.identity);
}

/* A refused open, counted and logged once per kind of failure. */
#define REFUSE(b, st, ...) \
    (BYVAL_STAT_INC(open_errors), byval_import_refuse((b), (b)->api, (st), __VA_ARGS__))

/* The driver's import of rec's exporter's fd, written into a copy of the
 * handle (opaque: as a plain fd); *out the mapping or the pool. */
static ze_result_t driver_import(byval_backend_import_t *b, ze_req_t *q, int opaque_layout,
                                 void **out)
{
    int fd = -1;
    ze_result_t r = byval_ze_resolve_as(b->api, &q->rec, &fd);
    if (r != ZE_RESULT_SUCCESS)
        return r;
    union {
        ze_ipc_mem_handle_t mem;
        ze_ipc_event_pool_handle_t pool;
    } local;
    uint64_t fd64 = (uint64_t)fd;
    memcpy(local.mem.data, q->handle, HANDLE_LEN);
    memcpy(local.mem.data, &fd64, sizeof(fd64));
    if (opaque_layout)
        byval_ze_opaque_local(local.mem.data, fd, q->pool != NULL);
    uint64_t t0 = byval_stats_now_ns();
    byval_enter();
    r = q->pool ? q->pool(q->ctx, local.pool, (ze_event_pool_handle_t *)out)
                : q->mem(q->ctx, q->dev, local.mem, q->flags, out);
    byval_leave();
    BYVAL_STAT_ADD(miss_import_ns, byval_stats_now_ns() - t0);
    close(fd); /* the driver holds its own reference once open */
    if (r != ZE_RESULT_SUCCESS)
        REFUSE(b, BYVAL_E_SYS, "the driver refused fd %d (pid %u fd %u): 0x%x", fd, q->rec.pid,
               q->rec.fd, (unsigned)r);
    return r;
}

/* The mapping of what the driver opened (p), tied to registry entry
 * (w, serial) of view v when known (its reference goes with it). */
static ze_result_t ze_new(byval_backend_import_t *b, const ze_req_t *q, void *p, const uint64_t *w,
                          uint64_t serial, void *v, byval_import_t **m_p)
{
    ze_import_t *m = calloc(1, sizeof(*m));
    if (!m) {
        byval_reg_view_put(v);
        ze_import_t tmp = {.base.addr = q->pool ? 0 : (uintptr_t)p, .ptr = p, .ctx = q->ctx};
        b->release(&tmp.base);
        return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
    }
    memcpy(m->handle, q->handle, HANDLE_LEN);
    m->off = b == &mem ? BYVAL_ZE_RECORD_OFF : 0;
    m->ptr = p;
    m->ctx = q->ctx;
    m->base = (byval_import_t){.bytes = q->rec.size,
                               .ctx = q->pool ? 0 : (uintptr_t)q->ctx, /* memory dies with it */
                               .addr = q->pool ? 0 : (uintptr_t)p,
                               .pidns = q->rec.pidns,
                               .pid = q->rec.pid,
                               .identity = q->rec.identity};
    if (v)
        byval_import_track(&m->base, w, serial, v);
    *m_p = &m->base;
    return ZE_RESULT_SUCCESS;
}

static int mem_import(void *req, byval_import_t *had, byval_import_t **m_p)
{
    void *p = NULL;
    ze_result_t r = driver_import(&mem, req, 0, &p);
    return r != ZE_RESULT_SUCCESS ? (int)r : (int)ze_new(&mem, req, p, NULL, 0, NULL, m_p);
}

/* The exporter's live registry entry the short record names for the fd
 * in bytes 0-7: *v_p (a view reference), *w_p, *slot, and in q->rec the
 * record to fetch it. Else the refusal's code, logged. */
static ze_result_t short_entry(byval_backend_import_t *b, ze_req_t *q, byval_reg_view_t **v_p,
                               const uint64_t **w_p, byval_reg_slot_t *slot)
{
    char msg[512] = "";
    int pidfd = -1;
    byval_self_t self;
    uint8_t kind = q->pool ? BYVAL_KIND_ZE_EVENT_POOL : BYVAL_KIND_ZE_MEM;
    if (byval_self_get(&self) != 0)
        return ZE_RESULT_ERROR_UNKNOWN;
    byval_status_t st = byval_reg_attach_short(&q->s, &self, byval_cfg.transport, v_p, &q->rec,
                                               &pidfd, msg, sizeof(msg));
    if (st != BYVAL_OK)
        return REFUSE(b, st, "%s", msg);
    if (pidfd >= 0) /* verified for this exporter: kept for the fetch */
        byval_fetch_done(&q->rec, pidfd);
    uint64_t fd = byval_ze_handle_fd(q->handle);
    *w_p = byval_reg_find_serial(*v_p, q->s.serial, slot);
    if (!*w_p || slot->key >> 56 != kind || slot->fd != fd) {
        byval_reg_view_put(*v_p);
        *v_p = NULL;
        return REFUSE(b, BYVAL_E_BADFD,
                      "pid %u exports no %s under serial %u with fd %llu (%s, or the handle was "
                      "altered)",
                      q->s.pid, q->pool ? "event pool" : "memory", q->s.serial,
                      (unsigned long long)fd, q->pool ? "destroyed" : "freed");
    }
    q->rec.kind = kind;
    q->rec.fd = slot->fd;
    q->rec.fd_ino = slot->ino;
    q->rec.size = slot->size;
    q->rec.alloc_id = slot->key & BYVAL_WIRE_MAX_ALLOC_ID;
    return ZE_RESULT_SUCCESS;
}

/* The exporter's live registry entry the short record names gives the fd. */
static int short_import(void *req, byval_import_t *had, byval_import_t **m_p)
{
    ze_req_t *q = req;
    byval_backend_import_t *b = q->pool ? &pool : &opaque;
    byval_reg_view_t *v = NULL;
    const uint64_t *w = NULL;
    byval_reg_slot_t slot;
    void *p = NULL;
    ze_result_t r = short_entry(b, q, &v, &w, &slot);
    if (r == ZE_RESULT_SUCCESS &&
        (r = driver_import(b, q, !q->pool || q->layout == 2, &p)) != ZE_RESULT_SUCCESS)
        byval_reg_view_put(v);
    return r != ZE_RESULT_SUCCESS ? (int)r : (int)ze_new(b, q, p, w, slot.serial, v, m_p);
}

static int ze_open(byval_backend_import_t *b, ze_req_t *q, uint32_t k0, uint32_t k1, uint64_t k2,
                   uint64_t k3, uintptr_t *out)
{
    ze_key_t key = {k0, k1, k2, k3, 0, (uintptr_t)q->ctx, (uintptr_t)q->dev};
    if (!q->pool)
        memcpy(&key.pool_offset, q->handle + 8, sizeof(key.pool_offset));
    return byval_import_open(b, &key, q, out);
}

ze_result_t byval_ze_open_ipc(ze_pfnMemOpenIpcHandle_t next, ze_context_handle_t ctx,
                              ze_device_handle_t dev, ze_ipc_mem_handle_t handle,
                              ze_ipc_memory_flags_t flags, void **pptr)
{
    if (!next)
        return ZE_RESULT_ERROR_UNINITIALIZED;
    if (!byval_init() || !byval_cfg.ze)
        return next(ctx, dev, handle, flags, pptr); /* disabled, or our own inner call */
    byval_exporters_poll(); /* cheap when nothing is due: releases dead exporters' entries */
    ze_req_t q;             /* rec and s are filled by the parse below */
    q.ctx = ctx, q.dev = dev, q.handle = (uint8_t *)handle.data, q.flags = flags;
    q.mem = next, q.pool = NULL;
    uintptr_t out = 0;
    int r = BYVAL_IMPORT_PASS;
    /* Parsed without the checksum: a hit equals a checked record, a miss
     * checks it, and that it is not our own (the driver's: mem_check). */
    if (pptr && byval_ze_opaque_decode(handle.data, &q.s)) {
        if (byval_ze_opaque_whose(&q.s) == 2)
            r = ze_open(&opaque, &q, q.s.guard, q.s.pid, (uint64_t)q.s.id32 << 32 | q.s.serial,
                        flags, &out);
        else /* ours, or our pid namespace's: the driver's own pidfd import */
            byval_ze_opaque_strip(handle.data);
    } else if (pptr && byval_ze_read(handle.data, &q.rec, 0) && q.rec.kind == BYVAL_KIND_ZE_MEM) {
        uint64_t alloc_flags = (q.rec.alloc_id & BYVAL_WIRE_MAX_ALLOC_ID) | (uint64_t)flags << 48;
        r = ze_open(&mem, &q, q.rec.pidns, q.rec.pid, q.rec.identity, alloc_flags, &out);
    }
    if (r == BYVAL_IMPORT_PASS) {
        BYVAL_STAT_INC(open_passthrough);
        return next(ctx, dev, handle, flags, pptr);
    }
    if (r == ZE_RESULT_SUCCESS)
        *pptr = (void *)out;
    return (ze_result_t)r;
}

ze_result_t byval_ze_close_ipc(ze_pfnMemCloseIpcHandle_t next, ze_context_handle_t ctx,
                               const void *ptr)
{
    if (!next)
        return ZE_RESULT_ERROR_UNINITIALIZED;
    if (!byval_init() || !byval_cfg.ze)
        return next(ctx, ptr);
    int r = byval_import_close(&mem, (uintptr_t)ptr, ptr);
    return r == BYVAL_IMPORT_PASS ? next(ctx, ptr) : (ze_result_t)r;
}

ze_result_t byval_ze_pool_open_ipc(ze_pfnEventPoolOpenIpcHandle_t next, ze_context_handle_t ctx,
                                   ze_ipc_event_pool_handle_t handle,
                                   ze_event_pool_handle_t *pool_p)
{
    byval_self_t self;
    if (!next)
        return ZE_RESULT_ERROR_UNINITIALIZED;
    if (!byval_init() || !byval_cfg.ze)
        return next(ctx, handle, pool_p);
    byval_exporters_poll();
    ze_req_t q = {.ctx = ctx, .handle = (uint8_t *)handle.data, .pool = next};
    q.layout = pool_p ? byval_ze_pool_decode(handle.data, &q.s) : 0;
    uintptr_t out = 0;
    int r = BYVAL_IMPORT_PASS;
    if (!q.layout || byval_self_get(&self) != 0)
        ;
    else if (q.layout == 2 && byval_ze_opaque_whose(&q.s) != 2)
        byval_ze_opaque_strip(handle.data);      /* our pid namespace's: the driver's import */
    else if (byval_ze_opaque_whose(&q.s) != 0) { /* not our own */
        BYVAL_STAT_INC(pool_opens);
        r = ze_open(&pool, &q, q.s.guard, q.s.pid, (uint64_t)q.s.id32 << 32 | q.s.serial, 0, &out);
    }
    if (r == BYVAL_IMPORT_PASS) {
        BYVAL_STAT_INC(open_passthrough);
        return next(ctx, handle, pool_p);
    }
    if (r == ZE_RESULT_SUCCESS)
        *pool_p = (ze_event_pool_handle_t)(out & ~POOL_TAG);
    return (ze_result_t)r;
}

int byval_ze_pool_close_import(ze_event_pool_handle_t p, ze_result_t *r_p)
{
    int r = byval_import_close(&pool, (uintptr_t)p | POOL_TAG, p);
    if (r == BYVAL_IMPORT_PASS)
        return 0;
    *r_p = (ze_result_t)r;
    return 1;
}

ze_result_t byval_ze_pool_close_ipc(ze_pfnEventPoolCloseIpcHandle_t next, ze_event_pool_handle_t p)
{
    ze_result_t r;
    if (!next)
        return ZE_RESULT_ERROR_UNINITIALIZED;
    if (!p || !byval_init() || !byval_cfg.ze || !byval_ze_pool_close_import(p, &r))
        return next(p);
    return r;
}

/* Intel's zexMemOpenIpcHandles: every handle's fd resolved; the rare
 * multi-handle open is not cached. */
#define ZEX_MAX_HANDLES 16

ze_result_t byval_zex_open_ipcs(byval_zex_open_handles_fn next, ze_context_handle_t ctx,
                                ze_device_handle_t dev, uint32_t count,
                                ze_ipc_mem_handle_t *handles, ze_ipc_memory_flags_t flags,
                                void **pptr)
{
    byval_self_t self;
    if (!next)
        return ZE_RESULT_ERROR_UNINITIALIZED;
    if (!handles || !count || count > ZEX_MAX_HANDLES || !byval_init() || !byval_cfg.ze ||
        byval_self_get(&self) != 0)
        return next(ctx, dev, count, handles, flags, pptr);
    ze_ipc_mem_handle_t local[ZEX_MAX_HANDLES];
    int fds[ZEX_MAX_HANDLES], ours = 0;
    ze_result_t r = ZE_RESULT_SUCCESS;
    uint32_t i;
    for (i = 0; i < count && r == ZE_RESULT_SUCCESS; i++) {
        byval_record_t rec;
        local[i] = handles[i];
        fds[i] = -1;
        if (!byval_ze_foreign(handles[i].data, &rec))
            continue;
        r = byval_ze_resolve_as(mem.api, &rec, &fds[i]);
        uint64_t fd64 = (uint64_t)fds[i];
        memcpy(local[i].data, &fd64, sizeof(fd64));
        ours = 1;
    }
    if (r == ZE_RESULT_SUCCESS) {
        if (ours)
            BYVAL_STAT_INC(opens);
        else
            BYVAL_STAT_INC(open_passthrough);
        byval_enter();
        r = next(ctx, dev, count, local, flags, pptr);
        byval_leave();
    }
    while (i--)
        if (fds[i] >= 0)
            close(fds[i]);
    return r;
}

static int pool_of_ctx(void *ctx, const byval_import_t *b)
{
    return b->home == pool.cache && ((const ze_import_t *)b)->ctx == ctx;
}

ze_result_t byval_ze_context_destroy(ze_pfnContextDestroy_t next, ze_context_handle_t ctx)
{
    if (!next)
        return ZE_RESULT_ERROR_UNINITIALIZED;
    if (byval_init() && byval_cfg.ze) {
        byval_ze_exports_ctx_gone(ctx);
        byval_ze_pool_exports_ctx_gone(ctx);
        /* Closed imported pools of ctx go; open ones stay the application's. */
        size_t n = __atomic_load_n(&pool.cache, __ATOMIC_ACQUIRE)
            ? byval_imports_remove_if(pool_of_ctx, ctx)
            : 0;
        /* The driver would close our mappings of ctx with it: closing
         * them later with a dead (or reused) handle must not happen. */
        size_t k = byval_imports_purge((uintptr_t)ctx, 0);
        if (n || k)
            BYVAL_LOG_DEBUG("zeContextDestroy(%p): released %zu mapping%s and %zu closed event "
                            "pool%s of it first",
                            (void *)ctx, k, k == 1 ? "" : "s", n, n == 1 ? "" : "s");
    }
    return next(ctx);
}
