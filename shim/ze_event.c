/* SPDX-License-Identifier: MIT */
/*
 * ze_event.c - the Level Zero event-pool export backend: the handle's
 * short record (classic @40, opaque @30) names this process's registry
 * entry of the pool's fd (doc/level-zero-short-records.md says why). The
 * export takes a driver reference of its own at its first get, so no put
 * of the program's closes a published fd, and ends at zeEventPoolDestroy
 * or zeContextDestroy of the context the pool was created in.
 */
#include <stdlib.h>
#include <string.h>

#include "cache/config.h"
#include "cache/exports.h"
#include "cache/init.h"
#include "cache/locks.h"
#include "cache/log.h"
#include "cache/stats.h"
#include "cache/transport.h"
#include "handles/registry.h"
#include "handles/resolve.h"
#include "shim/ze.h"

/* A get: the pool, the driver's fd and its inode; the serial handed. */
typedef struct pool_call {
    ze_event_pool_handle_t pool;
    int fd;
    uint32_t ino;
    uint64_t serial;
} pool_call_t;

static byval_exports_t *pools;
static byval_once_t pools_once = BYVAL_ONCE_INIT;
static uint64_t next_id;

/* The context of each IPC pool created (pool -> context), bounded. */
#define POOL_CTX_MAX 4096
static byval_lru_t *pool_ctx;
static byval_once_t pool_ctx_once = BYVAL_ONCE_INIT;

static void pool_ctx_init(void)
{
    byval_lru_t *m = byval_lru_create(POOL_CTX_MAX, sizeof(ze_event_pool_handle_t), NULL, NULL);
    __atomic_store_n(&pool_ctx, m, __ATOMIC_RELEASE);
}

/* The same fd (fd, inode) as published: a put may have closed the old. */
static int same_fd(const byval_export_t *e, const void *arg)
{
    const pool_call_t *c = arg;
    return e->items[0].fd == c->fd && e->items[0].ino == c->ino;
}

static byval_export_t *pool_make(void *arg)
{
    pool_call_t *c = arg;
    int64_t size = byval_fd_size(c->fd);
    void *ctx = NULL; /* unknown: the export ends at the pool's destroy alone */
    byval_export_t *e = byval_export_alloc(sizeof(*e), 1);
    if (!e)
        return NULL;
    if (!byval_lru_get(__atomic_load_n(&pool_ctx, __ATOMIC_ACQUIRE), &c->pool, 0, &ctx))
        ctx = NULL;
    e->ctx = (uintptr_t)ctx;
    uint64_t id = __atomic_add_fetch(&next_id, 1, __ATOMIC_RELAXED);
    e->items[0] = BYVAL_EXPORT_ITEM(BYVAL_REG_KEY(BYVAL_KIND_ZE_EVENT_POOL, id), c->fd, c->ino,
                                    size > 0 ? (uint64_t)size : 0,
                                    BYVAL_EXPORT_OFFER | BYVAL_EXPORT_RESCUE | BYVAL_EXPORT_OPEN);
    return e;
}

static void pool_hand(const byval_export_t *e, void *arg)
{
    ((pool_call_t *)arg)->serial = e->items[0].serial;
}

/* The fd is the pool's, closed with it. A made export not kept (the table
 * full, the pool destroyed meanwhile) is made again, as a first get. */
static const byval_backend_export_t pool_ops = {
    "ze pool export", sizeof(ze_event_pool_handle_t), 3, same_fd, pool_make, NULL, pool_hand, NULL};

static void pools_init(void)
{
    /* Read without the once by zeEventPoolDestroy: published with a release. */
    __atomic_store_n(&pools, byval_export_table(&pool_ops), __ATOMIC_RELEASE);
}

int byval_ze_pool_decode(const void *handle64, byval_short_t *s_p)
{
    const uint8_t *h = handle64;
    if (byval_short_decode(h + BYVAL_ZE_POOL_RECORD_OFF, h, BYVAL_ZE_POOL_DRIVER_LEN, s_p) ==
        BYVAL_WIRE_OK)
        return 1;
    return byval_ze_opaque_decode(h, s_p) ? 2 : 0;
}

ze_result_t byval_ze_pool_create(ze_pfnEventPoolCreate_t next, ze_context_handle_t ctx,
                                 const ze_event_pool_desc_t *desc, uint32_t ndevices,
                                 ze_device_handle_t *devices, ze_event_pool_handle_t *pool_p)
{
    if (!next)
        return ZE_RESULT_ERROR_UNINITIALIZED;
    ze_result_t r = next(ctx, desc, ndevices, devices, pool_p);
    if (r != ZE_RESULT_SUCCESS || !desc || !(desc->flags & ZE_EVENT_POOL_FLAG_IPC) || !pool_p ||
        !*pool_p || !byval_init() || !byval_cfg.ze)
        return r;
    byval_once(&pool_ctx_once, pool_ctx_init);
    ze_event_pool_handle_t pool = *pool_p;
    void *old;
    byval_lru_remove(pool_ctx, &pool); /* a destroyed pool's handle value, reused */
    byval_lru_insert(pool_ctx, &pool, ctx, 0, &old);
    return r;
}

