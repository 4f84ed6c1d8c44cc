/* SPDX-License-Identifier: MIT */
/*
 * cu_import.c - cuIpcOpenMemHandle / cuIpcCloseMemHandle, and what a
 * context's destruction must release first.
 *
 * A by-value VMM handle names the exporter's manifest memfd. A miss
 * duplicates it with pidfd_getfd, reads the chunk list, duplicates each
 * chunk's fd, imports it (cuMemImportFromShareableHandle), reserves one
 * range as large as the exporter's, maps every chunk at its offset and
 * grants the current device read/write: every byte of the exporter's
 * buffer sits at the same offset. The pointer returned has the driver's
 * legacy semantics: the base of the exporter's cuMemGetAddressRange
 * allocation (callers add their offset). The mapping's lifetime is the
 * import core's (cache/imports.h): close drops an open; the exporter's
 * free or exit, the context's destruction or a budget release it.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/locks.h"
#include "cache/imports.h"
#include "handles/registry.h"
#include "handles/resolve.h"
#include "shim/config.h"
#include "shim/cu.h"
#include "shim/cu_manifest.h"
#include "shim/exporters.h"
#include "shim/init.h"
#include "shim/log.h"
#include "shim/stats.h"
#include "shim/track.h"
#include "shim/transport.h"

typedef struct cu_mapping {
    byval_import_t core; /* the lifecycle core's part (cache/imports.h) */
    CUdeviceptr base;
    uint64_t size;
    CUcontext ctx;
    uint8_t rec[BYVAL_WIRE_LEN]; /* a hit must carry the same record */
    uint32_t nchunks;
    byval_manifest_chunk_t chunks[]; /* offsets and sizes (fd fields unused) */
} cu_mapping_t;

static byval_imports_t *vmm_cache;
static byval_once_t import_once = BYVAL_ONCE_INIT;

/* Gives the mapping back to the driver; the caller frees m. */
static void mapping_unmap(cu_mapping_t *m)
{
    const byval_cu_real_t *rl = byval_cu_real();
    if (rl && m->base && !__atomic_load_n(&m->core.dead, __ATOMIC_RELAXED)) {
        byval_enter();
        /* From the watcher thread too: the context the mapping was made
         * in, which a purge keeps alive until this returns. */
        CUcontext saved = byval_cu_ctx_push(m->ctx);
        for (uint32_t i = 0; i < m->nchunks; i++)
            if (m->chunks[i].size)
                rl->mem_unmap(m->base + m->chunks[i].offset, m->chunks[i].size);
        rl->address_free(m->base, m->size);
        byval_cu_ctx_pop(saved);
        byval_leave();
    }
}

static void vmm_release(byval_import_t *b)
{
    mapping_unmap((cu_mapping_t *)b);
}

static int vmm_same(const byval_import_t *a, const byval_import_t *b)
{
    return memcmp(((const cu_mapping_t *)a)->rec, ((const cu_mapping_t *)b)->rec,
                  BYVAL_WIRE_LEN) == 0;
}

/* At the first close: where the exporter says whether it still lives. */
static void vmm_track(byval_import_t *b)
{
    byval_record_t rec;
    if (byval_wire_decode(((cu_mapping_t *)b)->rec, BYVAL_WIRE_LEN, &rec) == BYVAL_WIRE_OK)
        byval_track_record(b, &rec, BYVAL_REG_KEY(BYVAL_KIND_CU_VMM_MANIFEST, rec.alloc_id),
                           rec.fd_ino);
}

static byval_imports_ops_t vmm_ops = {
    .name = "cuda vmm import",
    /* The VMM fields only (40 bytes, not the legacy handle's 64 of the
     * union): half the hashing and comparing on every hit, and half the
     * key bytes per entry. */
    .key_len = BYVAL_CU_VMM_KEY_LEN,
    .release = vmm_release,
    .same = vmm_same,
    .track = vmm_track,
};

static void import_init(void)
{
    vmm_cache = byval_track_cache(&vmm_ops);
}

/* One error line per kind of failure (shim/log.h). */
static int vmm_seen[BYVAL_E_SYS + 2];
#define vmm_log_failure(st, ...)                                                               \
    byval_log_once_per_kind(vmm_seen, BYVAL_E_SYS + 2, (int)(st), "cuIpcOpenMemHandle", __VA_ARGS__)

