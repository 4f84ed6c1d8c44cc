/* SPDX-License-Identifier: MIT */
/*
 * cu_import.c - the CUDA import backends (cache/imports.h) and
 * cuIpcOpenMemHandle / cuIpcCloseMemHandle.
 *
 * VMM: one mirror per exporter pool and local context, a reservation as
 * large as the exporter's into which every chunk a handle names is
 * imported and mapped once, at its offset. The pointer handed out is the
 * mirror's address of the handle's first chunk (the driver's legacy
 * semantics). A mirror remembers the records it served (a re-open is a
 * hit); another record maps what the mirror lacks and joins them. It
 * lives while its exporter's pool entry does (cu_export.c renews it at
 * every unmap in the pool); a dead mirror still open gives back the
 * chunks no open needs.
 *
 * Legacy (cuMemAlloc) handles are copy-by-value already; the cache saves
 * the driver's open+close (~56 us), keyed on the 64 handle bytes, the
 * context and flags. The driver's bytes 8-11 carry the exporter's pid:
 * an exporter running ipcbyval publishes its frees in its registry.
 */
#include <string.h>
#include <unistd.h>

#include "cache/config.h"
#include "cache/exporters.h"
#include "cache/imports.h"
#include "cache/init.h"
#include "cache/locks.h"
#include "cache/log.h"
#include "cache/stats.h"
#include "cache/transport.h"
#include "handles/manifest.h"
#include "handles/registry.h"
#include "handles/registry_view.h"
#include "handles/resolve.h"
#include "handles/transport.h"
#include "shim/cu.h"

/* Records a mirror remembers (a hit); more are served as misses that
 * find their chunks mapped already. */
#define MIRROR_RECORDS 32

/* The key of both caches; a VMM key is its first 40 bytes. */
enum { CU_KEY_VMM = 1, CU_KEY_LEGACY = 2 };
typedef struct cu_key {
    uint32_t type, flags;
    uintptr_t ctx;
    union {
        struct {
            uint32_t pidns, pid;
            uint64_t identity, alloc_id; /* alloc_id: the exporter's pool */
        } vmm;
        unsigned char legacy[64];
    } u;
} cu_key_t;
#define VMM_KEY_LEN (offsetof(cu_key_t, u) + sizeof(((cu_key_t *)0)->u.vmm))
_Static_assert(VMM_KEY_LEN == 40, "a VMM key is 40 bytes, no padding");

typedef struct mirror_chunk {
    uint64_t off, size, id;
} mirror_chunk_t;

typedef struct cu_mirror {
    byval_import_t core; /* the lifecycle core's part (cache/imports.h) */
    CUdeviceptr base;
    uint64_t size;
    CUcontext ctx;
    uint32_t nrecs;   /* records served, published with a release */
    uint32_t forgot;  /* served more than it remembers: what opens need is unknown */
    uint32_t watched; /* alive when made: its death is an unmap in the pool */
    struct {
        uint64_t first, end; /* the chunk offset the handle carries; its run's end */
        uint8_t rec[BYVAL_WIRE_LEN];
    } recs[MIRROR_RECORDS];
    size_t n, cap; /* chunks mapped, by offset: written under mirror_lock */
    mirror_chunk_t *chunks;
    struct cu_mirror *next, *prev; /* live mirrors (mirrors_lock) */
} cu_mirror_t;

static byval_lock_t mirror_lock = BYVAL_LOCK_INIT(CU_MIRROR);
BYVAL_LOCK_STATIC(cu_mirror, &mirror_lock);
static byval_lock_t mirrors_lock = BYVAL_LOCK_INIT(CU_MIRRORS);
BYVAL_LOCK_STATIC(cu_mirrors, &mirrors_lock);
static cu_mirror_t *mirrors;

/* A fork child holds no mirror (the import core drops them unreleased). */
static void mirrors_fork_child(void)
{
    mirrors = NULL;
}
BYVAL_FORK_CHILD(cu_mirrors, mirrors_fork_child);

/* Gives every chunk and the reservation back to the driver; the caller
 * frees m. */
