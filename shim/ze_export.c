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
 * One exported handle per live allocation (an export of cache/exports.h
 * keyed by context and pointer, validated with the allocation id):
 * repeated gets cost a lookup, the application's puts are absorbed, and
 * the export ends (registry entry, broker offer and rescue registration
 * withdrawn, then the driver's put) when the allocation is freed, its
 * context destroyed, or the table needs room.
 *
 * USM pools: compute-runtime serves small allocations from pool buffers.
 * Every allocation of a pool has the pool's id and its handle the pool's
 * one fd (with its poolOffset), so an allocation is told by its id and
 * its base (zeMemGetAddressRange gives the pooled allocation), and a free
 * ends only that allocation's exports: the shared registry entry and
 * offers are counted by the core and stay while others name them. The
 * driver takes one of the fd's references at any free in the pool, so
 * while the fd stays exported by us a free is handed one of its own.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/locks.h"
#include "cache/exports.h"
#include "handles/registry.h"
#include "handles/resolve.h"
#include "shim/config.h"
#include "shim/init.h"
#include "shim/log.h"
#include "shim/stats.h"
#include "cache/transport.h"
#include "shim/ze.h"

/* One export per (context, pointer, route): route 0 is zeMemGetIpcHandle,
 * 1 + i the i-th handle of zexMemGetIpcHandles, ZE_ROUTE_FD | fd a handle
 * made from the driver's fd (ze_fdconv.c). */
typedef struct ze_export_key {
    uintptr_t ctx;
    uintptr_t ptr;
    uint64_t route;
} ze_export_key_t;

#define ZE_ROUTE_FD (UINT64_C(1) << 32)

typedef struct ze_export {
    byval_export_t core; /* first: cache/exports.h */
    byval_export_item_t item;
    uint64_t alloc_id;
    uintptr_t base; /* the allocation's (a pooled one's, not its pool's); 0: unknown */
    ze_context_handle_t ctx;
    ze_ipc_mem_handle_t handle; /* as handed out: driver bytes + record */
    int put;                    /* the driver's reference is the export's: its put at the end */
} ze_export_t;

static byval_exports_t *exports;
static byval_once_t export_once = BYVAL_ONCE_INIT;

static ze_pfnMemGetAllocProperties_t real_get_props;
static ze_pfnMemGetAddressRange_t real_get_range;
static ze_pfnMemGetIpcHandle_t real_get;
static byval_ze_mem_put_fn real_put; /* NULL with a spec < 1.6 loader */

/* The export ended (freed, evicted, its context destroyed), everything
 * that names its fd withdrawn: give the driver its handle back. Without
 * zeMemPutIpcHandle (loader < 1.6) the driver keeps it until zeMemFree,
 * as it would without us. */
static void export_end(byval_export_t *core)
{
    ze_export_t *e = (ze_export_t *)core;
    if (__atomic_load_n(&e->put, __ATOMIC_RELAXED) && real_put) {
        byval_enter();
        ze_result_t r = real_put(e->ctx, e->handle);
        byval_leave();
        if (r != ZE_RESULT_SUCCESS)
            BYVAL_LOG_DEBUG("zeMemPutIpcHandle at the export's end returned 0x%x", (unsigned)r);
    }
    free(e);
}

static const byval_exports_ops_t export_ops = {"ze export", sizeof(ze_export_key_t), export_end};

/* The base of the allocation that holds ptr (of the pooled allocation in
 * a USM pool), or 0 when the driver cannot say. */
static uintptr_t alloc_base(ze_context_handle_t ctx, const void *ptr)
{
    void *base = NULL;
    if (!ptr || !real_get_range)
        return 0;
    byval_enter();
    ze_result_t r = real_get_range(ctx, ptr, &base, NULL);
    byval_leave();
    return r == ZE_RESULT_SUCCESS ? (uintptr_t)base : 0;
}

static void export_init(void)
{
    real_get_props = (ze_pfnMemGetAllocProperties_t)byval_ze_sym("zeMemGetAllocProperties");
    real_put = (byval_ze_mem_put_fn)byval_ze_sym("zeMemPutIpcHandle");
    real_get_range = (ze_pfnMemGetAddressRange_t)byval_ze_sym("zeMemGetAddressRange");
    real_get = (ze_pfnMemGetIpcHandle_t)byval_ze_sym("zeMemGetIpcHandle");
    /* Read without the once by the free and destroy paths: published with
     * a release. */
    __atomic_store_n(&exports, byval_export_table(&export_ops), __ATOMIC_RELEASE);
}

/* Start the export of the handle h describes and keep it under key (one
 * that a racing thread kept first with the same fd is shared instead;
 * one with another fd is stale and replaced). Importers duplicate only
 * what the registry lists, and hear of its end from it. 0, or -1 when it
 * could not be published (the handle must not be handed out by value). */
static int export_keep(const ze_export_key_t *key, uint8_t *h, const byval_record_t *opaque,
                       ze_context_handle_t ctx, const void *ptr, uint64_t alloc_id, int put)
{
    byval_record_t rec;
    ze_export_t *e = exports ? calloc(1, sizeof(*e)) : NULL;
    if (!e || (opaque ? (rec = *opaque, 0) : !byval_ze_decode(h, &rec))) {
        free(e);
        return -1;
    }
    e->alloc_id = alloc_id;
    e->base = alloc_base(ctx, ptr);
    e->ctx = ctx;
    /* Until it is kept, the driver's reference stays the application's:
     * a handle that passes through is put by the application. */
    e->put = 0;
    memcpy(e->handle.data, h, ZE_MAX_IPC_HANDLE_SIZE);
    e->item = (byval_export_item_t){
        .key = BYVAL_REG_KEY(BYVAL_KIND_ZE_MEM, rec.alloc_id),
        .fd = (int)rec.fd,
        .ino = rec.fd_ino,
        .size = rec.size,
        /* for importers pidfd_getfd cannot serve, and for other
         * libraries' own pidfd_getfd; an opaque handle's short record
         * has no room for a tag: open to the directory's group */
        .flags = BYVAL_EXPORT_OFFER | BYVAL_EXPORT_RESCUE | (opaque ? BYVAL_EXPORT_OPEN : 0),
    };
    /* An opaque handle's fd is the driver's until the allocation goes,
     * whatever becomes of the context (compute-runtime: allocations
     * belong to the driver handle); its importers in our namespace open
     * it after a zeContextDestroy natively: it ends with the free only. */
    e->core.ctx = opaque ? 0 : (uintptr_t)ctx;
    e->core.nitems = 1;
    e->core.items = &e->item;
    if (byval_exports_start(exports, &e->core) != 0 ||
        (opaque && byval_ze_opaque_write(e->handle.data, e->item.serial) != 0)) {
        byval_exports_discard(&e->core);
        return -1;
    }
    memcpy(h, e->handle.data, ZE_MAX_IPC_HANDLE_SIZE); /* the opaque one's record */
    for (int tries = 0; tries < 2; tries++) {
        byval_export_t *other = NULL;
        byval_lru_ref_t ref;
        int rc = byval_exports_insert(exports, key, &e->core, &other, &ref);
        if (rc == 0) /* kept: the application's puts are absorbed from now on */
            __atomic_store_n(&e->put, put, __ATOMIC_RELAXED);
        if (rc != BYVAL_LRU_EXISTS) {
            byval_exports_unget(exports, ref);
            return rc == 0 ? 0 : -1; /* not kept: withdrawn already */
        }
        int same = byval_ze_handle_fd(((ze_export_t *)other)->handle.data) == rec.fd;
        byval_exports_unget(exports, ref);
        if (same) { /* a racing get of the same export: share it, ours put */
            e->put = put;
            byval_exports_discard(&e->core);
            return 0;
        }
        byval_exports_end(exports, key); /* another fd under the key: stale */
    }
    byval_exports_discard(&e->core);
    return -1;
}

static int describe(uint8_t *h, ze_context_handle_t ctx, const void *ptr, uint64_t alloc_id,
                    ze_device_handle_t dev, uint64_t route)
{
    ze_export_key_t key = {(uintptr_t)ctx, (uintptr_t)ptr, route};
    if (!byval_ze_pattern_intact(h)) {
        byval_record_t rec;
        if (byval_ze_layout_is_opaque(h) && byval_ze_opaque_describable(h, 0) &&
            byval_ze_opaque_record(h, alloc_id, &rec) == 0 &&
            export_keep(&key, h, &rec, ctx, ptr, alloc_id, route == 0) == 0) {
            BYVAL_STAT_INC(exports); /* for importers in other pods (ze_opaque.c) */
            return 1;
        }
        BYVAL_STAT_INC(export_passthrough);
        if (!byval_ze_layout_is_opaque(h))
            BYVAL_LOG_INFO("unknown IPC handle layout from the driver: passed through");
        else /* the importer's driver fetches fd @0 with its own pidfd_getfd */
            byval_export_register_fd((int)byval_ze_handle_fd(h));
        return 0;
    }
    if (byval_ze_write_record(h, alloc_id, dev) != 0 ||
        export_keep(&key, h, NULL, ctx, ptr, alloc_id, route == 0) != 0) {
        memset(h + BYVAL_ZE_RECORD_OFF, 0, ZE_MAX_IPC_HANDLE_SIZE - BYVAL_ZE_RECORD_OFF);
        BYVAL_STAT_INC(export_passthrough);
        BYVAL_LOG_WARN("cannot describe fd %llu of %p by value: handle passed through",
                       (unsigned long long)byval_ze_handle_fd(h), ptr);
        return 0;
    }
    BYVAL_STAT_INC(exports);
    byval_log_export("", 0, ptr, (int)byval_ze_handle_fd(h));
    return 1;
}

int byval_ze_describe(uint8_t *h, ze_context_handle_t ctx, const void *ptr, uint64_t alloc_id,
                      ze_device_handle_t dev, unsigned index)
{
    byval_once(&export_once, export_init);
    return describe(h, ctx, ptr, alloc_id, dev,
                    ptr ? 1u + index : ZE_ROUTE_FD | byval_ze_handle_fd(h));
}

int byval_ze_alloc_props(ze_context_handle_t ctx, const void *ptr, uint64_t *id_p,
                         ze_device_handle_t *dev_p)
{
    byval_once(&export_once, export_init);
    if (!real_get_props)
        return -1;
    ze_memory_allocation_properties_t props = {.stype =
                                                   ZE_STRUCTURE_TYPE_MEMORY_ALLOCATION_PROPERTIES};
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
    byval_once(&export_once, export_init);
    if (!exports || !real_get_props)
        return call_get(next, ctx, ptr, handle);

    uint64_t alloc_id;
    ze_device_handle_t dev = NULL;
    if (byval_ze_alloc_props(ctx, ptr, &alloc_id, &dev) != 0)
        return call_get(next, ctx, ptr, handle); /* the driver reports the error */

    ze_export_key_t key = {(uintptr_t)ctx, (uintptr_t)ptr, 0};
    byval_lru_ref_t ref;
    ze_export_t *e = (ze_export_t *)byval_exports_get(exports, &key, &ref);
    if (e) {
        int valid = e->alloc_id == alloc_id;
        if (valid)
            *handle = e->handle;
        byval_exports_unget(exports, ref);
        if (valid) {
            BYVAL_STAT_INC(export_hits);
            return ZE_RESULT_SUCCESS;
        }
        /* Freed behind our back and the address reused: end the stale one. */
        byval_exports_end(exports, &key);
    }

    byval_ptracer_allow();
    uint8_t *h = (uint8_t *)handle->data;
    byval_ze_pattern_fill(h);
    byval_enter();
    ze_result_t r = call_get(next, ctx, ptr, handle);
    byval_leave();
    if (r != ZE_RESULT_SUCCESS)
        return r;
    describe(h, ctx, ptr, alloc_id, dev, 0);
    return r;
}

ze_result_t byval_ze_get_ipc(ze_pfnMemGetIpcHandle_t next, ze_context_handle_t ctx, const void *ptr,
                             ze_ipc_mem_handle_t *handle)
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
    ze_ipc_mem_handle_t handle;
} by_fd_t;

