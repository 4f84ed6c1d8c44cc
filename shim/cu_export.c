/* SPDX-License-Identifier: MIT */
/*
 * cu_export.c - cuIpcGetMemHandle for VMM memory.
 *
 * The driver refuses VMM memory (CUDA_ERROR_INVALID_VALUE); its only
 * export is cuMemExportToShareableHandle(POSIX_FILE_DESCRIPTOR), which
 * costs up to ~1 ms and returns a new fd every call. We export every chunk
 * of the pointer's reservation once, write a manifest (cu_manifest.h) into
 * a sealed memfd, and put a by-value record naming that memfd in the
 * handle. One export per reservation (cache/exports.h, keyed by the
 * reservation, validated by buffer id) makes repeated gets a lookup;
 * unmap/release/free end it: registry entries and broker offers of the
 * manifest and every chunk withdrawn, then their fds closed.
 * A context's destroy, reset or last release does not: VMM memory is no
 * context's (an H100 kept a mapping after a reset), so its export lives
 * on (cu_ctx.c ends the legacy exports of a context).
 * Legacy memory never gets here: the driver's own handle is returned.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cache/locks.h"
#include "cache/exports.h"
#include "handles/registry.h"
#include "handles/resolve.h"
#include "shim/config.h"
#include "shim/cu.h"
#include "shim/cu_manifest.h"
#include "shim/init.h"
#include "shim/log.h"
#include "shim/stats.h"
#include "shim/transport.h"

/* One entry per exported reservation (all its chunks, one fd each). */
typedef struct cu_export_key {
    uint64_t reserve_start;
    uint64_t reserve_size;
} cu_export_key_t;

typedef struct cu_export {
    byval_export_t core; /* first: cache/exports.h */
    CUipcMemHandle handle;
    uint64_t reserve_start, reserve_size;
    int manifest_fd;
    uint32_t nchunks;
    int *fds;                              /* chunk fds, nchunks */
    CUmemGenericAllocationHandle *handles; /* chunk allocations, nchunks */
    uint64_t *ids;                         /* chunk buffer ids, nchunks */
    byval_export_item_t *items;            /* the manifest's, then each chunk's */
} cu_export_t;

static byval_exports_t *exports;
static byval_once_t export_once = BYVAL_ONCE_INIT;

/* The registry key of a reservation's chunk fds (manifest key, chunk kind):
 * importers need them listed before they duplicate them. */
static uint64_t chunks_key(uint64_t manifest_key)
{
    return BYVAL_REG_KEY(BYVAL_KIND_CU_VMM, manifest_key);
}

/* Close what e holds and free it (withdrawn first, if it was started). */
static void export_free(cu_export_t *e)
{
    if (!e)
        return;
    for (uint32_t i = 0; e->fds && i < e->nchunks; i++)
        if (e->fds[i] >= 0)
            close(e->fds[i]);
    if (e->manifest_fd >= 0)
        close(e->manifest_fd);
    free(e->fds);
    free(e->handles);
    free(e->ids);
    free(e->items);
    free(e);
}

/* The export ended, everything naming its fds withdrawn: the handles
 * remembered for its pointers go, then its fds. */
static void export_end(byval_export_t *core)
{
    cu_export_t *e = (cu_export_t *)core;
    byval_cu_fast_forget_range(e->reserve_start, e->reserve_size);
    export_free(e);
}

static const byval_exports_ops_t export_ops = {"cuda export", sizeof(cu_export_key_t), export_end};

static void export_init(void)
{
    /* Read without the once by the free paths: published with a release. */
    __atomic_store_n(&exports, byval_export_table(&export_ops), __ATOMIC_RELEASE);
    byval_cu_fast_init(byval_cfg.export_cache_size);
}