static void mirror_unmap(cu_mirror_t *m)
{
    const byval_cu_real_t *rl = byval_cu_real();
    if (rl && m->base && !__atomic_load_n(&m->core.dead, __ATOMIC_RELAXED)) {
        /* From the watcher thread too: the context the mapping was made
         * in, which a purge keeps alive until this returns. */
        CUcontext saved = byval_cu_ctx_push(m->ctx);
        for (size_t i = 0; i < m->n; i++)
            rl->mem_unmap(m->base + m->chunks[i].off, m->chunks[i].size);
        rl->address_free(m->base, m->size);
        byval_cu_ctx_pop(saved);
    }
    free(m->chunks);
}

static void vmm_release(byval_import_t *b)
{
    cu_mirror_t *m = (cu_mirror_t *)b;
    byval_lock(&mirrors_lock);
    if (m->prev)
        m->prev->next = m->next;
    else if (mirrors == m)
        mirrors = m->next;
    if (m->next)
        m->next->prev = m->prev;
    byval_unlock(&mirrors_lock);
    mirror_unmap(m);
}

/* m is dead (its exporter unmapped a chunk of the pool) and may be open:
 * unmap the chunks that no open's run covers, as natively the exporter's
 * freed memory comes back once no import holds it. Under the release gate. */
static void mirror_prune(void *arg)
{
    cu_mirror_t *m = arg;
    const byval_cu_real_t *rl = byval_cu_real();
    uint32_t nrecs = __atomic_load_n(&m->nrecs, __ATOMIC_ACQUIRE);
    byval_lock(&mirror_lock);
    if (!rl || !m->watched || __atomic_load_n(&m->forgot, __ATOMIC_RELAXED) ||
        __atomic_load_n(&m->core.dead, __ATOMIC_RELAXED) || byval_import_alive(&m->core)) {
        byval_unlock(&mirror_lock);
        return;
    }
    int open[MIRROR_RECORDS];
    for (uint32_t i = 0; i < nrecs; i++)
        open[i] = byval_imports_opens(&m->core, (uintptr_t)(m->base + m->recs[i].first)) > 0;
    size_t kept = 0, dropped = 0;
    CUcontext saved = NULL;
    for (size_t k = 0; k < m->n; k++) {
        const mirror_chunk_t *c = &m->chunks[k];
        int needed = 0;
        for (uint32_t i = 0; i < nrecs && !needed; i++)
            needed = open[i] && c->off < m->recs[i].end && m->recs[i].first < c->off + c->size;
        if (needed) {
            m->chunks[kept++] = *c;
            continue;
        }
        if (!dropped++)
            saved = byval_cu_ctx_push(m->ctx);
        rl->mem_unmap(m->base + c->off, c->size);
    }
    if (dropped) {
        byval_cu_ctx_pop(saved);
        BYVAL_LOG_DEBUG("open mirror of pid %u: %zu chunk%s no open needs given back", m->core.pid,
                        dropped, dropped == 1 ? "" : "s");
    }
    m->n = kept;
    byval_unlock(&mirror_lock);
}

/* After an exporter's event (the watcher thread): dead mirrors still open
 * give back what no open needs now, without waiting for a close. */
static void prune_dead(void *arg)
{
    byval_lock(&mirrors_lock);
    for (cu_mirror_t *m = mirrors; m; m = m->next)
        if (!byval_import_alive(&m->core))
            mirror_prune(&m->core);
    byval_unlock(&mirrors_lock);
}

/* 1 when m has served rec for a handle carrying first. */
static int served(const cu_mirror_t *m, const uint8_t *rec, uint64_t first)
{
    uint32_t n = __atomic_load_n(&m->nrecs, __ATOMIC_ACQUIRE);
    for (uint32_t i = 0; i < n; i++)
        if (m->recs[i].first == first && memcmp(m->recs[i].rec, rec, BYVAL_WIRE_LEN) == 0)
            return 1;
    return 0;
}

/* m serves rec, whose run ends at end, from now on (if it has room to
 * remember it). */
static void serve(cu_mirror_t *m, const uint8_t *rec, uint64_t first, uint64_t end)
{
    uint32_t n = m->nrecs;
    if (served(m, rec, first))
        return;
    if (n == MIRROR_RECORDS) {
        __atomic_store_n(&m->forgot, 1, __ATOMIC_RELAXED);
        return;
    }
    m->recs[n].first = first;
    m->recs[n].end = end;
    memcpy(m->recs[n].rec, rec, BYVAL_WIRE_LEN);
    __atomic_store_n(&m->nrecs, n + 1, __ATOMIC_RELEASE);
}

