/* SPDX-License-Identifier: MIT */
/*
 * cu_import.c - cuIpcOpenMemHandle / cuIpcCloseMemHandle.
 *
 * A by-value VMM handle names the exporter's manifest memfd. A miss
 * duplicates it with pidfd_getfd, reads the chunk list, duplicates each
 * chunk's fd, imports it (cuMemImportFromShareableHandle), reserves one
 * range as large as the exporter's, maps every chunk at its offset and
 * grants the current device read/write: every byte of the exporter's
 * buffer sits at the same offset. The pointer returned has the driver's
 * legacy semantics: the base of the exporter's cuMemGetAddressRange
 * allocation (callers add their offset). The mapping stays in the import
 * cache; close drops a reference, eviction or exporter exit unmaps.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/lru.h"
#include "cache/ptrmap.h"
#include "handles/resolve.h"
#include "shim/config.h"
#include "shim/cu.h"
#include "shim/cu_manifest.h"
#include "shim/exporters.h"
#include "shim/init.h"
#include "shim/log.h"
#include "shim/stats.h"
#include "shim/transport.h"

typedef struct cu_mapping {
    CUdeviceptr base;
    uint64_t size;
    uint8_t rec[BYVAL_WIRE_LEN]; /* a hit must carry the same record */
    uint32_t nchunks;
    byval_manifest_chunk_t chunks[]; /* offsets and sizes (fd fields unused) */
} cu_mapping_t;

/* What the open pointer map keeps for each pointer (cu.h). */
typedef struct cu_open {
    uint32_t type;
    uint32_t zero; /* the map compares keys whole: no padding left undefined */
    byval_lru_ref_t ref;
} cu_open_t;

static byval_lru_t *vmm_cache;
static byval_ptrmap_t *open_ptrs;
static pthread_once_t import_once = PTHREAD_ONCE_INIT;

static void mapping_release(cu_mapping_t *m)
{
    const byval_cu_real_t *rl = byval_cu_real();
    if (rl && m->base) {
        byval_enter();
        for (uint32_t i = 0; i < m->nchunks; i++)
            if (m->chunks[i].size)
                rl->mem_unmap(m->base + m->chunks[i].offset, m->chunks[i].size);
        rl->address_free(m->base, m->size);
        byval_leave();
    }
    free(m);
}

static void vmm_evicted(void *ctx, const void *key, void *value)
{
    mapping_release(value);
}

static int vmm_from_exporter(void *ctx, const void *key, void *value)
{
    const byval_exporter_id_t *id = ctx;
    const byval_cu_key_t *k = key;
    return k->u.vmm.pidns == id->pidns && k->u.vmm.pid == id->pid &&
           k->u.vmm.identity == id->identity;
}

static void vmm_exporter_exited(const byval_exporter_id_t *id)
{
    if (vmm_cache)
        byval_lru_remove_if(vmm_cache, vmm_from_exporter, (void *)id);
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
    byval_ptrmap_clear(open_ptrs);
}

static void import_init(void)
{
    vmm_cache = byval_lru_create(byval_cfg.cache_size, sizeof(byval_cu_key_t), vmm_evicted, NULL);
    open_ptrs = byval_ptrmap_create(sizeof(cu_open_t));
    if (vmm_cache)
        byval_stats_register_cache("cuda vmm import", vmm_cache);
    byval_exporters_on_exit(vmm_exporter_exited);
    pthread_atfork(import_atfork_prepare, import_atfork_parent, import_atfork_child);
}

int byval_cu_ptr_ref(CUdeviceptr p, uint32_t type, byval_lru_ref_t ref, void *value)
{
    cu_open_t o = {.type = type, .zero = 0, .ref = ref};
    pthread_once(&import_once, import_init);
    return open_ptrs ? byval_ptrmap_ref_value(open_ptrs, (uintptr_t)p, &o, value) : -1;
}

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
    r = rl->address_reserve(&m->base, m->size, 0, 0, 0);
    if (r != CUDA_SUCCESS) {
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
            BYVAL_LOG_ERROR("cuIpcOpenMemHandle: chunk %u: %s", i, msg);
            r = st == BYVAL_E_NOFD ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_VALUE;
            goto err;
        }
        CUmemGenericAllocationHandle gh;
        t0 = byval_stats_now_ns();
        r = rl->import_shareable(&gh, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
        *import_ns += byval_stats_now_ns() - t0;
        close(fd);
        if (r != CUDA_SUCCESS) {
            BYVAL_LOG_ERROR("cuMemImportFromShareableHandle(chunk %u of pid %u) failed: %s", i,
                            rec->pid, byval_cu_err(r));
            goto err;
        }
        r = rl->map(m->base + c->offset, c->size, 0, gh, 0);
        rl->mem_release(gh); /* the mapping holds the allocation now */
        if (r != CUDA_SUCCESS)
            goto err;
        m->chunks[m->nchunks++] = *c;
        CUmemAccessDesc acc;
        memset(&acc, 0, sizeof(acc));
        acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        acc.location.id = dev;
        acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        r = rl->set_access(m->base + c->offset, c->size, &acc, 1);
        if (r != CUDA_SUCCESS)
            goto err;
    }
    *m_p = m;
    return CUDA_SUCCESS;