/* Export every chunk mapped in [start, start+size). 0 or -1 (logged). */
static int export_chunks(const byval_cu_real_t *rl, cu_export_t *e, CUdeviceptr start,
                         uint64_t size)
{
    uint64_t off = 0;
    while (off < size) {
        CUdeviceptr base = 0;
        size_t csize = 0;
        if (rl->mem_get_address_range(&base, &csize, start + off) != CUDA_SUCCESS || !csize) {
            off += 2u << 20; /* unmapped hole: VMM granularity is >= 2 MiB */
            continue;
        }
        if (e->nchunks == BYVAL_MANIFEST_MAX_CHUNKS) {
            BYVAL_LOG_WARN("reservation at 0x%llx has more than %u chunks",
                           (unsigned long long)start, BYVAL_MANIFEST_MAX_CHUNKS);
            return -1;
        }
        CUmemGenericAllocationHandle gh;
        CUmemAllocationProp prop;
        memset(&prop, 0, sizeof(prop));
        if (rl->retain_allocation_handle(&gh, (void *)(uintptr_t)base) != CUDA_SUCCESS)
            return -1;
        CUresult r = rl->get_allocation_properties(&prop, gh);
        int fd = -1;
        if (r == CUDA_SUCCESS && !(prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) {
            BYVAL_LOG_WARN("VMM allocation at 0x%llx cannot be shared by value: it was created "
                           "without CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR in "
                           "requestedHandleTypes (0x%x)",
                           (unsigned long long)base, (unsigned)prop.requestedHandleTypes);
            r = CUDA_ERROR_NOT_SUPPORTED;
        } else if (r == CUDA_SUCCESS) {
            r = rl->export_shareable(&fd, gh, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
            if (r != CUDA_SUCCESS)
                BYVAL_LOG_WARN("cuMemExportToShareableHandle(0x%llx) failed: %s",
                               (unsigned long long)base, byval_cu_err(r));
        }
        rl->mem_release(gh); /* the retain's reference; the mapping keeps its own */
        if (r != CUDA_SUCCESS)
            return -1;
        e->fds[e->nchunks] = fd;
        e->handles[e->nchunks] = gh;
        if (byval_cu_attr_u64(rl, CU_POINTER_ATTRIBUTE_BUFFER_ID, base, &e->ids[e->nchunks]) != 0)
            e->ids[e->nchunks] = 0;
        e->nchunks++;
        off = base - start + csize;
    }
    return e->nchunks ? 0 : -1;
}

static int write_manifest(cu_export_t *e, CUdeviceptr start, uint32_t device)
{
    size_t len = sizeof(byval_manifest_t) + e->nchunks * sizeof(byval_manifest_chunk_t);
    byval_manifest_t *m = calloc(1, len);
    if (!m)
        return -1;
    m->magic = BYVAL_MANIFEST_MAGIC;
    m->version = BYVAL_MANIFEST_VERSION;
    m->nchunks = e->nchunks;
    m->device = device;
    m->reserve_size = e->reserve_size;
    const byval_cu_real_t *rl = byval_cu_real();
    for (uint32_t i = 0; i < e->nchunks; i++) {
        CUdeviceptr base = 0;
        size_t csize = 0;
        /* Walk again in the same order to record offsets and sizes. */
        uint64_t at = i ? m->chunks[i - 1].offset + m->chunks[i - 1].size : 0;
        while (at < e->reserve_size &&
               (rl->mem_get_address_range(&base, &csize, start + at) != CUDA_SUCCESS || !csize))
            at += 2u << 20;
        m->chunks[i].offset = base - start;
        m->chunks[i].size = csize;
        m->chunks[i].fd = (uint32_t)e->fds[i];
        m->chunks[i].fd_ino = (uint32_t)byval_fd_inode(e->fds[i]);
    }
    int fd = memfd_create("ipcbyval-manifest", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    int ok = fd >= 0 && write(fd, m, len) == (ssize_t)len &&
             fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL) == 0;
    free(m);
    if (!ok) {
        BYVAL_LOG_WARN("cannot write the export manifest: %m");
        if (fd >= 0)
            close(fd);
        return -1;
    }
    e->manifest_fd = fd;
    return 0;
}

/* The handle for ptr from a reservation entry, if ptr's chunk is one of
 * the chunks exported (same buffer id): 1, else 0 (stale entry). */
static int handle_from_entry(const byval_cu_real_t *rl, const cu_export_t *e, CUdeviceptr ptr,
                             uint64_t buffer_id, CUipcMemHandle *h)
{
    uint32_t i = 0;
    while (i < e->nchunks && e->ids[i] != buffer_id)
        i++;
    CUdeviceptr chunk_base = 0;
    size_t chunk_size = 0;
    if (i == e->nchunks || rl->mem_get_address_range(&chunk_base, &chunk_size, ptr) != CUDA_SUCCESS)
        return 0;
    *h = e->handle;
    uint64_t chunk_off = chunk_base - e->reserve_start;
    memcpy(h->reserved + BYVAL_CU_OFF_CHUNK, &chunk_off, sizeof(chunk_off));
    return 1;
}

/* Build the by-value handle for the VMM pointer ptr. 0, or -1 (logged). */
static int export_vmm(const byval_cu_real_t *rl, CUipcMemHandle *h, CUdeviceptr ptr,
                      uint64_t reserve_start, uint64_t reserve_size, uint64_t buffer_id)
{
    CUdeviceptr chunk_base = 0;
    size_t chunk_size = 0;
    uint64_t device = 0;
    byval_self_t self;
    if (rl->mem_get_address_range(&chunk_base, &chunk_size, ptr) != CUDA_SUCCESS ||
        byval_cu_attr_u64(rl, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr, &device) != 0 ||
        byval_self_get(&self) != 0)
        return -1;
    cu_export_t *e = calloc(1, sizeof(*e));
    if (!e)
        return -1;
    e->manifest_fd = -1;
    e->reserve_start = reserve_start;
    e->reserve_size = reserve_size;
    e->fds = calloc(BYVAL_MANIFEST_MAX_CHUNKS, sizeof(int));
    e->handles = calloc(BYVAL_MANIFEST_MAX_CHUNKS, sizeof(*e->handles));
    e->ids = calloc(BYVAL_MANIFEST_MAX_CHUNKS, sizeof(*e->ids));
    e->items = calloc(BYVAL_MANIFEST_MAX_CHUNKS + 1, sizeof(*e->items));
    if (!e->fds || !e->handles || !e->ids || !e->items || export_chunks(rl, e, reserve_start, reserve_size) != 0 ||
        write_manifest(e, reserve_start, (uint32_t)device) != 0)
        goto err;

    byval_record_t rec = {0};
    byval_record_set_exporter(&rec, &self);
    rec.kind = BYVAL_KIND_CU_VMM_MANIFEST;
    rec.fd = (uint32_t)e->manifest_fd;
    rec.fd_ino = (uint32_t)byval_fd_inode(e->manifest_fd);
    /* The first chunk's buffer id names the reservation: every pointer
     * into it shares one import mapping. */
    rec.alloc_id = e->ids[0] & BYVAL_WIRE_MAX_ALLOC_ID;
    rec.size = sizeof(byval_manifest_t) + e->nchunks * sizeof(byval_manifest_chunk_t);
    rec.device = (uint8_t)device;
    memset(&e->handle, 0, sizeof(e->handle));
    uint64_t chunk_off = chunk_base - reserve_start;
    memcpy(e->handle.reserved + BYVAL_CU_OFF_CHUNK, &chunk_off, sizeof(chunk_off));
    if (byval_wire_encode(&rec, (uint8_t *)e->handle.reserved + BYVAL_CU_RECORD_OFF) !=
        BYVAL_WIRE_OK)
        goto err;
    *h = e->handle;
    /* Started before a racing free can end it: the manifest, then each
     * chunk, listed and offered. */
    uint64_t reg_key = BYVAL_REG_KEY(BYVAL_KIND_CU_VMM_MANIFEST, rec.alloc_id);
    e->items[0] = (byval_export_item_t){.key = reg_key, .fd = e->manifest_fd, .ino = rec.fd_ino,
                                        .size = reserve_size, .flags = BYVAL_EXPORT_OFFER};
    for (uint32_t i = 0; i < e->nchunks; i++)
        e->items[1 + i] = (byval_export_item_t){.key = chunks_key(reg_key), .fd = e->fds[i],
                                                .ino = (uint32_t)byval_fd_inode(e->fds[i]),
                                                .flags = BYVAL_EXPORT_OFFER};
    e->core.nitems = 1 + e->nchunks;
    e->core.items = e->items;
    if (byval_exports_start(exports, &e->core) != 0) {
        byval_exports_discard(&e->core);
        return -1;
    }
    cu_export_key_t key = {reserve_start, reserve_size};
    byval_export_t *existing = NULL;
    byval_lru_ref_t ref = 0;
    int ins = byval_exports_insert(exports, &key, &e->core, &existing, &ref);
    if (ins == 0) {
        byval_cu_fast_remember(ptr, buffer_id, e->reserve_start, e->reserve_size, h);
        byval_exports_unget(exports, ref);
        return 0;
    }
    /* Not kept: its fds go with it, so the handle must be the export's
     * that a racing thread kept first (the handle we built would name
     * closed fds). */
    int ok = ins == BYVAL_LRU_EXISTS && handle_from_entry(rl, (cu_export_t *)existing, ptr, buffer_id, h);
    if (ins == BYVAL_LRU_EXISTS) {
        byval_exports_unget(exports, ref);
        byval_exports_discard(&e->core);
    }
    return ok ? 0 : -1;
err:
    export_free(e);
    return -1;
}

CUresult byval_cu_ipc_get(byval_cu_get_fn next, CUipcMemHandle *h, CUdeviceptr ptr)
{
    if (!byval_init() || !byval_cfg.cuda || !h)
        return next(h, ptr);
    const byval_cu_real_t *rl = byval_cu_real();
    if (rl && byval_exports_live(__atomic_load_n(&exports, __ATOMIC_ACQUIRE))) {
        byval_enter();
        int hit = byval_cu_fast_lookup(rl, ptr, h);
        byval_leave();
        if (hit) {
            BYVAL_STAT_INC(export_hits);
            return CUDA_SUCCESS;
        }
    }
    byval_enter();
    CUresult r = next(h, ptr);
    byval_leave();
    if (r == CUDA_SUCCESS) {
        BYVAL_STAT_INC(export_passthrough); /* legacy memory: already by value */
        if (rl)
            byval_cu_legacy_published(rl, h, ptr);
        return r;
    }
    uint64_t legacy = 1, start = 0, size = 0, buffer_id = 0;
    if (r != CUDA_ERROR_INVALID_VALUE || !rl ||
        byval_cu_attr_u64(rl, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, ptr, &legacy) != 0 || legacy)
        return r; /* not VMM memory: the driver's answer stands */
    if (byval_cu_attr_u64(rl, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, ptr, &start) != 0 ||
        byval_cu_attr_u64(rl, CU_POINTER_ATTRIBUTE_RANGE_SIZE, ptr, &size) != 0 ||
        byval_cu_attr_u64(rl, CU_POINTER_ATTRIBUTE_BUFFER_ID, ptr, &buffer_id) != 0)
        return r;
    byval_once(&export_once, export_init);
    if (!exports)
        return r;

    cu_export_key_t key = {start, size};
    byval_lru_ref_t ref;
    cu_export_t *e = (cu_export_t *)byval_exports_get(exports, &key, &ref);
    if (e) {
        byval_enter();
        int ok = handle_from_entry(rl, e, ptr, buffer_id, h);
        byval_leave();
        if (ok)
            byval_cu_fast_remember(ptr, buffer_id, e->reserve_start, e->reserve_size, h);
        byval_exports_unget(exports, ref);
        if (ok) {
            BYVAL_STAT_INC(export_hits);
            return CUDA_SUCCESS;
        }
        /* The reservation was remapped behind our back: export it anew. */
        byval_exports_end(exports, &key);
    }
    byval_ptracer_allow();
    byval_enter();
    int rc = export_vmm(rl, h, ptr, start, size, buffer_id);
    byval_leave();
    if (rc != 0) {
        BYVAL_LOG_WARN("cuIpcGetMemHandle(0x%llx): VMM memory cannot be exported by value; "
                       "returning the driver's %s",
                       (unsigned long long)ptr, byval_cu_err(r));
        return r;
    }
    BYVAL_STAT_INC(exports);
    byval_log_export("", 0, (const void *)(uintptr_t)ptr, -1);
    return CUDA_SUCCESS;
}

static int overlaps(void *arg, const byval_export_t *core)
{
    const uint64_t *range = arg;
    const cu_export_t *e = (const cu_export_t *)core;
    return e->reserve_start < range[0] + range[1] && range[0] < e->reserve_start + e->reserve_size;
}

void byval_cu_export_forget_range(CUdeviceptr ptr, size_t size)
{
    byval_exports_t *x = __atomic_load_n(&exports, __ATOMIC_ACQUIRE);
    if (!byval_exports_live(x))
        return;
    uint64_t range[2] = {ptr, size ? size : 1};
    byval_cu_fast_forget_range(ptr, size);
    size_t n = byval_exports_end_if(x, overlaps, range);
    BYVAL_STAT_ADD(frees, n);
    if (n)
        byval_log_export("", 1, (const void *)(uintptr_t)ptr, -1);
}

static int holds_handle(void *arg, const byval_export_t *core)
{
    const CUmemGenericAllocationHandle *h = arg;
    const cu_export_t *e = (const cu_export_t *)core;
    for (uint32_t i = 0; i < e->nchunks; i++)
        if (e->handles[i] == *h)
            return 1;
    return 0;
}

void byval_cu_export_forget_handle(CUmemGenericAllocationHandle h)
{
    byval_exports_t *x = __atomic_load_n(&exports, __ATOMIC_ACQUIRE);
    if (!byval_exports_live(x))
        return;
    size_t n = byval_exports_end_if(x, holds_handle, &h);
    if (n) /* pointers into it may sit in the fast map: start it afresh */
        byval_cu_fast_forget_all();
    BYVAL_STAT_ADD(frees, n);
}