static int by_fd_visit(void *arg, const byval_export_t *core)
{
    by_fd_t *b = arg;
    const ze_export_t *e = (const ze_export_t *)core;
    if (byval_ze_handle_fd(e->handle.data) != b->fd)
        return 0;
    b->handle = e->handle;
    return 1;
}

int byval_ze_export_by_fd(int fd, ze_ipc_mem_handle_t *handle)
{
    byval_once(&export_once, export_init);
    by_fd_t b = {.fd = (uint64_t)fd};
    if (fd < 0 || !byval_exports_visit(exports, by_fd_visit, &b))
        return 0;
    *handle = b.handle;
    return 1;
}

ze_result_t byval_ze_put_ipc(byval_ze_mem_put_fn next, ze_context_handle_t ctx,
                             ze_ipc_mem_handle_t handle)
{
    byval_record_t rec;
    if (!next)
        return ZE_RESULT_ERROR_UNSUPPORTED_FEATURE;
    byval_short_t s;
    if (!byval_init() || !byval_cfg.ze ||
        (!byval_ze_decode(handle.data, &rec) &&
         !(byval_ze_opaque_decode(handle.data, &s) && byval_ze_opaque_whose(&s) == 0)))
        return next(ctx, handle);
    /* Ours: the export cache owns the driver's handle until free/evict. */
    return ZE_RESULT_SUCCESS;
}

