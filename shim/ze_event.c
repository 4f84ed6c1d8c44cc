/* SPDX-License-Identifier: MIT */
/*
 * ze_event.c - zeEventPoolGetIpcHandle / zeEventPoolPutIpcHandle /
 * zeEventPoolDestroy on the exporting side.
 *
 * Why a short record. The classic IpcEventPoolData (driver 24.22 up to
 * compute-runtime's Nov 2025 layouts) is 40 bytes written whole: a dma-buf
 * fd as uint64 @0, numEvents @8, rootDeviceIndex @16, maxEventPackets @20,
 * numDevices @24, five flags @28-32, padding. Only bytes 40-63 are left as
 * the caller's buffer had them: 24 bytes, fewer than the 47-byte memory
 * record (wire.h). Squeezing that record (pid, pid namespace, boot id,
 * 64-bit identity, fd, fd inode, checksum alone are 35 bytes) would mean
 * dropping the fd's identity or the namespace guard. Instead the handle
 * carries a short record (wire.h: pid, low 32 bits of the identity, a
 * guard of host and pid namespace, the registry serial of the export,
 * a checksum over it and the driver's 40 bytes) naming an entry of this
 * process's registry (handles/registry.h), which importers already map
 * read-only and verify (header pid and full identity against a pidfd):
 * the entry holds the fd number, the fd's inode and size. Against the
 * 47-byte record the importer gets:
 *  - exporter identity against pid reuse: the same check (full identity,
 *    read on a pidfd, equal to the registry header's and to the record's
 *    low 32 bits), race-free on the pidfd;
 *  - host and pid namespace: one 32-bit guard instead of two fields, so
 *    only importers in the exporter's own pid namespace resolve it (no
 *    translation from an ancestor namespace: refused with that reason);
 *  - fd number and fd identity: from the live registry entry, the number
 *    also checked against the driver's bytes 0-3, the inode and size
 *    against the duplicate, as for memory;
 *  - checksum: over the driver's bytes too, so a handle whose fd bytes the
 *    program replaced (SCM_RIGHTS) goes to the driver unchanged;
 *  - liveness, which the 47-byte record lacks: a destroyed pool's entry is
 *    gone, so its handle is refused instead of importing whatever object
 *    the fd number names by then.
 * What it costs: the first open of an exporter's pool attaches its
 * registry (once per exporter, shared with the memory imports' tracking).
 *
 * The pool's fd lives as long as the pool in classic drivers (the
 * driver's peekInternalHandle); drivers that count references (26.31 on)
 * may close it at the last put. So an export (cache/exports.h) starts at
 * the first get, which takes one more reference of the driver's for
 * itself (a second get; classic drivers ignore it): no put of the
 * program's can close a published fd. The export ends at
 * zeEventPoolDestroy, everything naming its fd withdrawn before the
 * driver closes it, which also wakes importers to release their closed
 * imports of it. The program's gets and puts go to the driver as they
 * come (return codes as natively); a get that finds another fd than the
 * one published starts a new export.
 *
 * The export also ends at zeContextDestroy of the pool's context: a
 * driver may take the pool and its fd with the context (destroying a
 * context with live pools is the program's bug, but its export ends
 * there). zeEventPoolGetIpcHandle names no context, so zeEventPoolCreate
 * of an IPC pool remembers its context (a bounded memo: a pool it forgot
 * is exported with none, and ends at its destroy alone).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/locks.h"
#include "cache/exports.h"
#include "handles/registry.h"
#include "handles/resolve.h"
#include "handles/wire.h"
#include "shim/config.h"
#include "shim/init.h"
#include "shim/log.h"
#include "shim/stats.h"
#include "cache/transport.h"
#include "shim/ze.h"
#include "shim/ze_short.h"

typedef struct pool_export {
    byval_export_t core; /* first: cache/exports.h */
    byval_export_item_t item;
    ze_event_pool_handle_t pool;
} pool_export_t;

static byval_exports_t *pools;
static byval_once_t pools_once = BYVAL_ONCE_INIT;
static uint64_t next_id;

/* The context of each IPC pool created (key: the pool; value: its
 * context), for the export's context. */
#define POOL_CTX_MAX 4096
static byval_lru_t *pool_ctx;
static byval_once_t pool_ctx_once = BYVAL_ONCE_INIT;