static int vmm_same(const byval_import_t *a, const byval_import_t *b)
{
    const cu_mirror_t *fresh = (const cu_mirror_t *)b;
    return served((const cu_mirror_t *)a, fresh->recs[0].rec, fresh->recs[0].first);
}

static byval_backend_import_t vmm;
#define vmm_log_failure(st, ...) byval_import_refuse(&vmm, vmm.api, (st), __VA_ARGS__)

static CUresult driver_failed(CUresult r, const char *call, uint32_t pid, uint64_t bytes)
{
    vmm_log_failure(BYVAL_E_SYS, "%s(%llu bytes of pid %u) failed: %s", call,
                    (unsigned long long)bytes, pid, byval_cu_err(r));
    return r;
}

/* An open: what the flow's callbacks are given. */
typedef struct vmm_req {
    const byval_record_t *rec; /* parsed, checked by vmm_check */
    const uint8_t *rb;
    uint64_t first, pool_id; /* the handle's chunk offset and pool */
    CUcontext ctx;
    int pidfd; /* a miss's: the exporter's, from the manifest's fetch */
    const byval_manifest_t *man;
    const void *mirror; /* a miss's: the mirror that serves it (if it forgot) */
} vmm_req_t;

/* A chunk of the manifest that m maps already (0), lacks (1), or that
 * another chunk holds the place of (-1: the exporter mapped anew there). */
static int chunk_need(const cu_mirror_t *m, const byval_manifest_chunk_t *c, size_t *at_p)
{
    size_t lo = *at_p = byval_cu_chunk_at(m->chunks, m->n, sizeof(m->chunks[0]), c->offset);
    if (lo == m->n || m->chunks[lo].off >= c->offset + c->size)
        return 1;
    const mirror_chunk_t *h = &m->chunks[lo];
    return h->off == c->offset && h->size == c->size && h->id == c->id ? 0 : -1;
}

/* Import chunk c of rec's exporter and map it into m at its offset (at:
 * its place in m->chunks; first: the handle's first chunk). The time of
 * the fetch and of the driver's import goes to t[0] and t[1].
 * CUDA_ERROR_NOT_FOUND: the handle's run ends before c. */
static CUresult chunk_map(const vmm_req_t *q, const byval_manifest_chunk_t *c, int first,
                          CUdevice dev, cu_mirror_t *m, size_t at, uint64_t t[2])
{
    const byval_cu_real_t *rl = byval_cu_real();
    const byval_record_t *rec = q->rec;
    char msg[512];
    mirror_chunk_t *a = byval_cu_room(m->chunks, &m->cap, m->n, sizeof(*a));
    if (!a)
        return CUDA_ERROR_OUT_OF_MEMORY;
    m->chunks = a;
    /* Proven as the chunk's own export: its registry key is the chunk's
     * id, the kind memory. */
    byval_record_t crec = *rec;
    crec.kind = BYVAL_KIND_CU_VMM;
    crec.alloc_id = c->id;
    crec.fd = c->fd, crec.fd_ino = c->fd_ino;
    crec.tag = c->tag; /* what the exporter's broker asks of another uid */
    int fd = -1;
    uint64_t t0 = byval_stats_now_ns();
    byval_status_t st = byval_transport_fetch_more_fd(&crec, byval_cfg.transport, q->pidfd, c->fd,
                                                      c->fd_ino, 0, &fd, msg, sizeof(msg));
    t[0] += byval_stats_now_ns() - t0;
    if (st == BYVAL_E_FDKIND && !first &&
        byval_track_listed(rec, q->pidfd, BYVAL_REG_KEY(BYVAL_KIND_CU_VMM_MANIFEST, rec->alloc_id),
                           rec->fd_ino)) {
        /* Not listed while the handle's manifest is: the exporter unmapped
         * it since the handle was made, which cut the handle's run there
         * (cu_export.c; an export that ends unlists its manifest first). */
        BYVAL_LOG_DEBUG("open: chunk at offset %llu of pid %u: %s: the handle's run ends "
                        "before it",
                        (unsigned long long)c->offset, rec->pid, msg);
        return CUDA_ERROR_NOT_FOUND;
    }
    if (st != BYVAL_OK)
        return vmm_log_failure(st, "chunk at offset %llu: %s", (unsigned long long)c->offset, msg);
    CUmemGenericAllocationHandle gh;
    t0 = byval_stats_now_ns();
    CUresult r =
        rl->import_shareable(&gh, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    t[1] += byval_stats_now_ns() - t0;
    close(fd);
    if (r != CUDA_SUCCESS)
        return driver_failed(r, "cuMemImportFromShareableHandle", rec->pid, c->size);
    r = rl->map(m->base + c->offset, c->size, 0, gh, 0);
    rl->mem_release(gh); /* the mapping holds the allocation now */
    if (r != CUDA_SUCCESS)
        return driver_failed(r, "cuMemMap", rec->pid, c->size);
    CUmemAccessDesc acc = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev},
                           .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    r = rl->set_access(m->base + c->offset, c->size, &acc, 1);
    if (r != CUDA_SUCCESS) {
        rl->mem_unmap(m->base + c->offset, c->size);
        return driver_failed(r, "cuMemSetAccess", rec->pid, c->size);
    }
    memmove(&m->chunks[at + 1], &m->chunks[at], (m->n - at) * sizeof(m->chunks[0]));
    m->chunks[at] = (mirror_chunk_t){c->offset, c->size, c->id};
    m->n++;
    return CUDA_SUCCESS;
}

