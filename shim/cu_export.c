/* SPDX-License-Identifier: MIT */
/*
 * cu_export.c - the CUDA VMM export backend (cuIpcGetMemHandle on memory
 * the driver refuses: its only export, cuMemExportToShareableHandle, costs
 * up to 1 ms and a new fd a call). A pool per reservation keeps each
 * chunk's export, made when a handle first needs the chunk, until the
 * chunk is unmapped or released. A handle names an extent: the pointer's
 * chunk and the chunks mapped after it without a hole (all that a buffer
 * starting there can cover); one export per extent, a sealed manifest of
 * its chunks (handles/manifest.h) published and offered with them. An
 * unmap ends or trims the extents naming the chunk and renews the pool's
 * liveness entry, which importers' mirrors watch. VMM memory is no
 * context's: a context's end ends nothing here (doc/cuda-vmm-pools.md).
 * Legacy (cuMemAlloc) memory: the driver's handle is by value already and
 * passes through; one export per allocation start publishes it (keyed by
 * a hash of the handle bytes) so that importers release their closed
 * mappings of it when it is freed or its context goes (cu_entry.c).
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cache/config.h"
#include "cache/exports.h"
#include "cache/init.h"
#include "cache/locks.h"
#include "cache/log.h"
#include "cache/stats.h"
#include "cache/transport.h"
#include "handles/manifest.h"
#include "handles/registry.h"
#include "handles/resolve.h"
#include "shim/cu.h"

/* A chunk's export, made once. */
typedef struct cu_chunk {
    uint64_t off, size; /* in the reservation */
    uint64_t id;        /* its registry key's id */
    uint64_t buffer_id; /* the driver's: a chunk mapped anew there has another */
    CUmemGenericAllocationHandle gh;
    int fd;
    uint32_t ino;
} cu_chunk_t;

typedef struct cu_export cu_export_t;

typedef struct cu_pool {
    struct cu_pool *next;
    uint64_t start, size, id;
    uint64_t unmaps; /* unmaps and releases in its range so far */
    unsigned busy;   /* gets exporting chunks of it, unlocked */
    size_t n, cap;
    cu_chunk_t *chunks; /* by offset */
    cu_export_t *live;  /* its liveness entry (not kept in the table) */
} cu_pool_t;

/* An extent: offsets [first, end) of one reservation. */
typedef struct cu_export_key {
    uint64_t reserve_start, reserve_size, first, end;
} cu_export_key_t;

struct cu_export {
    byval_export_t core; /* first: cache/exports.h */
    cu_export_key_t key;
    uint64_t end; /* what it names now: [key.first, end) (an unmap cuts it) */
    CUipcMemHandle handle;
    int manifest_fd; /* -1: a pool's liveness entry */
};

static byval_exports_t *exports;
static byval_once_t export_once = BYVAL_ONCE_INIT;
static byval_lock_t pools_lock = BYVAL_LOCK_INIT(CU_POOLS);
BYVAL_LOCK_STATIC(cu_pools, &pools_lock);
static cu_pool_t *pools;
static size_t npools;   /* read without the lock: a hint to skip work */
static uint64_t ids;    /* pool, chunk and export ids, never reused */
static uint64_t mapgen; /* bumped by every cuMemMap: a remembered handle's extent may be short */

/* ---- the fast path ------------------------------------------------------
 * The handle last given for a pointer, validated by one BUFFER_ID query
 * (a reused address has a new id): a repeated get costs a lookup, not the
 * driver's failing call and a walk. A chunk mapped since (mapgen) sends
 * the get to the walk; an extent's end clears its reservation's pointers.
 * A memo: it holds no fd and nothing shared. */

typedef struct cu_fast {
    uint64_t buffer_id, mapgen, reserve_start, reserve_size;
    CUipcMemHandle handle;
} cu_fast_t;

static byval_lru_t *fast_cache; /* key: the exported pointer */

static void fast_evicted(void *ctx, const void *key, void *value)
{
    free(value);
}

