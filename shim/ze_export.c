/* SPDX-License-Identifier: MIT */
/*
 * ze_export.c - zeMemGetIpcHandle / zeMemPutIpcHandle / zeMemFree.
 *
 * The classic Intel layout puts a dma-buf fd in bytes 0-7 and leaves bytes
 * 17-63 as the caller's buffer had them. We fill those bytes with a pattern
 * before the real call: if the pattern survives, the layout is classic and
 * the record (exporter pid, pid namespace, identity, fd, ...) goes there.
 * Anything else (the opaque layout of newer drivers, which resolves pids
 * itself, or a layout we do not know) passes through untouched.
 *
 * One exported handle per live allocation (export cache keyed by context
 * and pointer, validated with the allocation id): repeated gets cost a
 * lookup, the application's puts are absorbed, and the driver's put runs
 * when the allocation is freed or the entry is evicted.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/lru.h"
#include "handles/registry.h"
#include "handles/resolve.h"
#include "shim/config.h"
#include "shim/init.h"
#include "shim/log.h"
#include "shim/stats.h"
#include "shim/transport.h"
#include "shim/ze.h"

typedef struct ze_export_key {
    uintptr_t ctx;
    uintptr_t ptr;
} ze_export_key_t;

typedef struct ze_export {
    uint64_t alloc_id;
    ze_context_handle_t ctx;
    ze_ipc_mem_handle_t handle; /* as handed out: driver bytes + record */
} ze_export_t;

static byval_lru_t *export_cache;
static pthread_once_t export_once = PTHREAD_ONCE_INIT;

static ze_pfnMemGetAllocProperties_t real_get_props;
static byval_ze_mem_put_fn real_put; /* NULL with a spec < 1.6 loader */
static ze_pfnDriverGet_t real_driver_get;
static ze_pfnDeviceGet_t real_device_get;

/* What the registry names an export by (handles/registry.h). */
static int export_reg_key(const ze_export_t *e, uint64_t *key_p, uint32_t *ino_p)
{
    byval_record_t rec;
    if (!byval_ze_decode(e->handle.data, &rec))
        return -1;
    *key_p = BYVAL_REG_KEY(BYVAL_KIND_ZE_MEM, rec.alloc_id);
    *ino_p = rec.fd_ino;
    return 0;
}

static void export_evicted(void *ctx, const void *key, void *value)
{
    ze_export_t *e = value;
    uint64_t rkey;
    uint32_t ino;
    /* Freed (or evicted, its fd given back): importers drop their closed
     * mappings of it now, as they would natively after their close. */
    if (export_reg_key(e, &rkey, &ino) == 0)
        byval_export_unpublish(rkey, ino);
    byval_export_withdraw((int)byval_ze_handle_fd(e->handle.data));
    /* Give the driver its fd back. Without zeMemPutIpcHandle (loader < 1.6)
     * the driver keeps it until zeMemFree, as it would without us. */
    if (real_put) {
        byval_enter();
        ze_result_t r = real_put(e->ctx, e->handle);
        byval_leave();
        if (r != ZE_RESULT_SUCCESS)
            BYVAL_LOG_DEBUG("zeMemPutIpcHandle on eviction returned 0x%x", (unsigned)r);
    }
    free(e);
}

static void export_init(void)
{
    real_get_props = (ze_pfnMemGetAllocProperties_t)byval_ze_sym("zeMemGetAllocProperties");
    real_put = (byval_ze_mem_put_fn)byval_ze_sym("zeMemPutIpcHandle");
    real_driver_get = (ze_pfnDriverGet_t)byval_ze_sym("zeDriverGet");
    real_device_get = (ze_pfnDeviceGet_t)byval_ze_sym("zeDeviceGet");
    export_cache = byval_lru_create(byval_cfg.export_cache_size, sizeof(ze_export_key_t),
                                    export_evicted, NULL);
    if (export_cache)
        byval_stats_register_cache("ze export", export_cache);
    else
        BYVAL_LOG_ERROR("cannot allocate the export cache: exports pass through");
}

/* Pattern for bytes 17..63: position-dependent so that a driver that
 * zero-fills or copies a constant is noticed. */
static uint8_t pattern_byte(size_t i)
{
    return (uint8_t)(0xA5u ^ (i * 29u));
}