/* Map every chunk of man that m lacks; the bytes mapped in *added_p, the
 * end of the run mapped in *end_p. CUDA_ERROR_ALREADY_MAPPED when another
 * chunk holds a place in m. The statistics split the time: fds fetched,
 * driver imports, the rest. */
static CUresult mirror_fill(const vmm_req_t *q, cu_mirror_t *m, uint64_t *added_p, uint64_t *end_p)
{
    const byval_manifest_t *man = q->man;
    uint64_t t_all = byval_stats_now_ns(), t[2] = {0, 0};
    CUdevice dev = 0;
    CUresult r = byval_cu_real()->ctx_get_device(&dev);
    *added_p = 0;
    for (uint32_t i = 0; r == CUDA_SUCCESS && i < man->nchunks; i++) {
        size_t at;
        int need = chunk_need(m, &man->chunks[i], &at);
        if (need < 0)
            r = CUDA_ERROR_ALREADY_MAPPED;
        else if (need && (r = chunk_map(q, &man->chunks[i], i == 0, dev, m, at, t)) == CUDA_SUCCESS)
            *added_p += man->chunks[i].size;
        if (r == CUDA_SUCCESS)
            *end_p = man->chunks[i].offset + man->chunks[i].size;
    }
    if (r == CUDA_ERROR_NOT_FOUND)
        r = CUDA_SUCCESS; /* the run was cut: what comes before it is mapped */
    uint64_t all = byval_stats_now_ns() - t_all;
    BYVAL_STAT_ADD(miss_fetch_ns, t[0]);
    BYVAL_STAT_ADD(miss_import_ns, t[1]);
    BYVAL_STAT_ADD(miss_map_ns, all > t[0] + t[1] ? all - t[0] - t[1] : 0);
    return r;
}

/* A new mirror of man's pool holding its chunks, in *m_p. */
static CUresult mirror_new(const vmm_req_t *q, cu_mirror_t **m_p)
{
    const byval_cu_real_t *rl = byval_cu_real();
    const byval_manifest_t *man = q->man;
    cu_mirror_t *m = calloc(1, sizeof(*m));
    if (!m)
        return CUDA_ERROR_OUT_OF_MEMORY;
    m->size = man->reserve_size;
    m->ctx = q->ctx;
    CUresult r = rl->address_reserve(&m->base, m->size, 0, 0, 0);
    if (r != CUDA_SUCCESS) {
        free(m);
        return driver_failed(r, "cuMemAddressReserve", q->rec->pid, man->reserve_size);
    }
    /* The pool's entry, before any chunk is fetched: an unmap from here on
     * changes it (the mirror is then released at its last close). */
    byval_track_record(&m->core, q->rec, q->pidfd, BYVAL_CU_POOL_KEY(man->pool_id),
                       BYVAL_CU_POOL_INO);
    uint64_t added = 0, end = 0;
    r = mirror_fill(q, m, &added, &end);
    if (r != CUDA_SUCCESS) {
        mirror_unmap(m);
        if (m->core.tracker)
            byval_reg_view_put(m->core.tracker);
        free(m);
        return r;
    }
    m->core.bytes = added;
    m->core.span = m->size;
    m->core.ctx = (uintptr_t)q->ctx;
    m->core.addr = (uintptr_t)m->base;
    m->core.pidns = q->rec->pidns;
    m->core.pid = q->rec->pid;
    m->core.identity = q->rec->identity;
    m->recs[0].end = end; /* its first record's, served by the caller */
    byval_lock(&mirrors_lock);
    m->next = mirrors;
    if (mirrors)
        mirrors->prev = m;
    mirrors = m;
    byval_unlock(&mirrors_lock);
    /* While open, a mirror may hold chunks that no open needs once its
     * exporter unmaps them: the watcher must hear of that. */
    m->watched = m->core.live && byval_import_alive(&m->core);
    if (m->watched)
        byval_track_watch(&m->core);
    *m_p = m;
    return CUDA_SUCCESS;
}

