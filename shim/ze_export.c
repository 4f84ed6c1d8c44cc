/* SPDX-License-Identifier: MIT */
/*
 * ze_export.c - the Level Zero memory export backend (zeMemGetIpcHandle,
 * Put, Free, zexMemGetIpcHandles, the fd conversions). A classic handle gets our record after the driver's bytes;
 * an opaque one (newer drivers, which resolve pids themselves) a short
 * record where the rendezvous directory is used; other layouts pass
 * through. One export per (context, pointer, route), validated by the
 * allocation id: repeated gets cost a lookup, the application's puts are
 * absorbed, and the export ends at the free, the context's destroy or
 * eviction. USM pools (doc/level-zero-usm-pools.md): a pool's allocations
 * share its id and fd, so an allocation is told by its id and base, and a
 * free ends only that allocation's exports.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* One export per (context, pointer, route): route 0 is zeMemGetIpcHandle,
 * 1 + i the i-th handle of zexMemGetIpcHandles, ZE_ROUTE_FD | fd a handle
 * made from the driver's fd (below). */
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
    int put;                    /* a get's reference (handed): put at the end */
} ze_export_t;

/* A get (cache/exports.h's call): the allocation, the driver's get,
 * plain or with properties (neither: h is the driver's handle already),
 * and what it answered. */
typedef struct ze_call {
    ze_pfnMemGetIpcHandle_t plain;
    byval_ze_get_props_fn props;
    void *pNext;
    ze_context_handle_t ctx;
    const void *ptr;
    uint64_t alloc_id;
    ze_device_handle_t dev;
    uint8_t *h;
    uint64_t fd; /* the driver's; UINT64_MAX before it answered: any */
    int layout;  /* byval_ze_layout's; -2 before the driver answered */
    int put;
    ze_result_t r;
} ze_call_t;

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
    if (core->handed && __atomic_load_n(&e->put, __ATOMIC_RELAXED) && real_put) {
        byval_enter();
        ze_result_t r = real_put(e->ctx, e->handle);
        byval_leave();
        if (r != ZE_RESULT_SUCCESS)
            BYVAL_LOG_DEBUG("zeMemPutIpcHandle at the export's end returned 0x%x", (unsigned)r);
    }
    free(e);
}

static int same_alloc(const byval_export_t *core, const void *arg)
{
    const ze_export_t *e = (const ze_export_t *)core;
    const ze_call_t *c = arg;
    return e->alloc_id == c->alloc_id &&
        (c->fd == UINT64_MAX || byval_ze_handle_fd(e->handle.data) == c->fd);
}

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