void byval_ze_pattern_fill(uint8_t *h)
{
    for (size_t i = BYVAL_ZE_RECORD_OFF; i < ZE_MAX_IPC_HANDLE_SIZE; i++)
        h[i] = pattern_byte(i);
}

static int pattern_intact(const uint8_t *h)
{
    for (size_t i = BYVAL_ZE_RECORD_OFF; i < ZE_MAX_IPC_HANDLE_SIZE; i++)
        if (h[i] != pattern_byte(i))
            return 0;
    return 1;
}

/* Opaque layout (driver 25.35+): exporter pid @16, fd copy @22. */
static int layout_is_opaque(const uint8_t *h)
{
    uint32_t pid, fd0, fd22;
    memcpy(&pid, h + 16, 4);
    memcpy(&fd0, h, 4);
    memcpy(&fd22, h + 22, 4);
    return pid == (uint32_t)getpid() && fd0 == fd22;
}

/* Device ordinal of dev within its driver (record field, diagnostics). */
static uint8_t device_ordinal(ze_device_handle_t dev)
{
    ze_pfnDriverGet_t drv_get = real_driver_get;
    ze_pfnDeviceGet_t dev_get = real_device_get;
    if (!dev || !drv_get || !dev_get)
        return 0;
    ze_driver_handle_t drivers[8];
    uint32_t nd = 8;
    if (drv_get(&nd, drivers) != ZE_RESULT_SUCCESS)
        return 0;
    for (uint32_t d = 0; d < nd && d < 8; d++) {
        ze_device_handle_t devs[64];
        uint32_t n = 64;
        if (dev_get(drivers[d], &n, devs) != ZE_RESULT_SUCCESS)
            continue;
        for (uint32_t i = 0; i < n && i < 64; i++)
            if (devs[i] == dev)
                return (uint8_t)i;
    }
    return 0;
}

/* Write the record into a classic handle the driver just filled. */
static int export_write_record(uint8_t *h, ze_context_handle_t ctx, const void *ptr,
                               uint64_t alloc_id, ze_device_handle_t dev)
{
    byval_self_t self;
    byval_record_t rec = {0};
    uint64_t fd = byval_ze_handle_fd(h);
    if (fd > INT32_MAX || byval_self_get(&self) != 0)
        return -1;
    byval_record_set_exporter(&rec, &self);
    rec.kind = BYVAL_KIND_ZE_MEM;
    rec.fd = (uint32_t)fd;
    byval_export_offer((int)fd); /* for importers pidfd_getfd cannot serve */
    byval_export_register_fd((int)fd); /* and for other libraries' own pidfd_getfd */
    rec.fd_ino = (uint32_t)byval_fd_inode((int)fd);
    rec.alloc_id = alloc_id & BYVAL_WIRE_MAX_ALLOC_ID;
    /* The object's own size (a pool's dma-buf is larger than the
     * allocation), checked by the importer against its duplicate. */
    int64_t size = byval_fd_size((int)fd);
    if (size > 0 && (uint64_t)size <= BYVAL_WIRE_MAX_SIZE)
        rec.size = (uint64_t)size;
    rec.device = device_ordinal(dev);
    if (byval_wire_encode(&rec, h + BYVAL_ZE_RECORD_OFF) != BYVAL_WIRE_OK)
        return -1;
    /* Importers duplicate only what the registry lists, and hear of its
     * free from it: withdrawn at eviction or zeMemFree. */
    byval_export_publish(BYVAL_REG_KEY(BYVAL_KIND_ZE_MEM, rec.alloc_id), rec.fd_ino, rec.fd,
                         rec.size);
    return 0;
}

int byval_ze_describe(uint8_t *h, ze_context_handle_t ctx, const void *ptr, uint64_t alloc_id,
                      ze_device_handle_t dev)
{
    if (!pattern_intact(h)) {
        BYVAL_STAT_INC(export_passthrough);
        if (!layout_is_opaque(h))
            BYVAL_LOG_INFO("unknown IPC handle layout from the driver: passed through");
        else /* the importer's driver fetches fd @0 with its own pidfd_getfd */
            byval_export_register_fd((int)byval_ze_handle_fd(h));
        return 0;
    }
    if (export_write_record(h, ctx, ptr, alloc_id, dev) != 0) {
        BYVAL_STAT_INC(export_passthrough);
        BYVAL_LOG_WARN("cannot describe fd %llu of %p by value: handle passed through",
                       (unsigned long long)byval_ze_handle_fd(h), ptr);
        return 0;
    }
    BYVAL_STAT_INC(exports);
    return 1;
}