static void fast_remember(CUdeviceptr ptr, const cu_fast_t *from)
{
    cu_fast_t *f = fast_cache ? malloc(sizeof(*f)) : NULL;
    uint64_t key = ptr;
    void *existing;
    if (!f)
        return;
    *f = *from;
    byval_lru_remove(fast_cache, &key); /* a handle of an older extent: replaced */
    if (byval_lru_insert(fast_cache, &key, f, 0, &existing) != BYVAL_LRU_OK)
        free(f);
}

static int fast_lookup(const byval_cu_real_t *rl, CUdeviceptr ptr, uint64_t gen, CUipcMemHandle *h)
{
    uint64_t key = ptr, id = 0;
    void *v;
    byval_lru_ref_t ref;
    if (!byval_lru_get_ref(fast_cache, &key, &v, &ref))
        return 0;
    const cu_fast_t *f = v;
    int ok = f->mapgen == gen &&
        byval_cu_attr_u64(rl, CU_POINTER_ATTRIBUTE_BUFFER_ID, ptr, &id) == 0 && id == f->buffer_id;
    int reused = f->mapgen == gen && !ok;
    if (ok)
        *h = f->handle;
    byval_lru_put_ref(fast_cache, ref);
    if (reused)
        byval_lru_remove(fast_cache, &key); /* address reused by another allocation */
    return ok;
}

static int fast_overlaps(void *ctx, const void *key, void *value)
{
    const uint64_t *range = ctx;
    const cu_fast_t *f = value;
    return f->reserve_start < range[0] + range[1] && range[0] < f->reserve_start + f->reserve_size;
}

/* ---- exports ------------------------------------------------------------- */

static void export_end(byval_export_t *core)
{
    cu_export_t *e = (cu_export_t *)core;
    if (e->manifest_fd >= 0) {
        uint64_t range[2] = {e->key.reserve_start, e->key.reserve_size ? e->key.reserve_size : 1};
        byval_lru_remove_if(fast_cache, fast_overlaps, range);
        close(e->manifest_fd);
    }
    free(e);
}

/* call: the handle to fill. */
static void export_hand(const byval_export_t *e, void *h)
{
    *(CUipcMemHandle *)h = ((const cu_export_t *)e)->handle;
}

static const byval_backend_export_t export_ops = {
    "cuda export", sizeof(cu_export_key_t), 0, NULL, NULL, NULL, export_hand, export_end};

static void export_init(void)
{
    /* Read without the once by the free paths: published with a release. */
    __atomic_store_n(&exports, byval_export_table(&export_ops), __ATOMIC_RELEASE);
    fast_cache =
        byval_lru_create(byval_cfg.export_cache_size, sizeof(uint64_t), fast_evicted, NULL);
}

static uint64_t new_id(void)
{
    return __atomic_add_fetch(&ids, 1, __ATOMIC_RELAXED) & BYVAL_WIRE_MAX_ALLOC_ID;
}

/* ---- pools (under pools_lock) ------------------------------------------ */

/* The pool's liveness entry: published while the pool has extents and no
 * chunk of it was unmapped since it was made. Importers' mirrors note its
 * serial. */
static void live_start(cu_pool_t *p)
{
    cu_export_t *e = (cu_export_t *)byval_export_alloc(sizeof(*e), 1);
    if (!e)
        return;
    e->manifest_fd = -1;
    e->core.items[0] =
        BYVAL_EXPORT_ITEM(BYVAL_CU_POOL_KEY(p->id), -1, BYVAL_CU_POOL_INO, p->size, 0);
    if (byval_exports_start(exports, &e->core) != 0) {
        byval_exports_discard(&e->core);
        return; /* importers find no entry: their mirrors are not kept closed */
    }
    p->live = e;
}

static void live_end(cu_pool_t *p)
{
    if (p->live)
        byval_exports_discard(&p->live->core);
    p->live = NULL;
}

/* The pool of reservation [start, start + size), made when make. */
static cu_pool_t *pool_get(uint64_t start, uint64_t size, int make)
{
    cu_pool_t *p = pools;
    while (p && !(p->start == start && p->size == size))
        p = p->next;
    if (p || !make || !(p = calloc(1, sizeof(*p))))
        return p;
    *p = (cu_pool_t){.next = pools, .start = start, .size = size, .id = new_id()};
    pools = p;
    __atomic_store_n(&npools, npools + 1, __ATOMIC_RELAXED);
    return p;
}