/* Device ordinal of dev within its driver (record field, diagnostics). */
static uint8_t device_ordinal(ze_device_handle_t dev)
{
    ze_pfnDriverGet_t drv_get = (ze_pfnDriverGet_t)byval_ze_sym("zeDriverGet");
    ze_pfnDeviceGet_t dev_get = (ze_pfnDeviceGet_t)byval_ze_sym("zeDeviceGet");
    ze_driver_handle_t drivers[8];
    uint32_t nd = 8;
    if (!dev || !drv_get || !dev_get || drv_get(&nd, drivers) != ZE_RESULT_SUCCESS)
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

static ze_result_t call_get(const ze_call_t *c, ze_ipc_mem_handle_t *handle)
{
    return c->props ? c->props(c->ctx, c->ptr, c->pNext, handle) : c->plain(c->ctx, c->ptr, handle);
}

/* Ask the driver (unless it answered) and describe its handle: the
 * record of the fd @0, in a classic handle after the driver's bytes. */
static byval_export_t *export_make(void *arg)
{
    ze_call_t *c = arg;
    byval_self_t self;
    byval_record_t rec = {0};
    if (c->plain || c->props) {
        byval_ptracer_allow();
        byval_ze_pattern(c->h, BYVAL_ZE_RECORD_OFF, 1);
        byval_enter();
        c->r = call_get(c, (ze_ipc_mem_handle_t *)c->h);
        byval_leave();
        if (c->r != ZE_RESULT_SUCCESS)
            return NULL;
    }
    uint64_t fd = byval_ze_handle_fd(c->h);
    if ((c->layout = byval_ze_layout(c->h, 0)) < 0 || fd > INT32_MAX || byval_self_get(&self) != 0)
        return NULL;
    byval_record_set_exporter(&rec, &self);
    rec.kind = BYVAL_KIND_ZE_MEM;
    rec.fd = (uint32_t)fd;
    rec.fd_ino = (uint32_t)byval_fd_inode((int)fd);
    rec.alloc_id = c->alloc_id & BYVAL_WIRE_MAX_ALLOC_ID;
    /* The object's own size (a pool's dma-buf is larger than the
     * allocation), checked by the importer against its duplicate. */
    int64_t size = byval_fd_size((int)fd);
    if (size > 0 && (uint64_t)size <= BYVAL_WIRE_MAX_SIZE)
        rec.size = (uint64_t)size;
    rec.device = c->layout ? 0 : device_ordinal(c->dev);
    rec.tag = byval_export_tag(rec.fd, rec.fd_ino);
    ze_export_t *e;
    if ((!c->layout && byval_wire_encode(&rec, c->h + BYVAL_ZE_RECORD_OFF) != BYVAL_WIRE_OK) ||
        !(e = calloc(1, sizeof(*e))))
        return NULL;
    c->fd = fd;
    *e = (ze_export_t){
        .alloc_id = c->alloc_id, .base = alloc_base(c->ctx, c->ptr), .ctx = c->ctx, .put = c->put};
    memcpy(e->handle.data, c->h, ZE_MAX_IPC_HANDLE_SIZE);
    /* Offered for importers pidfd_getfd cannot serve and registered for
     * other libraries' own pidfd_getfd; a short record has no room for a
     * tag: open to the directory's group. */
    e->item = BYVAL_EXPORT_ITEM(
        BYVAL_REG_KEY(BYVAL_KIND_ZE_MEM, rec.alloc_id), (int)fd, rec.fd_ino, rec.size,
        BYVAL_EXPORT_OFFER | BYVAL_EXPORT_RESCUE | (c->layout ? BYVAL_EXPORT_OPEN : 0));
    /* An opaque handle's fd is the driver's until the allocation goes,
     * whatever becomes of the context: it ends with the free only. */
    e->core.ctx = c->layout ? 0 : (uintptr_t)c->ctx;
    e->core.nitems = 1;
    e->core.items = &e->item;
    return &e->core;
}

/* An opaque handle's short record names the registry entry. */
static int export_write(byval_export_t *core, void *arg)
{
    ze_call_t *c = arg;
    ze_export_t *e = (ze_export_t *)core;
    if (c->layout && byval_ze_short_write(e->handle.data, BYVAL_ZE_OPAQUE_OFF, e->item.serial) != 0)
        return -1;
    memcpy(c->h, e->handle.data, ZE_MAX_IPC_HANDLE_SIZE);
    return 0;
}

static void export_hand(const byval_export_t *core, void *arg)
{
    memcpy(((ze_call_t *)arg)->h, ((const ze_export_t *)core)->handle.data, ZE_MAX_IPC_HANDLE_SIZE);
}

static const byval_backend_export_t export_ops = {
    "ze export", sizeof(ze_export_key_t), 0, same_alloc, export_make, export_write, export_hand,
    export_end};

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

/* After the flow's rc (cache/exports.h): counted and logged; or passed
 * through, an opaque handle as the driver wrote it. 1 when by value. */
static int described(const ze_call_t *c, int rc)
{
    if (rc >= 0) {
        BYVAL_STAT_INC(exports);
        if (!c->layout)
            byval_log_export("", 0, c->ptr, (int)c->fd);
        return 1;
    }
    if (c->layout == 1)
        byval_ze_pass(c->h, 0);
    if (c->layout) /* also a driver's error, or a layout passed through */
        return 0;
    memset(c->h + BYVAL_ZE_RECORD_OFF, 0, ZE_MAX_IPC_HANDLE_SIZE - BYVAL_ZE_RECORD_OFF);
    BYVAL_STAT_INC(export_passthrough);
    BYVAL_LOG_WARN("cannot describe fd %llu of %p by value: handle passed through",
                   (unsigned long long)byval_ze_handle_fd(c->h), c->ptr);
    return 0;
}

/* 1 when the driver wrote the classic layout, the record was added and
 * the export started (kept until the allocation is freed, its context
 * destroyed or the table needs room). index: the handle's place among
 * zexMemGetIpcHandles'; ptr NULL: a handle made from the fd. */
static int describe(uint8_t *h, ze_context_handle_t ctx, const void *ptr, uint64_t alloc_id,
                    ze_device_handle_t dev, unsigned index)
{
    byval_once(&export_once, export_init);
    ze_call_t c = {NULL, NULL, NULL, ctx, ptr, alloc_id, dev, h, UINT64_MAX, -2, 0, 0};
    ze_export_key_t key = {(uintptr_t)ctx, (uintptr_t)ptr,
                           ptr ? 1u + index : ZE_ROUTE_FD | byval_ze_handle_fd(h)};
    return described(&c, byval_exports_add(exports, &key, export_make(&c), &c));
}

/* Allocation id and device of ptr; -1 if the driver does not know it. */
static int alloc_props(ze_context_handle_t ctx, const void *ptr, uint64_t *id_p,
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

/* c: the driver's get, its arguments. */
static ze_result_t get_ipc(ze_call_t *c, ze_ipc_mem_handle_t *handle)
{
    if (!handle || !c->ptr || !byval_init() || !byval_cfg.ze)
        return call_get(c, handle);
    byval_once(&export_once, export_init);
    c->h = (uint8_t *)handle->data;
    if (!exports || !real_get_props || alloc_props(c->ctx, c->ptr, &c->alloc_id, &c->dev))
        return call_get(c, handle); /* the driver reports the error */
    ze_export_key_t key = {(uintptr_t)c->ctx, (uintptr_t)c->ptr, 0};
    int rc = byval_exports_obtain(exports, &key, c);
    if (rc == 1)
        BYVAL_STAT_INC(export_hits);
    else
        described(c, rc);
    return c->r;
}

ze_result_t byval_ze_get_ipc(ze_pfnMemGetIpcHandle_t next, ze_context_handle_t ctx, const void *ptr,
                             ze_ipc_mem_handle_t *handle)
{
    ze_call_t c = {next, NULL, NULL, ctx, ptr, 0, NULL, NULL, UINT64_MAX, -2, 1, 0};
    return next ? get_ipc(&c, handle) : ZE_RESULT_ERROR_UNINITIALIZED;
}

/* Intel's zexMemGetIpcHandles (a handle per tile of an implicitly scaled
 * allocation): each classic-layout handle is made by value. The driver
 * keeps these exports itself (no put: their end is the free). */
ze_result_t byval_zex_get_ipcs(byval_zex_get_handles_fn next, ze_context_handle_t ctx, void *ptr,
                               uint32_t *count, ze_ipc_mem_handle_t *handles)
{
    if (!next)
        return ZE_RESULT_ERROR_UNINITIALIZED;
    if (!count || !handles || !*count || !byval_init() || !byval_cfg.ze)
        return next(ctx, ptr, count, handles);
    uint32_t n = *count;
    for (uint32_t i = 0; i < n; i++)
        byval_ze_pattern((uint8_t *)handles[i].data, BYVAL_ZE_RECORD_OFF, 1);
    byval_enter();
    ze_result_t r = next(ctx, ptr, count, handles);
    byval_leave();
    uint64_t id;
    ze_device_handle_t dev = NULL;
    if (r != ZE_RESULT_SUCCESS || alloc_props(ctx, ptr, &id, &dev) != 0)
        return r;
    for (uint32_t i = 0; i < *count && i < n; i++)
        describe((uint8_t *)handles[i].data, ctx, ptr, id, dev, i);
    return r;
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
    ze_call_t c = {NULL, next, pNext, ctx, ptr, 0, NULL, NULL, UINT64_MAX, -2, 1, 0};
    return get_ipc(&c, handle);
}

typedef struct by_fd {
    uint64_t fd;
    int found;
    ze_ipc_mem_handle_t handle;
} by_fd_t;

/* cut_if's keep: every export stays; the first of fd copied out. */
static uint32_t by_fd_visit(void *arg, byval_export_t *core)
{
    by_fd_t *b = arg;
    const ze_export_t *e = (const ze_export_t *)core;
    if (!b->found && byval_ze_handle_fd(e->handle.data) == b->fd) {
        b->handle = e->handle;
        b->found = 1;
    }
    return UINT32_MAX;
}

/* The by-value handle the export cache holds for the driver's fd. */
static int export_by_fd(int fd, ze_ipc_mem_handle_t *handle)
{
    byval_once(&export_once, export_init);
    by_fd_t b = {.fd = (uint64_t)fd};
    if (fd >= 0)
        byval_exports_cut_if(exports, by_fd_visit, &b);
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
    byval_short_t s;
    if (!byval_init() || !byval_cfg.ze ||
        (!byval_ze_read(handle.data, &rec, 1) &&
         !(byval_ze_opaque_decode(handle.data, &s) && byval_ze_opaque_whose(&s) == 0)))
        return next(ctx, handle);
    /* Ours: the export cache owns the driver's handle until free/evict. */
    return ZE_RESULT_SUCCESS;
}

/* ---- fd <-> IPC handle ---------------------------------------------------
 * zeMemGetFileDescriptorFromIpcHandleExp and
 * zeMemGetIpcHandleFromFileDescriptorExp (spec 1.6) with by-value handles.
 * The driver answers both from its own table of exports
 * (compute-runtime's Context::getFdFromIpcHandle / getIpcHandleFromFd
 * look the handle's fd number up in its IPC map): in the exporting
 * process they convert, anywhere else they fail, or worse, return an
 * export of the importing process whose number happens to be the
 * exporter's. So, for another process's by-value handle, the fd returned
 * is a local duplicate of the exporter's object, fetched and checked as
 * an open's is, and an fd built back into a handle gives the by-value
 * handle it came from. The duplicate is the caller's to close: ipcbyval
 * never closes an fd it handed out (it may be in use), and hands out the
 * same one again while it stays open on the same object, so a caller that
 * never closes it does not collect descriptors. In the exporting process
 * both calls are the driver's, and the handle built from the driver's fd
 * is the by-value handle the export cache holds for it.
 */

/* Allocation ids of handles made from an fd (allocation unknown): this
 * bit and the fd's inode; never a driver's (counters, user addresses). */
#define FD_ALLOC_BIT (UINT64_C(1) << 47)
#define API_FD "zeMemGetFileDescriptorFromIpcHandleExp"
#define DUPS 64

/* Duplicates handed out: which by-value handle each came from. */
static struct {
    byval_lock_t lock;
    struct dup {
        int fd1; /* the fd + 1; 0: free */
        uint32_t ino;
        ze_ipc_mem_handle_t handle;
    } d[DUPS];
    unsigned next;
} dups = {.lock = BYVAL_LOCK_INIT(ZE_FDCONV)};

/* fork: the table stays right in the child (it inherits the duplicates,
 * open); only the lock must not be inherited held. A leaf: nothing is
 * taken or called out under it but fcntl and fstat. */
BYVAL_LOCK_STATIC(ze_fdconv, &dups.lock);

/* 1 while fd is open on the object whose inode's low bits are ino. */
static int still_names(int fd, uint32_t ino)
{
    return fd >= 0 && fcntl(fd, F_GETFD) >= 0 && (uint32_t)byval_fd_inode(fd) == ino;
}

/* The duplicate handed out for handle (fd < 0), or fd as a duplicate
 * (its handle in *out), while it names what it did: the fd, or -1. */
static int dup_find(const ze_ipc_mem_handle_t *handle, int fd, ze_ipc_mem_handle_t *out)
{
    int found = -1;
    byval_lock(&dups.lock);
    for (int i = 0; i < DUPS && found < 0; i++)
        if (dups.d[i].fd1 &&
            (fd < 0 ? !memcmp(&dups.d[i].handle, handle, sizeof(*handle))
                    : dups.d[i].fd1 == fd + 1) &&
            still_names(dups.d[i].fd1 - 1, dups.d[i].ino)) {
            found = dups.d[i].fd1 - 1;
            if (out)
                *out = dups.d[i].handle;
        }
    byval_unlock(&dups.lock);
    return found;
}

static void dup_remember(int fd, uint32_t ino, const ze_ipc_mem_handle_t *handle)
{
    byval_lock(&dups.lock);
    unsigned slot = DUPS;
    for (unsigned i = 0; i < DUPS && slot == DUPS; i++)
        if (dups.d[i].fd1 == fd + 1 || !dups.d[i].fd1) /* a number reused, or free */
            slot = i;
    if (slot == DUPS)
        slot = dups.next++ % DUPS; /* forget the oldest (never closed: the caller's) */
    dups.d[slot] = (struct dup){fd + 1, ino, *handle};
    byval_unlock(&dups.lock);
}

ze_result_t byval_ze_fd_from_ipc(byval_ze_fd_from_ipc_fn next, ze_context_handle_t ctx,
                                 ze_ipc_mem_handle_t handle, uint64_t *fd_p)
{
    byval_record_t rec;
    if (!next)
        return ZE_RESULT_ERROR_UNSUPPORTED_FEATURE;
    if (!fd_p || !byval_init() || !byval_cfg.ze)
        return next(ctx, handle, fd_p);
    if (!byval_ze_foreign(handle.data, &rec)) {
        ze_result_t r = next(ctx, handle, fd_p);
        /* The caller may hand this fd to a peer by number (its own
         * pidfd_getfd): the rescue may serve it (shim/syscall.c). */
        if (r == ZE_RESULT_SUCCESS && *fd_p <= INT32_MAX)
            byval_export_register_fd((int)*fd_p);
        return r;
    }
    int fd = dup_find(&handle, -1, NULL);
    if (fd < 0) {
        ze_result_t r = byval_ze_resolve_as(API_FD, &rec, &fd);
        if (r != ZE_RESULT_SUCCESS)
            return r;
        dup_remember(fd, rec.fd_ino, &handle);
        BYVAL_LOG_DEBUG(API_FD ": pid %u fd %u is fd %d here (the caller's to close)", rec.pid,
                        rec.fd, fd);
    }
    *fd_p = (uint64_t)fd;
    byval_export_register_fd(fd); /* as above: GPU memory the caller may pass on */
    return ZE_RESULT_SUCCESS;
}

ze_result_t byval_ze_ipc_from_fd(byval_ze_ipc_from_fd_fn next, ze_context_handle_t ctx, uint64_t fd,
                                 ze_ipc_mem_handle_t *handle)
{
    if (!next)
        return ZE_RESULT_ERROR_UNSUPPORTED_FEATURE;
    if (!handle || fd > INT32_MAX || !byval_init() || !byval_cfg.ze)
        return next(ctx, fd, handle);
    /* One of our duplicates: the by-value handle it came from. */
    if (dup_find(NULL, (int)fd, handle) >= 0)
        return ZE_RESULT_SUCCESS;
    /* The driver's own export (else its error, as natively). */
    byval_ze_pattern((uint8_t *)handle->data, BYVAL_ZE_RECORD_OFF, 1);
    byval_enter();
    ze_result_t r = next(ctx, fd, handle);
    byval_leave();
    if (r != ZE_RESULT_SUCCESS)
        return r;
    /* What zeMemGetIpcHandle handed out for it, record and all. */
    if (export_by_fd((int)fd, handle))
        return r;
    /* Exported another way (the export cache full, zex): describe the
     * object alone; importers then release their mapping at its close. */
    uint64_t id = FD_ALLOC_BIT | (uint32_t)byval_fd_inode((int)fd);
    describe((uint8_t *)handle->data, ctx, NULL, id, NULL, 0);
    return r;
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

/* cut_if's keep: the allocation's exports end (0). */
static uint32_t not_of_alloc(void *arg, byval_export_t *core)
{
    alloc_ref_t *a = arg;
    ze_export_t *e = (ze_export_t *)core;
    if (e->alloc_id != a->id || (a->base && e->base && e->base != a->base))
        return UINT32_MAX;
    give_to_free(a, e);
    return 0;
}

/* The allocation at (ctx, ptr) is being freed: its exports end first, and
 * everything that names their fds is withdrawn before the driver closes
 * them. */
static void export_forget(ze_context_handle_t ctx, const void *ptr)
{
    byval_exports_t *x = __atomic_load_n(&exports, __ATOMIC_ACQUIRE);
    if (!byval_init() || !byval_cfg.ze || !ptr || !byval_exports_live(x))
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
    if (!byval_exports_live(x) || alloc_props(ctx, ptr, &a.id, &dev) != 0 ||
        !byval_exports_key_held(reg = BYVAL_REG_KEY(BYVAL_KIND_ZE_MEM, a.id)))
        return;
    a.base = alloc_base(ctx, ptr);
    byval_exports_cut_if(x, not_of_alloc, &a);
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
    export_forget(ctx, ptr);
    return next(ctx, ptr);
}

ze_result_t byval_ze_free_ext(ze_pfnMemFreeExt_t next, ze_context_handle_t ctx,
                              const ze_memory_free_ext_desc_t *desc, void *ptr)
{
    if (!next)
        return ZE_RESULT_ERROR_UNINITIALIZED;
    export_forget(ctx, ptr);
    return next(ctx, desc, ptr);
}