/* Map what m lacks of man and serve rb from m. CUDA_ERROR_ALREADY_MAPPED
 * when m cannot hold it (its pool changed since m was made): the caller
 * makes a new mirror. */
static CUresult mirror_grow(const vmm_req_t *q, cu_mirror_t *m)
{
    uint64_t added = 0, end = 0;
    int over = 0;
    CUresult r = CUDA_SUCCESS;
    byval_lock(&mirror_lock);
    if (!served(m, q->rb, q->first)) {
        if (!byval_import_alive(&m->core))
            r = CUDA_ERROR_ALREADY_MAPPED;
        else
            r = mirror_fill(q, m, &added, &end);
        if (added)
            over = byval_imports_grow(&m->core, added);
        if (r == CUDA_SUCCESS)
            serve(m, q->rb, q->first, end);
    }
    byval_unlock(&mirror_lock);
    if (over)
        byval_imports_shed();
    return r;
}

/* The mirror's address of the handle's first chunk. */
static uintptr_t vmm_serves(const byval_import_t *b, const void *req)
{
    const cu_mirror_t *m = (const cu_mirror_t *)b;
    const vmm_req_t *q = req;
    return (q->mirror == m || served(m, q->rb, q->first)) && q->first < m->size
        ? (uintptr_t)(m->base + q->first)
        : 0;
}

/* Died after the lookup: it may have given back the chunks this open
 * needs before the open was counted (mirror_prune). */
static int vmm_stale(const byval_import_t *b)
{
    return ((const cu_mirror_t *)b)->watched && !byval_import_alive(b);
}

static int vmm_check(void *req)
{
    const vmm_req_t *q = req;
    const byval_cu_real_t *rl = byval_cu_real();
    byval_record_t checked;
    byval_self_t self;
    unsigned long long ctx_id;
    if (byval_wire_decode(q->rb, BYVAL_WIRE_LEN, &checked) != BYVAL_WIRE_OK)
        return BYVAL_IMPORT_PASS;
    if (byval_self_get(&self) != 0)
        return CUDA_ERROR_NOT_INITIALIZED;
    /* With a reset primary context current the driver's open answers
     * CONTEXT_IS_DESTROYED while cuCtxGetDevice and cuMemAddressReserve
     * succeed (H100, driver 580): cuCtxGetId answers as the open does. */
    return rl->ctx_get_id ? (int)rl->ctx_get_id(q->ctx, &ctx_id) : CUDA_SUCCESS;
}

/* The manifest rec names, checked against the handle's pool and chunk. */
static byval_manifest_t *manifest_fetch(vmm_req_t *q, CUresult *r_p)
{
    char msg[512];
    int mfd = -1;
    const byval_record_t *rec = q->rec;
    *r_p = (CUresult)byval_import_fetch(&vmm, vmm.api, rec, &mfd, &q->pidfd);
    if (*r_p != CUDA_SUCCESS)
        return NULL;
    byval_manifest_t *man = byval_manifest_read(mfd, rec->size, rec->pid, msg, sizeof(msg));
    close(mfd);
    *r_p = CUDA_ERROR_INVALID_VALUE;
    if (!man)
        vmm_log_failure(BYVAL_E_FDKIND, "%s", msg);
    else if (man->pool_id != q->pool_id || man->chunks[0].offset != q->first)
        vmm_log_failure(BYVAL_E_FDKIND,
                        "malformed handle from pid %u: its pool or chunk is not its manifest's",
                        rec->pid);
    else
        return man;
    free(man);
    return NULL;
}

