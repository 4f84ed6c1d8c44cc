/* SPDX-License-Identifier: MIT */
/*
 * zedrv: USM pools, as compute-runtime's UsmMemAllocPoolsManager serves
 * small allocations on the GPUs where Level Zero pools by default (Xe2
 * and later; shared/source/memory_manager/unified_memory_pooling.cpp,
 * shared/source/dll/pool_info.cpp, level_zero/core/source/context/context.cpp):
 * - device and host allocations of at most 2 MiB, alignment at most
 *   2 MiB, without BIAS_UNCACHED or an export descriptor, are chunks of a
 *   pool buffer; shared allocations never are;
 * - size classes [0, 4K] and (4K, 64K] take 2 MiB pools, (64K, 2M] 16 MiB
 *   pools; a full class gets another pool; chunks are 512-byte aligned;
 * - every pointer in a pool reports the pool's allocation id (a chunk
 *   uses up a number of the counter all the same); zeMemGetAddressRange
 *   gives the chunk;
 * - an IPC handle names the pool buffer's one fd, with poolOffset =
 *   pointer - pool base (interior pointers included); the fd's references
 *   are the gets, less the puts, less one per zeMemFree of any chunk of
 *   the pool while the fd is open; it closes at 0;
 * - a free gives the chunk back; the pool stays; a pool left empty goes
 *   when its class already has another empty one (trimEmptyPools).
 * EnableDeviceUsmAllocationPool=0 / EnableHostUsmAllocationPool=0 turn
 * pooling off, as compute-runtime's debug keys do.
 */
#include "test/zedrv/zedrv.h"

#include <stdlib.h>

#define KB ((size_t)1 << 10)
#define MB ((size_t)1 << 20)
#define CHUNK_ALIGN 512u
#define POOL_ALIGN (2 * MB)
#define POOL_MAX_SERVED (2 * MB)

/* PoolInfo::extendedPoolInfos: the largest size each class serves, and its pool size. */
static const struct {
    size_t max_size, pool_size;
} classes[] = {{4 * KB, 2 * MB}, {64 * KB, 2 * MB}, {2 * MB, 16 * MB}};
#define NCLASSES (sizeof(classes) / sizeof(classes[0]))

/* ze_external_memory_export_desc_t: such memory is never pooled. */
static bool wants_export(const void *pnext)
{
    for (const ze_base_desc_t *d = pnext; d != NULL; d = d->pNext)
        if (d->stype == ZE_STRUCTURE_TYPE_EXTERNAL_MEMORY_EXPORT_DESC)
            return true;
    return false;
}

static bool poolable(ze_memory_type_t type, size_t size, size_t alignment, uint32_t flags,
                     const void *pnext)
{
    const struct zedrv_config *cfg = zedrv_config();

    if (type == ZE_MEMORY_TYPE_DEVICE ? !cfg->pool_device
                                      : type != ZE_MEMORY_TYPE_HOST || !cfg->pool_host)
        return false;
    /* BIAS_UNCACHED (2 for device and host) sets an allocation flag:
     * UsmMemAllocPool::flagsAreAllowed refuses it. */
    return size <= POOL_MAX_SERVED && alignment <= POOL_ALIGN && (flags & 2u) == 0 &&
           !wants_export(pnext);
}

static unsigned size_class(size_t size)
{
    unsigned c = 0;

    while (c + 1 < NCLASSES && size > classes[c].max_size)
        c++;
    return c;
}

static size_t round_up(size_t v, size_t align)
{
    return (v + align - 1) / align * align;
}

/* First fit in pool a: the offset of a free span of `span` bytes at a
 * multiple of align, or (size_t)-1. Links the chunk in. */
static size_t carve(struct zedrv_alloc *a, struct zedrv_chunk *c, size_t align)
{
    struct zedrv_chunk **pp = &a->chunks;
    size_t at = 0;

    for (;; pp = &(*pp)->next) {
        size_t end = *pp != NULL ? (*pp)->offset : a->map_size;

        /* The address is aligned, whatever the alignment (the pool's base
         * is a multiple of 2 MiB only). */
        at = round_up((uintptr_t)a->base + at, align) - (uintptr_t)a->base;
        if (at <= end && end - at >= c->span) {
            c->offset = at;
            c->next = *pp;
            *pp = c;
            return at;
        }
        if (*pp == NULL)
            return (size_t)-1;
        at = (*pp)->offset + (*pp)->span;
    }
}

/* A chunk of some pool of (type, class) with room, under zedrv_lock. */
static void *take_chunk(ze_memory_type_t type, unsigned cls, struct zedrv_chunk *c, size_t align)
{
    for (struct zedrv_alloc *a = zedrv_alloc_first(); a != NULL; a = a->next) {
        if (!a->pool || a->type != type || a->bucket != cls)
            continue;
        if (carve(a, c, align) != (size_t)-1) {
            zedrv_alloc_take_id();
            return a->base + c->offset;
        }
    }
    return NULL;
}