static void pool_free(cu_pool_t *p)
{
    cu_pool_t **pp = &pools;
    while (*pp != p)
        pp = &(*pp)->next;
    *pp = p->next;
    __atomic_store_n(&npools, npools - 1, __ATOMIC_RELAXED);
    live_end(p);
    free(p->chunks);
    free(p);
}

/* Index of the first chunk of p ending after off. */
static size_t chunk_at(const cu_pool_t *p, uint64_t off)
{
    return byval_cu_chunk_at(p->chunks, p->n, sizeof(p->chunks[0]), off);
}

/* 1: p holds the chunk mapped now as `now` says; 0: nothing there; -1: another
 * (unmapped and mapped anew behind our back: a driver call we did not see). */
static int chunk_known(const cu_pool_t *p, const cu_chunk_t *now)
{
    size_t i = chunk_at(p, now->off);
    if (i == p->n || p->chunks[i].off >= now->off + now->size)
        return 0;
    const cu_chunk_t *c = &p->chunks[i];
    return c->off == now->off && c->size == now->size && c->buffer_id == now->buffer_id ? 1 : -1;
}

/* Keep c in p (its offset free there); 0 or -1 (ENOMEM). */
static int chunk_add(cu_pool_t *p, const cu_chunk_t *c)
{
    cu_chunk_t *a = byval_cu_room(p->chunks, &p->cap, p->n, sizeof(*c));
    if (!a)
        return -1;
    p->chunks = a;
    size_t i = chunk_at(p, c->off);
    memmove(&p->chunks[i + 1], &p->chunks[i], (p->n - i) * sizeof(*c));
    p->chunks[i] = *c;
    p->n++;
    return 0;
}

/* The dropped chunks [i, ...) of p: offsets [lo, hi). */
typedef struct cut {
    const cu_pool_t *p;
    size_t i, left; /* left: extents of p that stay */
    uint64_t lo, hi;
} cut_t;

/* Extents naming dropped chunks: those that begin before them keep only
 * their chunks before them (no live buffer runs over a page its allocator
 * unmapped), the others end. */
static uint32_t cut_range(void *arg, byval_export_t *core)
{
    cut_t *c = arg;
    cu_export_t *e = (cu_export_t *)core;
    if (e->manifest_fd < 0 || e->key.reserve_start != c->p->start ||
        e->key.reserve_size != c->p->size)
        return UINT32_MAX;
    c->left += e->key.first < c->lo || e->key.first >= c->hi;
    if (e->key.first >= c->hi || c->lo >= e->end)
        return UINT32_MAX;
    if (e->key.first >= c->lo)
        return 0;
    e->end = c->lo;
    return 1 + (uint32_t)(c->i - chunk_at(c->p, e->key.first));
}

/* Chunks of p in offsets [lo, hi) are unmapped or released: the extents
 * naming them are cut, withdrawn before the chunks' fds close, and the
 * pool's liveness entry renewed. Returns the extents cut. */
static size_t pool_drop(cu_pool_t *p, uint64_t lo, uint64_t hi)
{
    size_t i = chunk_at(p, lo), j = i;
    while (j < p->n && p->chunks[j].off < hi)
        j++;
    if (i == j)
        return 0;
    cut_t cut = {p, i, 0, p->chunks[i].off, p->chunks[j - 1].off + p->chunks[j - 1].size};
    size_t n = byval_exports_cut_if(exports, cut_range, &cut);
    for (size_t k = i; k < j; k++)
        close(p->chunks[k].fd);
    memmove(&p->chunks[i], &p->chunks[j], (p->n - j) * sizeof(p->chunks[0]));
    p->n -= j - i;
    live_end(p);
    if (cut.left) /* extents left to watch it */
        live_start(p);
    return n;
}

/* ---- the get ------------------------------------------------------------ */

typedef struct run {
    uint64_t first, end; /* offsets in the reservation */
    size_t n, cap;
    cu_chunk_t *c; /* each chunk's offset, size and buffer id (fd -1) */
} run_t;