static void pool_ctx_init(void)
{
    byval_lru_t *m = byval_lru_create(POOL_CTX_MAX, sizeof(ze_event_pool_handle_t), NULL, NULL);
    __atomic_store_n(&pool_ctx, m, __ATOMIC_RELEASE);
}

/* The context pool was created in, or NULL when unknown. */
static ze_context_handle_t ctx_of(ze_event_pool_handle_t pool)
{
    void *ctx = NULL;
    byval_lru_t *m = __atomic_load_n(&pool_ctx, __ATOMIC_ACQUIRE);
    if (!m || !byval_lru_get(m, &pool, 0, &ctx))
        return NULL;
    return ctx;
}

/* Withdrawn already: the driver's fd is the pool's, closed with it. */
static void pool_end(byval_export_t *core)
{
    free(core);
}

static const byval_exports_ops_t pool_ops = {"ze pool export", sizeof(ze_event_pool_handle_t),
                                             pool_end};

static void pools_init(void)
{
    /* Read without the once by zeEventPoolDestroy: published with a release. */
    __atomic_store_n(&pools, byval_export_table(&pool_ops), __ATOMIC_RELEASE);
}

static uint8_t pattern_byte(size_t i)
{
    return (uint8_t)(0x5Au ^ (i * 37u));
}

static void pattern_fill(uint8_t *h)
{
    for (size_t i = BYVAL_ZE_POOL_RECORD_OFF; i < ZE_MAX_IPC_HANDLE_SIZE; i++)
        h[i] = pattern_byte(i);
}

static int pattern_intact(const uint8_t *h)
{
    for (size_t i = BYVAL_ZE_POOL_RECORD_OFF; i < ZE_MAX_IPC_HANDLE_SIZE; i++)
        if (h[i] != pattern_byte(i))
            return 0;
    return 1;
}

/* IpcOpaqueEventPoolData: fd @0, its copy @8, exporter getpid() @20. */
static int layout_is_opaque(const uint8_t *h)
{
    uint64_t fd0, fd8;
    uint32_t pid;
    memcpy(&fd0, h, 8);
    memcpy(&fd8, h + 8, 8);
    memcpy(&pid, h + 20, 4);
    return fd0 == fd8 && pid == (uint32_t)getpid();
}

int byval_ze_pool_decode(const void *handle64, byval_short_t *s_p)
{
    const uint8_t *h = handle64;
    if (byval_short_decode(h + BYVAL_ZE_POOL_RECORD_OFF, h, BYVAL_ZE_POOL_DRIVER_LEN, s_p) ==
        BYVAL_WIRE_OK)
        return 1;
    return byval_ze_opaque_decode(h, s_p) ? 2 : 0;
}

/* The registry serial of pool's export of fd, starting a new export
 * (*fresh_p set) when there is none or the driver handed out another fd
 * than the one published. 0: not published (registry full or
 * unavailable). */
static uint64_t publish(ze_event_pool_handle_t pool, uint32_t fd, int *fresh_p)
{
    uint32_t ino = (uint32_t)byval_fd_inode((int)fd);
    byval_once(&pools_once, pools_init);
    for (int tries = 0; pools && tries < 3; tries++) {
        byval_lru_ref_t ref;
        pool_export_t *e = (pool_export_t *)byval_exports_get(pools, &pool, &ref);
        if (e && e->item.fd == (int)fd && e->item.ino == ino) {
            uint64_t serial = e->item.serial;
            byval_exports_unget(pools, ref);
            return serial;
        }
        if (e) { /* the driver's fd changed (a put closed it): a new export */
            byval_exports_unget(pools, ref);
            byval_exports_end(pools, &pool);
            continue;
        }
        int64_t size = byval_fd_size((int)fd);
        if (!(e = calloc(1, sizeof(*e))))
            return 0;
        e->pool = pool;
        e->core.ctx = (uintptr_t)ctx_of(pool);
        e->item = (byval_export_item_t){
            .key = BYVAL_REG_KEY(BYVAL_KIND_ZE_EVENT_POOL,
                                 __atomic_add_fetch(&next_id, 1, __ATOMIC_RELAXED)),
            .fd = (int)fd,
            .ino = ino,
            .size = size > 0 ? (uint64_t)size : 0,
            .flags = BYVAL_EXPORT_OFFER | BYVAL_EXPORT_RESCUE | BYVAL_EXPORT_OPEN,
        };
        e->core.nitems = 1;
        e->core.items = &e->item;
        if (byval_exports_start(pools, &e->core) != 0) {
            byval_exports_discard(&e->core);
            return 0;
        }
        byval_export_t *other;
        if (byval_exports_insert(pools, &pool, &e->core, &other, &ref) == 0) {
            *fresh_p = 1;
            uint64_t serial = e->item.serial;
            byval_exports_unget(pools, ref);
            return serial;
        }
        /* Not kept (a racing get kept one first: look again), discarded. */
        if (ref) {
            byval_exports_unget(pools, ref);
            byval_exports_discard(&e->core);
        }
    }
    return 0;
}