static int vmm_import(void *req, byval_import_t *had, byval_import_t **m_p)
{
    vmm_req_t *q = req;
    cu_mirror_t *m = (cu_mirror_t *)had;
    CUresult r;
    q->pidfd = -1;
    byval_manifest_t *man = manifest_fetch(q, &r);
    q->man = man;
    if (man)
        r = m && m->size == man->reserve_size ? mirror_grow(q, m) : CUDA_ERROR_ALREADY_MAPPED;
    if (r == CUDA_ERROR_ALREADY_MAPPED) { /* none, or one that cannot hold it */
        r = mirror_new(q, &m);
        if (r == CUDA_SUCCESS)
            serve(m, q->rb, q->first, m->recs[0].end);
    }
    free(man);
    byval_fetch_done(q->rec, q->pidfd);
    if (r != CUDA_SUCCESS)
        BYVAL_STAT_INC(open_errors);
    else
        *m_p = &m->core, q->mirror = m;
    return r;
}

#define CU_BACKEND(nm, what_, key_len_)                                                           \
    .name = nm, .api = "cuIpcOpenMemHandle", .close_api = "cuIpcCloseMemHandle", .what = what_,   \
    .kept = "closed (the mapping stays cached until its exporter frees it)", .key_len = key_len_, \
    .nomem = CUDA_ERROR_OUT_OF_MEMORY, .invalid = CUDA_ERROR_INVALID_VALUE

/* No .track: a mirror notes its pool's entry when it is made. */
static byval_backend_import_t vmm = {
    CU_BACKEND("cuda vmm import", "", VMM_KEY_LEN),
    .check = vmm_check,
    .serves = vmm_serves,
    .import = vmm_import,
    .stale = vmm_stale,
    .release = vmm_release,
    .same = vmm_same,
    .closed_dead = mirror_prune,
    .on_event = prune_dead,
};