/* The chunks from ptr's to the first hole or the reservation's end. */
static int run_walk(const byval_cu_real_t *rl, uint64_t start, uint64_t size, CUdeviceptr ptr,
                    run_t *r)
{
    CUdeviceptr at = ptr;
    memset(r, 0, sizeof(*r));
    for (;;) {
        CUdeviceptr base = 0;
        size_t len = 0;
        if (at >= start + size || rl->mem_get_address_range(&base, &len, at) != CUDA_SUCCESS ||
            !len || base < start || len > start + size - base || (r->n && base != at))
            break;
        cu_chunk_t *a = byval_cu_room(r->c, &r->cap, r->n, sizeof(*a));
        if (!a)
            break;
        r->c = a;
        cu_chunk_t *c = &r->c[r->n];
        *c = (cu_chunk_t){.off = base - start, .size = len, .fd = -1};
        if (byval_cu_attr_u64(rl, CU_POINTER_ATTRIBUTE_BUFFER_ID, base, &c->buffer_id) != 0)
            break;
        r->n++;
        at = base + len;
    }
    if (!r->n)
        return -1;
    r->first = r->c[0].off;
    r->end = r->c[r->n - 1].off + r->c[r->n - 1].size;
    return 0;
}

/* 1 when the pool holds every chunk of r as mapped now (an extent kept
 * under its key names them, not chunks mapped there before). */
static int run_known(const cu_export_key_t *key, const run_t *r)
{
    byval_lock(&pools_lock);
    cu_pool_t *p = pool_get(key->reserve_start, key->reserve_size, 0);
    size_t k = 0;
    while (p && k < r->n && chunk_known(p, &r->c[k]) == 1)
        k++;
    byval_unlock(&pools_lock);
    return k == r->n;
}