int byval_ze_alloc_props(ze_context_handle_t ctx, const void *ptr, uint64_t *id_p,
                         ze_device_handle_t *dev_p)
{
    pthread_once(&export_once, export_init);
    if (!real_get_props)
        return -1;
    ze_memory_allocation_properties_t props = {
        .stype = ZE_STRUCTURE_TYPE_MEMORY_ALLOCATION_PROPERTIES};
    byval_enter();
    ze_result_t r = real_get_props(ctx, ptr, &props, dev_p);
    byval_leave();
    if (r != ZE_RESULT_SUCCESS || props.type == ZE_MEMORY_TYPE_UNKNOWN)
        return -1;
    *id_p = props.id;
    return 0;
}

/* The driver's get, plain or with properties (zeMemGetIpcHandleWithProperties). */
typedef struct get_call {
    ze_pfnMemGetIpcHandle_t plain;
    byval_ze_get_props_fn props;
    void *pNext;
} get_call_t;

static ze_result_t call_get(const get_call_t *c, ze_context_handle_t ctx, const void *ptr,
                            ze_ipc_mem_handle_t *handle)
{
    return c->props ? c->props(ctx, ptr, c->pNext, handle) : c->plain(ctx, ptr, handle);
}

static ze_result_t get_ipc(const get_call_t *next, ze_context_handle_t ctx, const void *ptr,
                           ze_ipc_mem_handle_t *handle)
{
    if (!handle || !ptr || !byval_init() || !byval_cfg.ze)
        return call_get(next, ctx, ptr, handle);
    pthread_once(&export_once, export_init);
    if (!export_cache || !real_get_props)
        return call_get(next, ctx, ptr, handle);

    uint64_t alloc_id;
    ze_device_handle_t dev = NULL;
    if (byval_ze_alloc_props(ctx, ptr, &alloc_id, &dev) != 0)
        return call_get(next, ctx, ptr, handle); /* the driver reports the error */

    ze_export_key_t key = {(uintptr_t)ctx, (uintptr_t)ptr};
    void *v;
    byval_lru_ref_t ref;
    if (byval_lru_get_ref(export_cache, &key, &v, &ref)) {
        ze_export_t *e = v;
        int valid = e->alloc_id == alloc_id;
        if (valid)
            *handle = e->handle;
        byval_lru_put_ref(export_cache, ref);
        if (valid) {
            BYVAL_STAT_INC(export_hits);
            return ZE_RESULT_SUCCESS;
        }
        /* Freed behind our back and the address reused: drop the stale one. */
        byval_lru_remove(export_cache, &key);
    }

    byval_ptracer_allow();
    uint8_t *h = (uint8_t *)handle->data;
    byval_ze_pattern_fill(h);
    byval_enter();
    ze_result_t r = call_get(next, ctx, ptr, handle);
    byval_leave();
    if (r != ZE_RESULT_SUCCESS)
        return r;
    if (!byval_ze_describe(h, ctx, ptr, alloc_id, dev))
        return r;
    ze_export_t *e = malloc(sizeof(*e));
    if (!e)
        return r; /* handle is valid, just not cached */
    e->alloc_id = alloc_id;
    e->ctx = ctx;
    e->handle = *handle;
    void *existing;
    if (byval_lru_insert(export_cache, &key, e, 0, &existing) != BYVAL_LRU_OK)
        free(e); /* another thread exported it first, or cache full: zeMemFree withdraws it */
    return r;
}

ze_result_t byval_ze_get_ipc(ze_pfnMemGetIpcHandle_t next, ze_context_handle_t ctx,
                             const void *ptr, ze_ipc_mem_handle_t *handle)
{
    if (!next)
        return ZE_RESULT_ERROR_UNINITIALIZED;
    get_call_t c = {.plain = next};
    return get_ipc(&c, ctx, ptr, handle);
}

/* ze_ipc_mem_handle_type_ext_desc_t (1.15; not in the 1.4 headers). */
#define STYPE_IPC_MEM_HANDLE_TYPE_EXT_DESC 0x0002003Du
#define IPC_MEM_HANDLE_TYPE_FLAG_DEFAULT 1u