typedef struct alloc_ref {
    uint64_t id;
    uintptr_t base; /* 0: any allocation of the id */
    int given;      /* a driver reference handed to the free already */
} alloc_ref_t;

/* compute-runtime's free of an allocation in a USM pool drops one
 * reference of the pool's exported fd (Context::freeMem), whoever took
 * it: the first ended export of the allocation leaves its reference to
 * the free instead of putting it (one that never puts, a zex export or
 * without zeMemPutIpcHandle in the loader, leaves it there anyway). */
static void give_to_free(alloc_ref_t *a, ze_export_t *e)
{
    if (!a->given)
        __atomic_store_n(&e->put, 0, __ATOMIC_RELAXED);
    a->given = 1;
}

static int of_alloc(void *arg, const byval_export_t *core)
{
    alloc_ref_t *a = arg;
    ze_export_t *e = (ze_export_t *)core;
    if (e->alloc_id != a->id || (a->base && e->base && e->base != a->base))
        return 0;
    give_to_free(a, e);
    return 1;
}

/* The allocation at (ctx, ptr) is being freed: its exports end first, and
 * everything that names their fds is withdrawn before the driver closes
 * them. */
static void export_forget(ze_context_handle_t ctx, const void *ptr)
{
    byval_exports_t *x = __atomic_load_n(&exports, __ATOMIC_ACQUIRE);
    if (!ptr || !byval_exports_live(x))
        return;
    alloc_ref_t a = {0, 0, 0};
    ze_export_key_t key = {(uintptr_t)ctx, (uintptr_t)ptr, 0};
    byval_lru_ref_t ref;
    ze_export_t *e = (ze_export_t *)byval_exports_get(x, &key, &ref);
    if (e) {
        give_to_free(&a, e);
        byval_exports_unget(x, ref);
    }
    if (byval_exports_end(x, &key)) {
        BYVAL_STAT_INC(frees);
        byval_log_export("", 1, ptr, -1);
    }
    /* Other exports of it (another context's get, zexMemGetIpcHandles, a
     * handle made from its fd, an interior pointer's) are found by the
     * allocation's id and base: driver queries only while one of the id's
     * registry entries is held. */
    ze_device_handle_t dev = NULL;
    uint64_t reg;
    if (!byval_exports_live(x) || byval_ze_alloc_props(ctx, ptr, &a.id, &dev) != 0 ||
        !byval_exports_key_held(reg = BYVAL_REG_KEY(BYVAL_KIND_ZE_MEM, a.id)))
        return;
    a.base = alloc_base(ctx, ptr);
    byval_exports_end_if(x, of_alloc, &a);
    /* Still held with nothing of this allocation's left to the free:
     * another allocation of the same USM pool is exported with the same
     * fd, and the free would take that one's reference: take one for it. */
    if (!a.given && a.base && real_get && byval_exports_key_held(reg)) {
        ze_ipc_mem_handle_t h;
        byval_enter();
        ze_result_t r = real_get(ctx, ptr, &h);
        byval_leave();
        BYVAL_LOG_DEBUG("zeMemFree(%p) in an exported USM pool: a reference for the free (0x%x)",
                        ptr, (unsigned)r);
    }
}

void byval_ze_exports_ctx_gone(ze_context_handle_t ctx)
{
    size_t n = byval_exports_end_ctx(__atomic_load_n(&exports, __ATOMIC_ACQUIRE), (uintptr_t)ctx);
    if (n)
        BYVAL_LOG_DEBUG("zeContextDestroy(%p): ended %zu export%s of it first", (void *)ctx, n,
                        n == 1 ? "" : "s");
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