static int vmm_open(const byval_record_t *rec, const CUipcMemHandle *h, unsigned int flags,
                    uintptr_t *out)
{
    const byval_cu_real_t *rl = byval_cu_real();
    vmm_req_t q = {.rec = rec, .rb = (const uint8_t *)h->reserved + BYVAL_CU_RECORD_OFF};
    if (!rl)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (rl->ctx_get_current(&q.ctx) != CUDA_SUCCESS || !q.ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    byval_exporters_poll();
    /* Every handle into one pool shares one mirror: the key has no offset. */
    memcpy(&q.first, h->reserved + BYVAL_CU_OFF_CHUNK, sizeof(q.first));
    memcpy(&q.pool_id, h->reserved + BYVAL_CU_OFF_POOL, sizeof(q.pool_id));
    cu_key_t key = {CU_KEY_VMM, flags, (uintptr_t)q.ctx,
                    .u.vmm = {rec->pidns, rec->pid, rec->identity, q.pool_id}};
    return byval_import_open(&vmm, &key, &q, out);
}

/* ---- legacy --------------------------------------------------------------- */

typedef struct cu_legacy {
    byval_import_t core;
    CUdeviceptr ptr;
    CUcontext ctx;
    uint8_t handle[CU_IPC_HANDLE_SIZE];
} cu_legacy_t;

typedef struct legacy_req {
    byval_cu_open_fn next;
    const CUipcMemHandle *h;
    unsigned int flags;
    CUcontext ctx;
} legacy_req_t;

static void legacy_release(byval_import_t *b)
{
    cu_legacy_t *e = (cu_legacy_t *)b;
    const byval_cu_real_t *rl = byval_cu_real();
    if (rl && !__atomic_load_n(&b->dead, __ATOMIC_RELAXED)) {
        CUcontext saved = byval_cu_ctx_push(e->ctx);
        CUresult r = rl->ipc_close(e->ptr);
        byval_cu_ctx_pop(saved);
        if (r != CUDA_SUCCESS)
            BYVAL_LOG_DEBUG("cuIpcCloseMemHandle(0x%llx) on release: %s",
                            (unsigned long long)e->ptr, byval_cu_err(r));
    }
}

/* Driver 580 puts the exporter's getpid() in bytes 8-11 (little endian). */
static void legacy_track(byval_import_t *b)
{
    const cu_legacy_t *e = (const cu_legacy_t *)b;
    uint32_t pid = (uint32_t)e->handle[8] | (uint32_t)e->handle[9] << 8 |
        (uint32_t)e->handle[10] << 16 | (uint32_t)e->handle[11] << 24;
    byval_track_pid(b, pid, byval_reg_key_bytes(e->handle, sizeof(e->handle)));
}

/* A racing thread's open of the same handle gets the same pointer (the
 * driver counts opens): the core keeps one mapping and closes the other. */
static int legacy_import(void *req, byval_import_t *had, byval_import_t **m_p)
{
    const legacy_req_t *q = req;
    const byval_cu_real_t *rl = byval_cu_real();
    CUdeviceptr p = 0, base = 0;
    size_t size = 0;
    uint64_t t0 = byval_stats_now_ns();
    byval_enter();
    CUresult r = q->next(&p, *q->h, q->flags);
    if (r == CUDA_SUCCESS && rl->mem_get_address_range(&base, &size, p) != CUDA_SUCCESS)
        size = 0;
    byval_leave();
    BYVAL_STAT_ADD(miss_import_ns, byval_stats_now_ns() - t0);
    if (r != CUDA_SUCCESS)
        return r;
    cu_legacy_t *e = calloc(1, sizeof(*e));
    if (!e) {
        legacy_release(&(cu_legacy_t){.ptr = p, .ctx = q->ctx}.core);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    e->ptr = p;
    e->ctx = q->ctx;
    memcpy(e->handle, q->h->reserved, sizeof(e->handle));
    e->core = (byval_import_t){.bytes = size, .ctx = (uintptr_t)q->ctx, .addr = (uintptr_t)p};
    *m_p = &e->core;
    return CUDA_SUCCESS;
}

/* No .same, .serves: the key holds all 64 handle bytes (one record). */
static byval_backend_import_t legacy = {
    CU_BACKEND("cuda legacy import", "legacy ", sizeof(cu_key_t)),
    .driver_route = 1,
    .import = legacy_import,
    .release = legacy_release,
    .track = legacy_track,
    .shared_ptr = 1,
};

static int legacy_open(byval_cu_open_fn next, const CUipcMemHandle *h, unsigned int flags,
                       uintptr_t *out)
{
    const byval_cu_real_t *rl = byval_cu_real();
    legacy_req_t q = {next, h, flags, NULL};
    if (!rl || rl->ctx_get_current(&q.ctx) != CUDA_SUCCESS || !q.ctx)
        return BYVAL_IMPORT_PASS;
    cu_key_t key = {.type = CU_KEY_LEGACY, .flags = flags, .ctx = (uintptr_t)q.ctx};
    memcpy(key.u.legacy, h->reserved, sizeof(key.u.legacy));
    return byval_import_open(&legacy, &key, &q, out);
}

/* ---- the entry points ----------------------------------------------------- */

CUresult byval_cu_ipc_open(byval_cu_open_fn next, CUdeviceptr *pdptr, CUipcMemHandle h,
                           unsigned int flags)
{
    byval_record_t rec;
    uintptr_t out = 0;
    int r = BYVAL_IMPORT_PASS;
    if (!byval_init() || !byval_cfg.cuda || !pdptr)
        return next(pdptr, h, flags);
    const uint8_t *rb = (const uint8_t *)h.reserved + BYVAL_CU_RECORD_OFF;
    /* Parsed without the checksum: a hit equals a checked record, a miss
     * checks it (vmm_check). */
    if (byval_wire_is_candidate(rb, BYVAL_WIRE_LEN) &&
        byval_wire_parse(rb, BYVAL_WIRE_LEN, &rec) == BYVAL_WIRE_OK &&
        rec.kind == BYVAL_KIND_CU_VMM_MANIFEST)
        r = vmm_open(&rec, &h, flags, &out);
    if (r == BYVAL_IMPORT_PASS && byval_cfg.cuda_legacy_cache)
        r = legacy_open(next, &h, flags, &out);
    if (r == BYVAL_IMPORT_PASS) {
        BYVAL_STAT_INC(open_passthrough);
        return next(pdptr, h, flags);
    }
    if (r == CUDA_SUCCESS)
        *pdptr = (CUdeviceptr)out;
    return (CUresult)r;
}

CUresult byval_cu_ipc_close(byval_cu_close_fn next, CUdeviceptr ptr)
{
    if (!byval_init() || !byval_cfg.cuda)
        return next(ptr);
    int r = byval_import_close(&vmm, (uintptr_t)ptr, (const void *)(uintptr_t)ptr);
    return r == BYVAL_IMPORT_PASS ? next(ptr) : (CUresult)r;
}