bool zedrv_pool_alloc(ze_context_handle_t context, ze_device_handle_t device, size_t size,
                      size_t alignment, ze_memory_type_t type, uint32_t flags, const void *pnext,
                      void **ptr, ze_result_t *r)
{
    /* An alignment above a chunk's is a page multiple, as for other memory. */
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t align = alignment > CHUNK_ALIGN ? round_up(alignment, page) : CHUNK_ALIGN;
    struct zedrv_chunk *c;
    struct zedrv_alloc *pool;
    unsigned cls;
    void *p;

    if (!poolable(type, size, alignment, flags, pnext))
        return false;
    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        *r = ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
        return true;
    }
    cls = size_class(size);
    c->size = size;
    c->span = round_up(size, CHUNK_ALIGN);
    c->context = context;
    pthread_mutex_lock(&zedrv_lock);
    p = take_chunk(type, cls, c, align);
    pthread_mutex_unlock(&zedrv_lock);
    if (p == NULL) {
        /* UsmMemAllocPoolsManager::tryAddPool; a pool that cannot be had
         * leaves the allocation to the ordinary path, as there. */
        pool = zedrv_alloc_new(context, type == ZE_MEMORY_TYPE_HOST ? NULL : device,
                               classes[cls].pool_size, POOL_ALIGN, type, cls, r);
        if (pool == NULL) {
            free(c);
            return false;
        }
        pthread_mutex_lock(&zedrv_lock);
        p = take_chunk(type, cls, c, align);
        pthread_mutex_unlock(&zedrv_lock);
        ZEDRV_LOG("new USM pool %p (%zu bytes, id %llu) for size class %u", (void *)pool->base,
                  pool->map_size, (unsigned long long)pool->id, cls);
    }
    if (p == NULL) {
        free(c);
        return false;
    }
    ZEDRV_LOG("alloc type %d size %zu align %zu = %p (pooled)", (int)type, size, alignment, p);
    *ptr = p;
    *r = ZE_RESULT_SUCCESS;
    return true;
}

struct zedrv_chunk *zedrv_pool_chunk(const struct zedrv_alloc *a, const void *ptr)
{
    const char *p = ptr;

    for (struct zedrv_chunk *c = a->chunks; c != NULL && a->base + c->offset <= p; c = c->next)
        if (p < a->base + c->offset + c->span)
            return c;
    return NULL;
}

static bool pool_empty(const struct zedrv_alloc *a)
{
    return a->chunks == NULL;
}

/* trimEmptyPools: one empty pool per class stays. */
static void trim(struct zedrv_alloc *a)
{
    for (struct zedrv_alloc *o = zedrv_alloc_first(); o != NULL; o = o->next) {
        if (o != a && o->pool && o->type == a->type && o->bucket == a->bucket && pool_empty(o)) {
            zedrv_alloc_release(a);
            return;
        }
    }
}

static void unchain(struct zedrv_alloc *a, struct zedrv_chunk *c)
{
    for (struct zedrv_chunk **pp = &a->chunks; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    }
    free(c);
}

ze_result_t zedrv_pool_free(struct zedrv_alloc *a, const void *ptr)
{
    struct zedrv_chunk *c = zedrv_pool_chunk(a, ptr);

    if (c == NULL)
        return ZE_RESULT_ERROR_INVALID_ARGUMENT; /* in the pool, not allocated */
    /* Context::freeMem: the pool's IPC entry loses a reference, whichever
     * chunk is freed and whether or not it was exported. */
    if (a->export_fd >= 0 && a->export_refs > 0 && --a->export_refs == 0) {
        ZEDRV_LOG("zeMemFree(%p): closing the pool's exported fd %d", ptr, a->export_fd);
        close(a->export_fd);
        a->export_fd = -1;
    }
    /* UsmMemAllocPool::freeSVMAlloc finds the chunk by its start only: an
     * interior pointer frees nothing, and the call succeeds. */
    if ((const char *)ptr != a->base + c->offset)
        return ZE_RESULT_SUCCESS;
    unchain(a, c);
    if (pool_empty(a))
        trim(a);
    return ZE_RESULT_SUCCESS;
}

bool zedrv_pool_context_destroyed(struct zedrv_alloc *a, ze_context_handle_t context)
{
    for (struct zedrv_chunk *c = a->chunks; c != NULL; c = c->next) {
        if (c->context == context) {
            ZEDRV_LOG("zeContextDestroy(%p): releasing pooled %p", (void *)context,
                      (void *)(a->base + c->offset));
            zedrv_pool_free(a, a->base + c->offset);
            return true;
        }
    }
    return false;
}