err:
    mapping_release(m);
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

CUresult byval_cu_vmm_open(const byval_record_t *rec, const CUipcMemHandle *h,
                           unsigned int flags, CUdeviceptr *pdptr, int *ours_p)
{
    *ours_p = 1;
    const byval_cu_real_t *rl = byval_cu_real();
    byval_self_t self;
    CUcontext ctx = NULL;
    if (!rl)
        return CUDA_ERROR_NOT_INITIALIZED;
    pthread_once(&import_once, import_init);
    if (!vmm_cache || !open_ptrs)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (rl->ctx_get_current(&ctx) != CUDA_SUCCESS || !ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    byval_exporters_poll();

    byval_cu_key_t key;
    memset(&key, 0, sizeof(key));
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

    void *v = NULL;
    byval_lru_ref_t ref = 0;
    const uint8_t *rb = (const uint8_t *)h->reserved + BYVAL_CU_RECORD_OFF;
    int hit = byval_lru_get_ref(vmm_cache, &key, &v, &ref);
    if (hit && memcmp(((cu_mapping_t *)v)->rec, rb, BYVAL_WIRE_LEN) != 0) {
        /* Same key, another record (forged or corrupted): resolve it. */
        byval_lru_put_ref(vmm_cache, ref);
        hit = 0;
    }
    if (hit) {
        cu_mapping_t *m = v;
        if (chunk_off < m->size &&
            byval_cu_ptr_ref(m->base + chunk_off, BYVAL_CU_KEY_VMM, ref, m) > 0) {
            BYVAL_STAT_INC(opens);
            BYVAL_STAT_INC(open_hits);
            *pdptr = m->base + chunk_off;
            return CUDA_SUCCESS;
        }
        byval_lru_put_ref(vmm_cache, ref);
        return CUDA_ERROR_INVALID_VALUE;
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
        BYVAL_LOG_ERROR("cuIpcOpenMemHandle: %s", msg);
        return st == BYVAL_E_NOFD ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_VALUE;
    }
    byval_manifest_t *man = byval_manifest_read(mfd, rec->size, rec->pid, msg, sizeof(msg));
    close(mfd);
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    cu_mapping_t *m = NULL;
    if (!man)
        BYVAL_LOG_ERROR("cuIpcOpenMemHandle: %s", msg);
    else if (chunk_off >= man->reserve_size)
        BYVAL_LOG_ERROR("cuIpcOpenMemHandle: malformed manifest from pid %u", rec->pid);
    else
        r = vmm_map(rl, pidfd, rec, man, &m);
    free(man);
    byval_fetch_done(rec, pidfd);
    if (r != CUDA_SUCCESS) {
        BYVAL_STAT_INC(open_errors);
        return r;
    }
    memcpy(m->rec, rb, BYVAL_WIRE_LEN);
    void *existing = NULL;
    int ins = byval_lru_insert_ref(vmm_cache, &key, m, &existing, &ref);
    if (ins == BYVAL_LRU_EXISTS) {
        mapping_release(m); /* another thread mapped it first */
        m = existing;
    } else if (ins != BYVAL_LRU_OK) {
        /* Every cached mapping is open: this one lives uncached. */
        BYVAL_LOG_WARN("import cache full of open mappings (IPCBYVAL_CACHE_SIZE=%zu)",
                       byval_cfg.cache_size);
        mapping_release(m);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (byval_cu_ptr_ref(m->base + chunk_off, BYVAL_CU_KEY_VMM, ref, m) < 0) {
        byval_lru_put_ref(vmm_cache, ref);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *pdptr = m->base + chunk_off;
    return CUDA_SUCCESS;
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
    if (!byval_init() || !byval_cfg.cuda || !open_ptrs)
        return next(ptr);
    cu_open_t o;
    /* The handle names the entry itself: a removed one and a newer one may
     * share the key. */
    int left = byval_ptrmap_unref_value(open_ptrs, (uintptr_t)ptr, &o, NULL);
    if (left < 0)
        return next(ptr); /* not a mapping we handed out */
    BYVAL_STAT_INC(closes);
    if (o.type == BYVAL_CU_KEY_VMM)
        byval_lru_put_ref(vmm_cache, o.ref);
    else if (o.type == BYVAL_CU_KEY_LEGACY)
        byval_cu_legacy_put(o.ref);
    else if (left == 0)
        return next(ptr); /* an uncached legacy mapping: the driver closes it */
    return CUDA_SUCCESS;
}
