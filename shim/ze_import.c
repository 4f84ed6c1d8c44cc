/* SPDX-License-Identifier: MIT */
/*
 * ze_import.c - zeMemOpenIpcHandle / zeMemCloseIpcHandle for by-value
 * handles.
 *
 * A miss resolves the exporter's fd with pidfd_open + pidfd_getfd
 * (handles/resolve.c), writes the local fd into bytes 0-7 of a copy of the
 * handle, lets the driver import it and closes the duplicate. The mapping
 * is kept in the import cache keyed by (pid namespace, pid, identity,
 * allocation id, flags, pool offset, local context, local device): a
 * re-open is a lookup. Close drops a reference; the driver's close runs on
 * eviction, when the exporter exits, or never (process exit). The open
 * pointer map keeps each mapping's cache reference handle, so that close
 * puts exactly that entry without hashing the key again.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/lru.h"
#include "cache/ptrmap.h"
#include "handles/resolve.h"
#include "shim/config.h"
#include "shim/exporters.h"
#include "shim/init.h"
#include "shim/log.h"
#include "shim/stats.h"
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
    void *ptr;
    ze_context_handle_t ctx;
    /* The whole record it was opened from: a hit must match it, so a
     * forged or corrupted handle that shares the key (another host's
     * exporter, another fd, size or inode) is resolved and refused, never
     * served from the cache. */
    uint8_t rec[BYVAL_WIRE_LEN];
} ze_import_t;

/* In the open pointer map, reference handle 0 marks a mapping that could
 * not be cached (cache full of referenced entries): closed for real on
 * its last close. */

static byval_lru_t *import_cache;
static byval_ptrmap_t *open_ptrs;
static pthread_once_t import_once = PTHREAD_ONCE_INIT;
static ze_pfnMemCloseIpcHandle_t real_close;

static void import_close_mapping(ze_context_handle_t ctx, void *ptr)
{
    if (!real_close)
        return;
    byval_enter();
    ze_result_t r = real_close(ctx, ptr);
    byval_leave();
    if (r != ZE_RESULT_SUCCESS)
        BYVAL_LOG_WARN("zeMemCloseIpcHandle(%p) on release returned 0x%x", ptr, (unsigned)r);
}

static void import_evicted(void *ctx, const void *key, void *value)
{
    ze_import_t *m = value;
    import_close_mapping(m->ctx, m->ptr);
    free(m);
}

static int import_from_exporter(void *ctx, const void *key, void *value)
{
    const byval_exporter_id_t *id = ctx;
    const ze_import_key_t *k = key;
    return k->pidns == id->pidns && k->pid == id->pid && k->identity == id->identity;
}

static void import_exporter_exited(const byval_exporter_id_t *id)
{
    if (import_cache)
        byval_lru_remove_if(import_cache, import_from_exporter, (void *)id);
}

static void import_atfork_prepare(void)
{
    byval_ptrmap_fork_prepare(open_ptrs);
}

static void import_atfork_parent(void)
{
    byval_ptrmap_fork_parent(open_ptrs);
}

static void import_atfork_child(void)
{
    /* The child holds none of the parent's opens (the cache empties
     * itself in its own handler, without driver calls). */
    byval_ptrmap_clear(open_ptrs);
}

static void import_init(void)
{
    real_close = (ze_pfnMemCloseIpcHandle_t)byval_ze_sym("zeMemCloseIpcHandle");
    import_cache = byval_lru_create(byval_cfg.cache_size, sizeof(ze_import_key_t),
                                    import_evicted, NULL);
    open_ptrs = byval_ptrmap_create(sizeof(byval_lru_ref_t));
    if (!import_cache || !open_ptrs) {
        BYVAL_LOG_ERROR("cannot allocate the import cache: by-value opens will fail");
        return;
    }
    byval_stats_register_cache("ze import", import_cache);
    byval_exporters_on_exit(import_exporter_exited);
    pthread_atfork(import_atfork_prepare, import_atfork_parent, import_atfork_child);
}

/* Log the first failure of each kind at error level, the rest at debug:
 * a loop that keeps failing must not flood the job's output. */
static void import_log_failure(byval_status_t st, const char *msg)
{
    static int seen[BYVAL_E_SYS + 1];
    int first = st <= BYVAL_E_SYS && !__atomic_exchange_n(&seen[st], 1, __ATOMIC_RELAXED);
    if (first)
        BYVAL_LOG_ERROR("zeMemOpenIpcHandle: %s", msg);
    else
        BYVAL_LOG_DEBUG("zeMemOpenIpcHandle: %s", msg);
}

