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
 * The pool's fd lives as long as the pool (the driver's peekInternalHandle),
 * so an export is published at the first get and withdrawn at
 * zeEventPoolDestroy, which also wakes importers to release their closed
 * imports of it. Gets and puts go to the driver as they come (drivers
 * that count references, 26.31 on, count the program's gets and puts); a
 * get that finds another fd than the one published publishes it anew.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "handles/registry.h"
#include "handles/resolve.h"
#include "handles/wire.h"
#include "shim/config.h"
#include "shim/init.h"
#include "shim/log.h"
#include "shim/stats.h"
#include "shim/transport.h"
#include "shim/ze.h"

typedef struct pool_export {
    struct pool_export *next;
    ze_event_pool_handle_t pool;
    uint64_t key; /* registry key: kind | pool id */
    uint32_t fd, ino;
    uint64_t serial;
} pool_export_t;

static struct {
    pthread_mutex_t lock;
    pool_export_t *head;
    size_t count;
    uint64_t next_id;
} ex = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* A fork child exports nothing yet: its registry is its own (the parent's
 * entries name the parent's serials). The list is dropped, not freed: no
 * prepare handler holds the lock across fork (publish() takes the
 * registry's lock under it, whose own prepare handler runs first), so it
 * may be mid-change in the child. */
static void atfork_child(void)
{
    pthread_mutex_init(&ex.lock, NULL);
    ex.head = NULL;
    ex.count = 0;
}

static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void atfork_register(void)
{
    pthread_atfork(NULL, NULL, atfork_child);
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
    return byval_short_decode(h + BYVAL_ZE_POOL_RECORD_OFF, h, BYVAL_ZE_POOL_DRIVER_LEN, s_p) ==
           BYVAL_WIRE_OK;
}

/* (locked) The export entry of pool, or NULL. */
static pool_export_t **find_locked(ze_event_pool_handle_t pool)
{
    for (pool_export_t **pp = &ex.head; *pp; pp = &(*pp)->next)
        if ((*pp)->pool == pool)
            return pp;
    return NULL;
}

static void withdraw(const pool_export_t *e)
{
    /* Importers release their closed imports of it now. */
    byval_export_unpublish(e->key, e->ino);
    byval_export_withdraw((int)e->fd);
}

/* The registry serial of pool's export of fd, publishing it when new (or
 * when the driver hands out another fd than the one published). 0: not
 * published (registry full or unavailable, table full). */
static uint64_t publish(ze_event_pool_handle_t pool, uint32_t fd)
{
    uint32_t ino = (uint32_t)byval_fd_inode((int)fd);
    int64_t size = byval_fd_size((int)fd);
    pool_export_t old = {0}, *e;
    int had_old = 0;
    uint64_t serial = 0;
    pthread_once(&atfork_once, atfork_register);
    pthread_mutex_lock(&ex.lock);
    pool_export_t **pp = find_locked(pool);
    e = pp ? *pp : NULL;
    if (e && e->fd == fd && e->ino == ino) {
        serial = e->serial;
        pthread_mutex_unlock(&ex.lock);
        return serial;
    }
    if (e) { /* the driver's fd changed (a put closed it): publish anew */
        old = *e;
        had_old = 1;
    } else if (ex.count < byval_cfg.export_cache_size && (e = calloc(1, sizeof(*e))) != NULL) {
        e->pool = pool;
        e->next = ex.head;
        ex.head = e;
        ex.count++;
    }
    if (e) {
        e->key = BYVAL_REG_KEY(BYVAL_KIND_ZE_EVENT_POOL, ++ex.next_id);
        e->fd = fd;
        e->ino = ino;
        byval_export_offer((int)fd); /* for importers pidfd_getfd cannot serve */
        byval_export_register_fd((int)fd); /* and for other libraries' own pidfd_getfd */
        e->serial = byval_export_publish_serial(e->key, ino, fd, size > 0 ? (uint64_t)size : 0);
        serial = e->serial;
    }
    pthread_mutex_unlock(&ex.lock);
    if (had_old)
        withdraw(&old);
    return serial;
}

static void forget(ze_event_pool_handle_t pool)
{
    pthread_mutex_lock(&ex.lock);
    pool_export_t **pp = find_locked(pool), *e = NULL;
    if (pp) {
        e = *pp;
        *pp = e->next;
        ex.count--;
    }
    pthread_mutex_unlock(&ex.lock);
    if (!e)
        return;
    withdraw(e);
    BYVAL_STAT_INC(frees);
    byval_log_export("event pool ", 1, (void *)pool, -1);
    free(e);
}

/* Write the short record into a classic handle the driver just filled. */
static int describe(uint8_t *h, ze_event_pool_handle_t pool)
{
    byval_self_t self;
    uint64_t fd;
    memcpy(&fd, h, sizeof(fd));
    if (fd > INT32_MAX || byval_self_get(&self) != 0)
        return -1;
    uint64_t serial = publish(pool, (uint32_t)fd);
    if (!serial)
        return -1;
    byval_short_t s = {
        .flags = self.id_flags,
        .pid = self.pid,
        .id32 = (uint32_t)self.identity,
        .guard = byval_short_guard(self.boot, self.pidns),
        .serial = (uint32_t)serial,
    };
    return byval_short_encode(&s, h, BYVAL_ZE_POOL_DRIVER_LEN, h + BYVAL_ZE_POOL_RECORD_OFF) ==
                   BYVAL_WIRE_OK
               ? 0
               : -1;
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
    if (!pattern_intact(h)) {
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
    if (describe(h, pool) != 0) {
        static int warned;
        BYVAL_STAT_INC(export_passthrough);
        if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
            BYVAL_LOG_WARN("cannot publish event pool %p for by-value handles (registry "
                           "unavailable or full): its handle passes through",
                           (void *)pool);
        memset(h + BYVAL_ZE_POOL_RECORD_OFF, 0,
               ZE_MAX_IPC_HANDLE_SIZE - BYVAL_ZE_POOL_RECORD_OFF);
        return r;
    }
    BYVAL_STAT_INC(pool_exports);
    byval_log_export("event pool ", 0, (void *)pool, -1);
    return r;
}

ze_result_t byval_ze_pool_put_ipc(byval_ze_pool_put_fn next, ze_context_handle_t ctx,
                                  ze_ipc_event_pool_handle_t handle)
{
    /* The driver reads its own 40 bytes; the record behind them is ours
     * and changes nothing there. A pool stays published until destroyed:
     * its fd lives that long in classic drivers, and a driver that closes
     * it at the last put gets it published anew by the next get. */
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
    forget(pool);
    return next(pool);
}