/* vmm_map's work; the time of fd fetches and driver imports goes to
 * *fetch_ns and *import_ns. */
static CUresult vmm_map_chunks(const byval_cu_real_t *rl, int pidfd, const byval_record_t *rec,
                               const byval_manifest_t *man, cu_mapping_t **m_p,
                               uint64_t *fetch_ns, uint64_t *import_ns)
{
    char msg[512];
    CUdevice dev = 0;
    CUresult r = rl->ctx_get_device(&dev);
    if (r != CUDA_SUCCESS)
        return r;
    cu_mapping_t *m = calloc(1, sizeof(*m) + man->nchunks * sizeof(m->chunks[0]));
    if (!m)
        return CUDA_ERROR_OUT_OF_MEMORY;
    m->size = man->reserve_size;
    rl->ctx_get_current(&m->ctx);
    r = rl->address_reserve(&m->base, m->size, 0, 0, 0);
    if (r != CUDA_SUCCESS) {
        vmm_log_failure(BYVAL_E_SYS, "cuMemAddressReserve(%llu bytes) failed: %s",
                        (unsigned long long)m->size, byval_cu_err(r));
        m->base = 0;
        goto err;
    }
    for (uint32_t i = 0; i < man->nchunks; i++) {
        const byval_manifest_chunk_t *c = &man->chunks[i];
        int fd = -1;
        uint64_t t0 = byval_stats_now_ns();
        byval_status_t st =
            byval_fetch_more_fd(rec, pidfd, c->fd, c->fd_ino, &fd, msg, sizeof(msg));
        *fetch_ns += byval_stats_now_ns() - t0;
        if (st != BYVAL_OK) {
            vmm_log_failure(st, "chunk %u: %s", i, msg);
            r = st == BYVAL_E_NOFD ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_VALUE;
            goto err;
        }
        CUmemGenericAllocationHandle gh;
        t0 = byval_stats_now_ns();
        r = rl->import_shareable(&gh, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
        *import_ns += byval_stats_now_ns() - t0;
        close(fd);
        if (r != CUDA_SUCCESS) {
            vmm_log_failure(BYVAL_E_SYS, "cuMemImportFromShareableHandle(chunk %u of pid %u) "
                            "failed: %s", i, rec->pid, byval_cu_err(r));
            goto err;
        }
        r = rl->map(m->base + c->offset, c->size, 0, gh, 0);
        rl->mem_release(gh); /* the mapping holds the allocation now */
        if (r != CUDA_SUCCESS) {
            vmm_log_failure(BYVAL_E_SYS, "cuMemMap(chunk %u of pid %u, %llu bytes) failed: %s", i,
                            rec->pid, (unsigned long long)c->size, byval_cu_err(r));
            goto err;
        }
        m->chunks[m->nchunks++] = *c;
        CUmemAccessDesc acc;
        memset(&acc, 0, sizeof(acc));
        acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        acc.location.id = dev;
        acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        r = rl->set_access(m->base + c->offset, c->size, &acc, 1);
        if (r != CUDA_SUCCESS) {
            vmm_log_failure(BYVAL_E_SYS, "cuMemSetAccess(chunk %u of pid %u) failed: %s", i,
                            rec->pid, byval_cu_err(r));
            goto err;
        }
    }
    *m_p = m;
    return CUDA_SUCCESS;
err:
    mapping_unmap(m);
    free(m);
    return r;
}

/* Import every chunk and map it; on success *m_p owns the mapping. The
 * statistics split its time: fds fetched, driver imports, the rest
 * (reserve, map, access) mapping. */
static CUresult vmm_map(const byval_cu_real_t *rl, int pidfd, const byval_record_t *rec,
                        const byval_manifest_t *man, cu_mapping_t **m_p)
{
    uint64_t t_all = byval_stats_now_ns(), t_fetch = 0, t_import = 0, t;
    CUresult r = vmm_map_chunks(rl, pidfd, rec, man, m_p, &t_fetch, &t_import);
    t = byval_stats_now_ns() - t_all;
    BYVAL_STAT_ADD(miss_fetch_ns, t_fetch);
    BYVAL_STAT_ADD(miss_import_ns, t_import);
    BYVAL_STAT_ADD(miss_map_ns, t > t_fetch + t_import ? t - t_fetch - t_import : 0);
    return r;
}

/* Hand out the open of m (referenced by ref) at chunk offset chunk_off. */
static CUresult vmm_hand_out(cu_mapping_t *m, byval_lru_ref_t ref, uint64_t chunk_off,
                             CUdeviceptr *pdptr)
{
    if (chunk_off >= m->size) {
        byval_imports_unget(vmm_cache, ref);
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (byval_imports_open(vmm_cache, &m->core, ref, (uintptr_t)(m->base + chunk_off)) < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *pdptr = m->base + chunk_off;
    return CUDA_SUCCESS;
}

CUresult byval_cu_vmm_open(const byval_record_t *rec, const CUipcMemHandle *h,
                           unsigned int flags, CUdeviceptr *pdptr, int *ours_p)
{
    *ours_p = 1;
    const byval_cu_real_t *rl = byval_cu_real();
    byval_self_t self;
    CUcontext ctx = NULL;
    if (!rl)
        return CUDA_ERROR_NOT_INITIALIZED;
    byval_once(&import_once, import_init);
    if (!vmm_cache)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (rl->ctx_get_current(&ctx) != CUDA_SUCCESS || !ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    byval_exporters_poll();

    byval_cu_key_t key;
    memset(&key, 0, BYVAL_CU_VMM_KEY_LEN); /* no padding bytes of the key left unset */
    key.type = BYVAL_CU_KEY_VMM;
    key.flags = flags;
    key.ctx = (uintptr_t)ctx;
    key.u.vmm.pidns = rec->pidns;
    key.u.vmm.pid = rec->pid;
    key.u.vmm.identity = rec->identity;
    key.u.vmm.alloc_id = rec->alloc_id;
    /* Where the exporter's pointer sits in its reservation: every pointer
     * into one reservation shares one mapping (the key has no offset). */
    uint64_t chunk_off;
    memcpy(&chunk_off, h->reserved + BYVAL_CU_OFF_CHUNK, sizeof(chunk_off));

    unsigned long long t_open = BYVAL_LOG_T0();
    byval_lru_ref_t ref = 0;
    const uint8_t *rb = (const uint8_t *)h->reserved + BYVAL_CU_RECORD_OFF;
    cu_mapping_t *m = (cu_mapping_t *)byval_imports_get(vmm_cache, &key, &ref);
    if (m && memcmp(m->rec, rb, BYVAL_WIRE_LEN) != 0) {
        /* Same key, another record (a new export of the reservation, or a
         * forged or corrupted one): resolve it. */
        byval_imports_unget(vmm_cache, ref);
        m = NULL;
    }
    if (m) {
        CUresult r = vmm_hand_out(m, ref, chunk_off, pdptr);
        if (r == CUDA_SUCCESS) {
            BYVAL_STAT_INC(opens);
            BYVAL_STAT_INC(open_hits);
            byval_log_open("", BYVAL_ROUTE_HIT, m->core.pid, m->size,
                           (const void *)(uintptr_t)*pdptr, t_open);
        }
        return r;
    }
    /* rec was parsed without its checksum (a hit equals a checked record):
     * check it now, before anything trusts it. */
    byval_record_t checked;
    if (byval_wire_decode(rb, BYVAL_WIRE_LEN, &checked) != BYVAL_WIRE_OK) {
        *ours_p = 0;
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (byval_self_get(&self) != 0) /* who we are: only a miss needs it */
        return CUDA_ERROR_NOT_INITIALIZED;
    /* The driver's own open checks the current context first: with a reset
     * primary context current it answers CUDA_ERROR_CONTEXT_IS_DESTROYED,
     * while cuCtxGetDevice and cuMemAddressReserve, the calls a VMM import
     * makes, still succeed (H100, driver 580). cuCtxGetId answers as the
     * open does. A hit needs no check: a context's end purges its imports. */
    unsigned long long ctx_id;
    CUresult cr = rl->ctx_get_id ? rl->ctx_get_id(ctx, &ctx_id) : CUDA_SUCCESS;
    if (cr != CUDA_SUCCESS)
        return cr;
    BYVAL_STAT_INC(opens);
    BYVAL_STAT_INC(open_misses);

    char msg[512];
    int mfd = -1, pidfd = -1;
    uint64_t t0 = byval_stats_now_ns();
    byval_status_t st = byval_fetch_fd(rec, &self, &mfd, &pidfd, msg, sizeof(msg));
    BYVAL_STAT_ADD(miss_fetch_ns, byval_stats_now_ns() - t0);
    if (st != BYVAL_OK) {
        byval_fetch_done(rec, pidfd);
        BYVAL_STAT_INC(open_errors);
        vmm_log_failure(st, "%s", msg);
        return st == BYVAL_E_NOFD ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_VALUE;
    }
    byval_manifest_t *man = byval_manifest_read(mfd, rec->size, rec->pid, msg, sizeof(msg));
    close(mfd);
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    if (!man)
        vmm_log_failure(BYVAL_E_FDKIND, "%s", msg);
    else if (chunk_off >= man->reserve_size)
        vmm_log_failure(BYVAL_E_FDKIND, "malformed manifest from pid %u: offset beyond the "
                        "reservation", rec->pid);
    else
        r = vmm_map(rl, pidfd, rec, man, &m);
    free(man);
    byval_fetch_done(rec, pidfd);
    if (r != CUDA_SUCCESS) {
        BYVAL_STAT_INC(open_errors);
        return r;
    }
    memcpy(m->rec, rb, BYVAL_WIRE_LEN);
    m->core.bytes = m->size;
    m->core.ctx = (uintptr_t)ctx;
    m->core.addr = (uintptr_t)m->base;
    m->core.pidns = rec->pidns;
    m->core.pid = rec->pid;
    m->core.identity = rec->identity;
    byval_import_t *out;
    byval_imports_insert(vmm_cache, &key, &m->core, &out, &ref);
    if (!ref) /* every cached mapping is open: this one lives uncached */
        BYVAL_LOG_DEBUG("import cache full of open mappings (IPCBYVAL_CACHE_SIZE=%zu): "
                        "0x%llx not cached", byval_cfg.cache_size,
                        (unsigned long long)((cu_mapping_t *)out)->base);
    r = vmm_hand_out((cu_mapping_t *)out, ref, chunk_off, pdptr);
    if (r == CUDA_SUCCESS)
        byval_log_open("", byval_fetch_route(), rec->pid, ((cu_mapping_t *)out)->size,
                       (const void *)(uintptr_t)*pdptr, t_open);
    return r;
}

CUresult byval_cu_ipc_open(byval_cu_open_fn next, CUdeviceptr *pdptr, CUipcMemHandle h,
                           unsigned int flags)
{
    byval_record_t rec;
    if (!byval_init() || !byval_cfg.cuda || !pdptr)
        return next(pdptr, h, flags);
    const uint8_t *rb = (const uint8_t *)h.reserved + BYVAL_CU_RECORD_OFF;
    /* Parsed without the checksum: a hit must equal a cached (checked)
     * record, and a miss checks it before using it. */
    if (byval_wire_is_candidate(rb, BYVAL_WIRE_LEN) &&
        byval_wire_parse(rb, BYVAL_WIRE_LEN, &rec) == BYVAL_WIRE_OK &&
        rec.kind == BYVAL_KIND_CU_VMM_MANIFEST) {
        int ours;
        CUresult r = byval_cu_vmm_open(&rec, &h, flags, pdptr, &ours);
        if (ours)
            return r;
    }
    if (byval_cfg.cuda_legacy_cache)
        return byval_cu_legacy_open(next, pdptr, h, flags);
    BYVAL_STAT_INC(open_passthrough);
    return next(pdptr, h, flags);
}

CUresult byval_cu_ipc_close(byval_cu_close_fn next, CUdeviceptr ptr)
{
    if (!byval_init() || !byval_cfg.cuda)
        return next(ptr);
    unsigned long long t_close = BYVAL_LOG_T0();
    switch (byval_imports_close((uintptr_t)ptr)) {
    case BYVAL_IMPORTS_CLOSED:
        BYVAL_STAT_INC(closes);
        byval_log_close("", (const void *)(uintptr_t)ptr,
                        "closed (the mapping stays cached until its exporter frees it)", t_close);
        return CUDA_SUCCESS;
    case BYVAL_IMPORTS_NOT_OPEN:
        /* As the driver answers a pointer that is not open; the cached
         * mapping behind it must not be touched. */
        BYVAL_STAT_INC(double_closes);
        byval_log_double_close("cuIpcCloseMemHandle", (const void *)(uintptr_t)ptr);
        return CUDA_ERROR_INVALID_VALUE;
    default:
        return next(ptr); /* not a mapping we handed out */
    }
}