ze_result_t byval_ze_pool_get_ipc(ze_pfnEventPoolGetIpcHandle_t next, ze_event_pool_handle_t pool,
                                  ze_ipc_event_pool_handle_t *handle)
{
    if (!next)
        return ZE_RESULT_ERROR_UNINITIALIZED;
    if (!handle || !pool || !byval_init() || !byval_cfg.ze)
        return next(pool, handle);
    uint8_t *h = (uint8_t *)handle->data;
    byval_ptracer_allow();
    byval_ze_pattern(h, BYVAL_ZE_POOL_RECORD_OFF, 1);
    byval_enter();
    ze_result_t r = next(pool, handle);
    byval_leave();
    int layout = r == ZE_RESULT_SUCCESS ? byval_ze_layout(h, 1) : -1, fresh = 0;
    uint64_t fd = byval_ze_handle_fd(h);
    pool_call_t c = {pool, (int)fd, 0, 0};
    byval_self_t self;
    if (layout < 0)
        return r;
    byval_once(&pools_once, pools_init);
    if (pools && fd <= INT32_MAX && byval_self_get(&self) == 0) {
        c.ino = (uint32_t)byval_fd_inode(c.fd);
        fresh = byval_exports_obtain(pools, &pool, &c) == 0;
    }
    if (byval_ze_short_write(h, layout ? BYVAL_ZE_OPAQUE_OFF : BYVAL_ZE_POOL_RECORD_OFF,
                             c.serial) != 0) {
        static int warned;
        if (layout) { /* opaque: as the driver wrote it */
            byval_ze_pass(h, 1);
            return r;
        }
        BYVAL_STAT_INC(export_passthrough);
        if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
            BYVAL_LOG_WARN("cannot publish event pool %p for by-value handles (registry "
                           "unavailable or full): its handle passes through",
                           (void *)pool);
        memset(h + BYVAL_ZE_POOL_RECORD_OFF, 0, ZE_MAX_IPC_HANDLE_SIZE - BYVAL_ZE_POOL_RECORD_OFF);
        return r;
    }
    if (fresh) { /* the export's own reference */
        ze_ipc_event_pool_handle_t own;
        byval_enter();
        ze_result_t r2 = next(pool, &own);
        byval_leave();
        if (r2 != ZE_RESULT_SUCCESS)
            BYVAL_LOG_DEBUG("event pool %p: the export's own get returned 0x%x", (void *)pool,
                            (unsigned)r2);
    }
    BYVAL_STAT_INC(pool_exports);
    byval_log_export("event pool ", 0, (void *)pool, -1);
    return r;
}

ze_result_t byval_ze_pool_put_ipc(byval_ze_pool_put_fn next, ze_context_handle_t ctx,
                                  ze_ipc_event_pool_handle_t handle)
{
    /* The driver reads its own bytes; the export holds its own reference. */
    if (!next)
        return ZE_RESULT_ERROR_UNSUPPORTED_FEATURE;
    return next(ctx, handle);
}

ze_result_t byval_ze_pool_destroy(ze_pfnEventPoolDestroy_t next, ze_event_pool_handle_t pool)
{
    if (!next)
        return ZE_RESULT_ERROR_UNINITIALIZED;
    if (!pool || !byval_init() || !byval_cfg.ze)
        return next(pool);
    ze_result_t r;
    if (byval_ze_pool_close_import(pool, &r))
        return r;
    byval_lru_remove(__atomic_load_n(&pool_ctx, __ATOMIC_ACQUIRE), &pool);
    byval_exports_t *x = __atomic_load_n(&pools, __ATOMIC_ACQUIRE);
    if (byval_exports_live(x) && byval_exports_end(x, &pool)) { /* before the driver's close */
        BYVAL_STAT_INC(frees);
        byval_log_export("event pool ", 1, (void *)pool, -1);
    }
    return next(pool);
}

static int created_in(void *arg, const void *key, void *value)
{
    return value == arg;
}

void byval_ze_pool_exports_ctx_gone(ze_context_handle_t ctx)
{
    byval_lru_remove_if(__atomic_load_n(&pool_ctx, __ATOMIC_ACQUIRE), created_in, ctx);
    size_t n = byval_exports_end_ctx(__atomic_load_n(&pools, __ATOMIC_ACQUIRE), (uintptr_t)ctx);
    if (n)
        BYVAL_LOG_DEBUG("zeContextDestroy(%p): ended %zu event-pool export%s of it first",
                        (void *)ctx, n, n == 1 ? "" : "s");
}