static ze_result_t status_to_ze(byval_status_t st)
{
    return st == BYVAL_E_NOFD ? ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY
                              : ZE_RESULT_ERROR_INVALID_ARGUMENT;
}

ze_result_t byval_ze_resolve(const byval_record_t *rec, int *fd_p)
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
        import_log_failure(st, msg);
        return status_to_ze(st);
    }
    return ZE_RESULT_SUCCESS;
}

/* Resolve, import and cache. On success *pptr is referenced once. */
static ze_result_t import_miss(ze_pfnMemOpenIpcHandle_t next, ze_context_handle_t ctx,
                               ze_device_handle_t dev, ze_ipc_mem_handle_t handle,
                               ze_ipc_memory_flags_t flags, const byval_record_t *rec,
                               const ze_import_key_t *key, void **pptr)
{
    int fd;
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
        BYVAL_LOG_ERROR("zeMemOpenIpcHandle: driver refused fd %d (pid %u fd %u): 0x%x", fd,
                        rec->pid, rec->fd, (unsigned)r);
        return r;
    }

    ze_import_t *m = malloc(sizeof(*m));
    if (m) {
        m->ptr = p;
        m->ctx = ctx;
        memcpy(m->rec, handle.data + BYVAL_ZE_RECORD_OFF, BYVAL_WIRE_LEN);
    }
    void *existing = NULL;
    byval_lru_ref_t ref = 0;
    int ins = m ? byval_lru_insert_ref(import_cache, key, m, &existing, &ref) : BYVAL_LRU_NOMEM;
    if (ins == BYVAL_LRU_EXISTS) {
        /* Another thread imported the same handle first: use its mapping. */
        free(m);
        import_close_mapping(ctx, p);
        m = existing;
        p = m->ptr;
    } else if (ins != BYVAL_LRU_OK) {
        /* Every cached mapping is in use: hand out this one uncached. */
        free(m);
        BYVAL_LOG_DEBUG("import cache full of open mappings: %p not cached", p);
        if (byval_ptrmap_ref(open_ptrs, (uintptr_t)p, &ref) < 0) { /* ref is 0 */
            import_close_mapping(ctx, p);
            return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
        }
        *pptr = p;
        return ZE_RESULT_SUCCESS;
    }
    if (byval_ptrmap_ref_value(open_ptrs, (uintptr_t)p, &ref, m) < 0) {
        byval_lru_put_ref(import_cache, ref);
        return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
    }
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
    pthread_once(&import_once, import_init);
    if (!import_cache || !open_ptrs)
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

    void *v = NULL;
    byval_lru_ref_t ref = 0;
    int hit = byval_lru_get_ref(import_cache, &key, &v, &ref);
    if (hit &&
        memcmp(((ze_import_t *)v)->rec, handle.data + BYVAL_ZE_RECORD_OFF, BYVAL_WIRE_LEN) != 0) {
        /* Same key, another record: resolve it (and most likely refuse). */
        byval_lru_put_ref(import_cache, ref);
        hit = 0;
    }
    if (hit) {
        void *p = ((ze_import_t *)v)->ptr;
        if (byval_ptrmap_ref_value(open_ptrs, (uintptr_t)p, &ref, v) < 0) {
            byval_lru_put_ref(import_cache, ref);
            return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
        }
        BYVAL_STAT_INC(opens);
        BYVAL_STAT_INC(open_hits);
        *pptr = p;
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
    if (!byval_init() || !byval_cfg.ze || !open_ptrs)
        return next(ctx, ptr);
    byval_lru_ref_t ref = 0;
    /* The handle names the entry itself: a removed one and a newer one may
     * share the key. */
    int left = byval_ptrmap_unref_value(open_ptrs, (uintptr_t)ptr, &ref, NULL);
    if (left < 0)
        return next(ctx, ptr); /* not a mapping we handed out */
    BYVAL_STAT_INC(closes);
    if (!ref) { /* uncached */
        if (left == 0)
            return next(ctx, ptr);
        return ZE_RESULT_SUCCESS;
    }
    byval_lru_put_ref(import_cache, ref);
    return ZE_RESULT_SUCCESS;
}