/* 1 when pNext asks for nothing but the default (local, fd) handle. */
static int default_handle_type(const void *pNext)
{
    for (const ze_base_desc_t *d = pNext; d; d = d->pNext) {
        if ((uint32_t)d->stype != STYPE_IPC_MEM_HANDLE_TYPE_EXT_DESC)
            return 0; /* an extension we do not know: leave the handle alone */
        uint32_t flags;
        memcpy(&flags, (const char *)d + sizeof(ze_base_desc_t), sizeof(flags));
        if (flags & ~IPC_MEM_HANDLE_TYPE_FLAG_DEFAULT)
            return 0;
    }
    return 1;
}

ze_result_t byval_ze_get_ipc_props(byval_ze_get_props_fn next, ze_context_handle_t ctx,
                                   const void *ptr, void *pNext, ze_ipc_mem_handle_t *handle)
{
    if (!next)
        return ZE_RESULT_ERROR_UNSUPPORTED_FEATURE;
    if (!default_handle_type(pNext)) {
        if (byval_init() && byval_cfg.ze)
            BYVAL_STAT_INC(export_passthrough); /* fabric handles are not fds */
        return next(ctx, ptr, pNext, handle);
    }
    get_call_t c = {.props = next, .pNext = pNext};
    return get_ipc(&c, ctx, ptr, handle);
}

typedef struct by_fd {
    uint64_t fd;
    int found;
    ze_ipc_mem_handle_t handle;
} by_fd_t;

static int by_fd_visit(void *arg, const void *key, void *value)
{
    by_fd_t *b = arg;
    const ze_export_t *e = value;
    (void)key;
    if (!b->found && byval_ze_handle_fd(e->handle.data) == b->fd) {
        b->handle = e->handle;
        b->found = 1;
    }
    return 0; /* a visit: nothing is removed */
}

int byval_ze_export_by_fd(int fd, ze_ipc_mem_handle_t *handle)
{
    pthread_once(&export_once, export_init);
    if (!export_cache || fd < 0)
        return 0;
    by_fd_t b = {.fd = (uint64_t)fd};
    byval_lru_remove_if(export_cache, by_fd_visit, &b);
    if (b.found)
        *handle = b.handle;
    return b.found;
}

ze_result_t byval_ze_put_ipc(byval_ze_mem_put_fn next, ze_context_handle_t ctx,
                             ze_ipc_mem_handle_t handle)
{
    byval_record_t rec;
    if (!next)
        return ZE_RESULT_ERROR_UNSUPPORTED_FEATURE;
    if (!byval_init() || !byval_cfg.ze || !byval_ze_decode(handle.data, &rec))
        return next(ctx, handle);
    /* Ours: the export cache owns the driver's handle until free/evict. */
    return ZE_RESULT_SUCCESS;
}

static void export_forget(ze_context_handle_t ctx, const void *ptr)
{
    if (!export_cache || !ptr)
        return;
    /* Exports the cache does not hold (zexMemGetIpcHandles, a lost race)
     * are withdrawn by the allocation's id: one driver query, only while
     * something is published. */
    uint64_t id;
    ze_device_handle_t dev = NULL;
    if (byval_reg_exports_live() && byval_ze_alloc_props((ze_context_handle_t)ctx, ptr, &id, &dev) == 0)
        byval_export_unpublish(BYVAL_REG_KEY(BYVAL_KIND_ZE_MEM, id), 0);
    ze_export_key_t key = {(uintptr_t)ctx, (uintptr_t)ptr};
    if (byval_lru_remove(export_cache, &key) == BYVAL_LRU_OK)
        BYVAL_STAT_INC(frees);
}

ze_result_t byval_ze_free(ze_pfnMemFree_t next, ze_context_handle_t ctx, void *ptr)
{
    if (!next)
        return ZE_RESULT_ERROR_UNINITIALIZED;
    if (byval_init() && byval_cfg.ze)
        export_forget(ctx, ptr);
    return next(ctx, ptr);
}

ze_result_t byval_ze_free_ext(ze_pfnMemFreeExt_t next, ze_context_handle_t ctx,
                              const ze_memory_free_ext_desc_t *desc, void *ptr)
{
    if (!next)
        return ZE_RESULT_ERROR_UNINITIALIZED;
    if (byval_init() && byval_cfg.ze)
        export_forget(ctx, ptr);
    return next(ctx, desc, ptr);
}