/* Write the short record into a handle the driver just filled: a classic
 * one's bytes 40-63, an opaque one's reserved bytes (ze_opaque.c). */
static int describe(uint8_t *h, ze_event_pool_handle_t pool, int opaque, int *fresh_p)
{
    byval_self_t self;
    uint64_t fd;
    memcpy(&fd, h, sizeof(fd));
    if (fd > INT32_MAX || byval_self_get(&self) != 0)
        return -1;
    uint64_t serial = publish(pool, (uint32_t)fd, fresh_p);
    if (!serial)
        return -1;
    return opaque ? byval_ze_opaque_write(h, serial)
                  : byval_ze_short_write(h, BYVAL_ZE_POOL_RECORD_OFF, serial);
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
    for (int tries = 0; pool_ctx && tries < 2; tries++) {
        if (byval_lru_insert(pool_ctx, &pool, ctx, 0, &old) != BYVAL_LRU_EXISTS)
            break;
        byval_lru_remove(pool_ctx, &pool); /* a destroyed pool's handle value, reused */
    }
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
    pattern_fill(h);
    byval_enter();
    ze_result_t r = next(pool, handle);
    byval_leave();
    if (r != ZE_RESULT_SUCCESS)
        return r;
    int opaque = !pattern_intact(h), fresh = 0;
    if (opaque &&
        !(layout_is_opaque(h) && byval_ze_opaque_describable(h, 1) &&
          describe(h, pool, 1, &fresh) == 0)) {
        BYVAL_STAT_INC(export_passthrough);
        if (!layout_is_opaque(h)) {
            BYVAL_LOG_INFO("unknown event-pool IPC handle layout from the driver: passed through");
        } else { /* the importer's driver fetches fd @0 with its own pidfd_getfd */
            uint64_t fd;
            memcpy(&fd, h, sizeof(fd));
            if (fd <= INT32_MAX)
                byval_export_register_fd((int)fd);
        }
        return r;
    }
    if (!opaque && describe(h, pool, 0, &fresh) != 0) {
        static int warned;
        BYVAL_STAT_INC(export_passthrough);
        if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
            BYVAL_LOG_WARN("cannot publish event pool %p for by-value handles (registry "
                           "unavailable or full): its handle passes through",
                           (void *)pool);
        memset(h + BYVAL_ZE_POOL_RECORD_OFF, 0, ZE_MAX_IPC_HANDLE_SIZE - BYVAL_ZE_POOL_RECORD_OFF);
        return r;
    }
    if (fresh) { /* the export's own reference (see the top) */
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
    /* The driver reads its own 40 bytes; the record behind them is ours
     * and changes nothing there. The export holds a reference of its own
     * (see the top): no put of the program's closes its fd. */
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
    byval_lru_t *m = __atomic_load_n(&pool_ctx, __ATOMIC_ACQUIRE);
    if (m)
        byval_lru_remove(m, &pool);
    /* Everything naming its fd withdrawn before the driver closes it. */
    byval_exports_t *x = __atomic_load_n(&pools, __ATOMIC_ACQUIRE);
    if (byval_exports_live(x) && byval_exports_end(x, &pool)) {
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
    byval_lru_t *m = __atomic_load_n(&pool_ctx, __ATOMIC_ACQUIRE);
    if (m)
        byval_lru_remove_if(m, created_in, ctx);
    size_t n = byval_exports_end_ctx(__atomic_load_n(&pools, __ATOMIC_ACQUIRE), (uintptr_t)ctx);
    if (n)
        BYVAL_LOG_DEBUG("zeContextDestroy(%p): ended %zu event-pool export%s of it first",
                        (void *)ctx, n, n == 1 ? "" : "s");
}