/* Export the chunk mapped at base. 0, or -1 (logged). */
static int chunk_export(const byval_cu_real_t *rl, CUdeviceptr base, cu_chunk_t *c)
{
    CUmemGenericAllocationHandle gh;
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof(prop));
    if (rl->retain_allocation_handle(&gh, (void *)(uintptr_t)base) != CUDA_SUCCESS)
        return -1;
    CUresult r = rl->get_allocation_properties(&prop, gh);
    int fd = -1;
    if (r == CUDA_SUCCESS &&
        !(prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) {
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
    c->gh = gh;
    c->fd = fd;
    c->ino = (uint32_t)byval_fd_inode(fd);
    return 0;
}

/* The sealed manifest of p's chunks [i, i + n). fd, or -1 (logged). */
static int manifest_write(const cu_pool_t *p, size_t i, size_t n, uint32_t device, size_t *len_p)
{
    size_t len = BYVAL_MANIFEST_LEN(n);
    byval_manifest_t *m = calloc(1, len);
    if (!m)
        return -1;
    *m = (byval_manifest_t){
        BYVAL_MANIFEST_MAGIC, BYVAL_MANIFEST_VERSION, (uint32_t)n, device, p->size, p->id};
    for (size_t k = 0; k < n; k++) {
        const cu_chunk_t *c = &p->chunks[i + k];
        m->chunks[k] = (byval_manifest_chunk_t){c->off, c->size,
                                                c->id,  (uint32_t)c->fd,
                                                c->ino, byval_export_tag((uint32_t)c->fd, c->ino)};
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
    *len_p = len;
    return fd;
}

/* The extent export of p's chunks r (all in p now), kept under key; its
 * handle in *h. 0, or -1 (logged). Under pools_lock. */
static int extent_export(cu_pool_t *p, const run_t *r, const cu_export_key_t *key, uint32_t device,
                         CUipcMemHandle *h)
{
    byval_self_t self;
    size_t i = chunk_at(p, r->first), len = 0;
    if (byval_self_get(&self) != 0 || i + r->n > p->n)
        return -1;
    for (size_t k = 0; k < r->n; k++) /* every chunk of the run kept (no ENOMEM) */
        if (p->chunks[i + k].off != r->c[k].off || p->chunks[i + k].size != r->c[k].size)
            return -1;
    cu_export_t *e = (cu_export_t *)byval_export_alloc(sizeof(*e), 1 + (uint32_t)r->n);
    if (!e || (e->manifest_fd = manifest_write(p, i, r->n, device, &len)) < 0) {
        free(e);
        return -1;
    }
    e->key = *key;
    e->end = key->end;
    byval_record_t rec = {0};
    byval_record_set_exporter(&rec, &self);
    rec.kind = BYVAL_KIND_CU_VMM_MANIFEST;
    rec.fd = (uint32_t)e->manifest_fd;
    rec.fd_ino = (uint32_t)byval_fd_inode(e->manifest_fd);
    rec.alloc_id = new_id();
    rec.size = len;
    rec.device = (uint8_t)device;
    rec.tag = byval_export_tag(rec.fd, rec.fd_ino);
    memcpy(e->handle.reserved + BYVAL_CU_OFF_CHUNK, &r->first, sizeof(r->first));
    memcpy(e->handle.reserved + BYVAL_CU_OFF_POOL, &p->id, sizeof(p->id));
    if (byval_wire_encode(&rec, (uint8_t *)e->handle.reserved + BYVAL_CU_RECORD_OFF) !=
        BYVAL_WIRE_OK) {
        export_end(&e->core);
        return -1;
    }
    e->core.items[0] =
        BYVAL_EXPORT_ITEM(BYVAL_REG_KEY(BYVAL_KIND_CU_VMM_MANIFEST, rec.alloc_id), e->manifest_fd,
                          rec.fd_ino, r->end - r->first, BYVAL_EXPORT_OFFER);
    for (size_t k = 0; k < r->n; k++) {
        const cu_chunk_t *c = &p->chunks[i + k];
        e->core.items[1 + k] = BYVAL_EXPORT_ITEM(BYVAL_REG_KEY(BYVAL_KIND_CU_VMM, c->id), c->fd,
                                                 c->ino, c->size, BYVAL_EXPORT_OFFER);
    }
    return byval_exports_add(exports, key, &e->core, h) < 0 ? -1 : 0;
}

/* Export the chunks of r that p lacks (the driver's calls, unlocked),
 * then the extent. 0, or -1 (logged). */
static int export_vmm(const byval_cu_real_t *rl, const cu_export_key_t *key, run_t *r,
                      uint32_t device, CUipcMemHandle *h)
{
    int rc = -1, exported = 1;
    byval_lock(&pools_lock);
    cu_pool_t *p = pool_get(key->reserve_start, key->reserve_size, 1);
    for (size_t k = 0; p && k < r->n; k++) {
        int known = chunk_known(p, &r->c[k]);
        if (known < 0) { /* what we hold there is gone: as an unmap would */
            pool_drop(p, r->c[k].off, r->c[k].off + r->c[k].size);
            p->unmaps++;
        }
        r->c[k].id = known <= 0; /* to export */
    }
    uint64_t unmaps = p ? p->unmaps : 0;
    if (p)
        p->busy++; /* kept for us while we export unlocked */
    byval_unlock(&pools_lock);
    if (!p)
        return -1;
    for (size_t k = 0; k < r->n && exported; k++)
        if (r->c[k].id)
            exported = chunk_export(rl, key->reserve_start + r->c[k].off, &r->c[k]) == 0;
    byval_lock(&pools_lock);
    p->busy--;
    if (exported && p->unmaps != unmaps) /* the application unmapped it meanwhile */
        BYVAL_LOG_DEBUG("cuIpcGetMemHandle: the reservation at 0x%llx was unmapped during the "
                        "export",
                        (unsigned long long)key->reserve_start);
    for (size_t k = 0; exported && p->unmaps == unmaps && k < r->n; k++) {
        if (r->c[k].fd < 0 || chunk_known(p, &r->c[k]))
            continue; /* known, or a racing get exported it first: ours is closed below */
        r->c[k].id = new_id();
        if (chunk_add(p, &r->c[k]) != 0)
            break;
        r->c[k].fd = -1; /* the pool's now */
    }
    if (exported && p->unmaps == unmaps) {
        if (!p->live)
            live_start(p);
        rc = extent_export(p, r, key, device, h);
    }
    if (!p->n && !p->busy) /* nothing kept (no memory, or unmapped) */
        pool_free(p);
    byval_unlock(&pools_lock);
    for (size_t k = 0; k < r->n; k++)
        if (r->c[k].fd >= 0)
            close(r->c[k].fd);
    return rc;
}

/* The handle of ptr's extent, exported now or before. 0, or -1 (logged). */
static int vmm_handle(const byval_cu_real_t *rl, CUipcMemHandle *h, CUdeviceptr ptr, uint64_t start,
                      uint64_t size, int *fresh_p)
{
    uint64_t device = 0, gen = __atomic_load_n(&mapgen, __ATOMIC_ACQUIRE), buffer_id = 0;
    run_t r;
    if (byval_cu_attr_u64(rl, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr, &device) != 0 ||
        byval_cu_attr_u64(rl, CU_POINTER_ATTRIBUTE_BUFFER_ID, ptr, &buffer_id) != 0 ||
        run_walk(rl, start, size, ptr, &r) != 0)
        return -1;
    cu_export_key_t key = {start, size, r.first, r.end};
    int rc = 0;
    *fresh_p = !byval_exports_hit(exports, &key, h) || !run_known(&key, &r);
    if (*fresh_p)
        rc = export_vmm(rl, &key, &r, (uint32_t)device, h);
    if (rc == 0)
        fast_remember(ptr, &(cu_fast_t){buffer_id, gen, start, size, *h});
    free(r.c);
    return rc;
}

/* ---- legacy memory ----------------------------------------------------- */

/* A get: the pointer (the key: its allocation's start once made), the
 * hash of the handle's bytes. */
typedef struct legacy_call {
    uint64_t start, key;
    const byval_cu_real_t *rl;
} legacy_call_t;

static byval_exports_t *published;
static byval_once_t published_once = BYVAL_ONCE_INIT;

static int same_handle(const byval_export_t *e, const void *arg)
{
    return e->items[0].key == ((const legacy_call_t *)arg)->key;
}

static byval_export_t *legacy_make(void *arg)
{
    legacy_call_t *c = arg;
    uint64_t ptr = c->start, size = 0, ctx = 0;
    byval_enter();
    int ok = byval_cu_attr_u64(c->rl, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, ptr, &c->start) == 0 &&
        byval_cu_attr_u64(c->rl, CU_POINTER_ATTRIBUTE_RANGE_SIZE, ptr, &size) == 0;
    if (ok && byval_cu_attr_u64(c->rl, CU_POINTER_ATTRIBUTE_CONTEXT, ptr, &ctx) != 0)
        ctx = 0; /* no context known: the export ends at the free alone */
    byval_leave();
    byval_export_t *e;
    if (!ok || (c->start != ptr && byval_exports_hit(published, &c->start, c)) ||
        !(e = byval_export_alloc(sizeof(*e), 1)))
        return NULL;
    e->items[0] = BYVAL_EXPORT_ITEM(c->key, -1, 0, size, 0);
    e->ctx = (uintptr_t)ctx;
    return e;
}

/* The driver's handle needs nothing back. */
static const byval_backend_export_t legacy_ops = {
    "cuda legacy export", sizeof(uint64_t), 0, same_handle, legacy_make, NULL, NULL, NULL};

static void published_init(void)
{
    /* Read without the once by the free path: published with a release. */
    __atomic_store_n(&published, byval_export_table(&legacy_ops), __ATOMIC_RELEASE);
}

/* The driver handed out h for ptr: published, so importers hear of its free. */
static void legacy_published(const byval_cu_real_t *rl, const CUipcMemHandle *h, CUdeviceptr ptr)
{
    legacy_call_t c = {ptr, byval_reg_key_bytes(h->reserved, sizeof(h->reserved)), rl};
    byval_once(&published_once, published_init);
    if (published) /* the common repeat, an allocation's start, a hit */
        byval_exports_obtain(published, &c.start, &c);
}

void byval_cu_legacy_freed(CUdeviceptr ptr)
{
    uint64_t start = ptr;
    byval_exports_t *x = __atomic_load_n(&published, __ATOMIC_ACQUIRE);
    if (byval_exports_live(x))
        byval_exports_end(x, &start);
}

size_t byval_cu_legacy_ctx_gone(CUcontext ctx)
{
    byval_exports_t *x = __atomic_load_n(&published, __ATOMIC_ACQUIRE);
    return ctx && byval_exports_live(x) ? byval_exports_end_ctx(x, (uintptr_t)ctx) : 0;
}

CUresult byval_cu_ipc_get(byval_cu_get_fn next, CUipcMemHandle *h, CUdeviceptr ptr)
{
    if (!byval_init() || !byval_cfg.cuda || !h)
        return next(h, ptr);
    const byval_cu_real_t *rl = byval_cu_real();
    if (rl && byval_exports_live(__atomic_load_n(&exports, __ATOMIC_ACQUIRE))) {
        byval_enter();
        int hit = fast_lookup(rl, ptr, __atomic_load_n(&mapgen, __ATOMIC_ACQUIRE), h);
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
            legacy_published(rl, h, ptr);
        return r;
    }
    uint64_t legacy = 1, start = 0, size = 0;
    if (r != CUDA_ERROR_INVALID_VALUE || !rl ||
        byval_cu_attr_u64(rl, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, ptr, &legacy) != 0 ||
        legacy)
        return r; /* not VMM memory: the driver's answer stands */
    if (byval_cu_attr_u64(rl, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, ptr, &start) != 0 ||
        byval_cu_attr_u64(rl, CU_POINTER_ATTRIBUTE_RANGE_SIZE, ptr, &size) != 0)
        return r;
    byval_once(&export_once, export_init);
    if (!exports)
        return r;
    byval_ptracer_allow();
    byval_enter();
    int fresh = 0;
    int rc = vmm_handle(rl, h, ptr, start, size, &fresh);
    byval_leave();
    if (rc != 0) {
        BYVAL_LOG_WARN("cuIpcGetMemHandle(0x%llx): VMM memory cannot be exported by value; "
                       "returning the driver's %s",
                       (unsigned long long)ptr, byval_cu_err(r));
        return r;
    }
    if (fresh) {
        BYVAL_STAT_INC(exports);
        byval_log_export("", 0, (const void *)(uintptr_t)ptr, -1);
    } else {
        BYVAL_STAT_INC(export_hits);
    }
    return CUDA_SUCCESS;
}

/* ---- unmap, release, map ------------------------------------------------- */

void byval_cu_export_forget(CUdeviceptr ptr, size_t size, CUmemGenericAllocationHandle gh)
{
    if (!__atomic_load_n(&npools, __ATOMIC_RELAXED)) /* chunks kept with no export live too */
        return;
    size_t n = 0;
    uint64_t lo = ptr, hi = ptr + (size ? size : 1);
    byval_lock(&pools_lock);
    for (cu_pool_t *p = pools, *next; p; p = next) {
        next = p->next; /* p may be freed */
        if (gh) {
            for (size_t k = 0; k < p->n; k++)
                if (p->chunks[k].gh == gh) { /* mapped more than once: each mapping */
                    n += pool_drop(p, p->chunks[k].off, p->chunks[k].off + 1);
                    p->unmaps++;
                    k--;
                }
        } else if (p->start < hi && lo < p->start + p->size) {
            uint64_t olo = lo > p->start ? lo - p->start : 0;
            n += pool_drop(p, olo, hi - p->start);
            p->unmaps++; /* a get in flight exported what may be gone */
        }
        if (!p->n && !p->busy)
            pool_free(p);
    }
    byval_unlock(&pools_lock);
    BYVAL_STAT_ADD(frees, n);
    if (n)
        byval_log_export("", 1, (const void *)(uintptr_t)ptr, -1);
}

void byval_cu_export_mapped(void)
{
    __atomic_add_fetch(&mapgen, 1, __ATOMIC_ACQ_REL);
}

/* A fork child exported nothing: its copies of the pools' fds go, and
 * the pools with them (the export core forgets their entries itself). */
static void pools_fork_child(void)
{
    for (cu_pool_t *p = pools, *next; p; p = next) {
        next = p->next;
        for (size_t k = 0; k < p->n; k++)
            close(p->chunks[k].fd);
        free(p->chunks);
        free(p);
    }
    pools = NULL;
    npools = 0;
}
BYVAL_FORK_CHILD(cu_pools, pools_fork_child);
