/* SPDX-License-Identifier: MIT */
/*
 * zedrv: allocations. Every allocation, device, host or shared, is a memfd
 * mapped MAP_SHARED, so that another process holding (a dup of) the memfd
 * sees the same bytes: the stand-in for a dma-buf. Allocations and IPC
 * mappings live in one list under zedrv_lock.
 *
 * As compute-runtime (level_zero/core/source/context/context.cpp):
 * - Context::allocDeviceMem (and allocHostMem, allocSharedMem) check no
 *   alignment: SVMAllocsManager rounds it up to a page multiple
 *   (alignUpNonZero), so 131079 is accepted and honoured as 135168 here.
 *   Size 0, or above maxMemAllocSize without the relaxed-limits
 *   descriptor, is ZE_RESULT_ERROR_UNSUPPORTED_SIZE.
 * - Context::closeIpcMemHandle is freeMem: zeMemFree and zeMemCloseIpcHandle
 *   both release whatever allocation or IPC mapping contains the pointer
 *   (SVMAllocsManager::getSVMAlloc finds interior pointers), and answer
 *   ZE_RESULT_ERROR_INVALID_ARGUMENT for a pointer that is neither: a
 *   second close of a mapping, or a close of host memory, changes nothing.
 * - Context::getMemAllocProperties: id from a per-process counter
 *   (SvmAllocationData::getAllocId, never reused); unknown memory is
 *   ZE_MEMORY_TYPE_UNKNOWN with success. ZEDRV_ALLOC_ID=address derives
 *   ids from addresses instead, as the spec allows, and then maps a new
 *   allocation at the address the last free of the same size left, so a
 *   free + re-allocation repeats the id deterministically.
 * Device and shared memory is accounted in the device-memory ledger
 * (test/devmem): ZEDRV_TOTAL_MEM bounds it (ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY
 * beyond), and an IPC mapping keeps the exporter's memory counted after
 * the exporter's zeMemFree, until it is closed.
 */
#include "test/zedrv/zedrv.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

static struct zedrv_alloc *alloc_list;
/* Per-process, increasing, never reused, as the real driver's alloc id. */
static uint64_t alloc_next_id = 1;

/* ZEDRV_ALLOC_ID=address: ranges freed most recently, reused first. */
#define FREED_RANGES 16
static struct {
    char *base;
    size_t len;
} freed[FREED_RANGES];
static unsigned nfreed;

static size_t page_round(size_t size)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);

    return (size + page - 1) / page * page;
}

void *zedrv_shm_create(const char *name, size_t size, int *fd_p, size_t *map_size_p)
{
    size_t map_size = page_round(size != 0 ? size : 1);
    void *base;
    int fd;

    fd = memfd_create(name, MFD_CLOEXEC);
    if (fd < 0) {
        ZEDRV_LOG("memfd_create(%s) failed: %m", name);
        return NULL;
    }
    if (ftruncate(fd, (off_t)map_size) != 0) {
        ZEDRV_LOG("ftruncate(memfd, %zu) failed: %m", map_size);
        close(fd);
        return NULL;
    }
    base = mmap(NULL, map_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        ZEDRV_LOG("mmap(%zu) failed: %m", map_size);
        close(fd);
        return NULL;
    }
    *fd_p = fd;
    *map_size_p = map_size;
    return base;
}

void *zedrv_shm_map(int fd, size_t *map_size_p)
{
    struct stat st;
    void *base;

    if (fstat(fd, &st) != 0 || st.st_size <= 0)
        return NULL;
    /* A fresh mapping per open: every open returns a new pointer. */
    base = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        ZEDRV_LOG("mmap(fd %d, %lld) failed: %m", fd, (long long)st.st_size);
        return NULL;
    }
    *map_size_p = (size_t)st.st_size;
    return base;
}

struct zedrv_alloc *zedrv_alloc_find(const void *ptr)
{
    const char *p = ptr;

    for (struct zedrv_alloc *a = alloc_list; a != NULL; a = a->next)
        if (p >= a->base && p < a->base + a->map_size)
            return a;
    return NULL;
}

struct zedrv_alloc *zedrv_alloc_find_export(int fd)
{
    for (struct zedrv_alloc *a = alloc_list; a != NULL; a = a->next)
        if (a->export_fd == fd)
            return a;
    return NULL;
}

bool zedrv_fd_is_internal(int fd)
{
    for (struct zedrv_alloc *a = alloc_list; a != NULL; a = a->next)
        if (a->memfd == fd)
            return true;
    return false;
}

static struct zedrv_alloc *alloc_add(ze_context_handle_t context, ze_device_handle_t device,
                                     void *base, size_t size, size_t map_size, int memfd,
                                     ze_memory_type_t type)
{
    struct zedrv_alloc *a = calloc(1, sizeof(*a));

    if (a == NULL)
        return NULL;
    a->base = base;
    a->size = size;
    a->map_size = map_size;
    a->type = type;
    a->context = context;
    a->device = device;
    a->memfd = memfd;
    a->export_fd = -1;
    a->mem.slot = DEVMEM_NONE;
    a->id = zedrv_config()->id_address ? (uint64_t)(uintptr_t)base : alloc_next_id++;
    a->next = alloc_list;
    alloc_list = a;
    return a;
}

/* The ledger tag in a zedrv-alloc memfd's name ("" if none). */
static void fd_tag(int fd, char *tag, size_t len)
{
    char path[64], link[160];
    const char *t;
    ssize_t n;

    tag[0] = '\0';
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    n = readlink(path, link, sizeof(link) - 1);
    if (n <= 0)
        return;
    link[n] = '\0';
    t = strchr(link, ':');               /* "/memfd:zedrv-alloc:TAG (deleted)" */
    t = t != NULL ? strchr(t + 1, ':') : NULL;
    if (t != NULL)
        snprintf(tag, len, "%.*s", (int)strcspn(t + 1, " "), t + 1);
}

struct zedrv_alloc *zedrv_alloc_add_import(ze_context_handle_t context,
                                           ze_device_handle_t device, void *base,
                                           size_t map_size, ze_memory_type_t type, int fd)
{
    struct zedrv_alloc *a = alloc_add(context, device, base, map_size, map_size, -1, type);
    char tag[DEVMEM_TAG_LEN];

    if (a != NULL) {
        a->imported = true;
        a->ctx_gen = context->gen; /* under zedrv_lock, as the destroy's ++ */
        /* Host memory is not the device's: only device memory is held. */
        if (type != ZE_MEMORY_TYPE_HOST) {
            fd_tag(fd, tag, sizeof(tag));
            devmem_acquire(tag, 0, map_size, &a->mem);
        }
    }
    return a;
}

uint64_t zedrv_alloc_count_imports(void)
{
    uint64_t n = 0;

    pthread_mutex_lock(&zedrv_lock);
    for (struct zedrv_alloc *a = alloc_list; a != NULL; a = a->next)
        n += a->imported;
    pthread_mutex_unlock(&zedrv_lock);
    return n;
}

void zedrv_alloc_release(struct zedrv_alloc *alloc)
{
    for (struct zedrv_alloc **pp = &alloc_list; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == alloc) {
            *pp = alloc->next;
            break;
        }
    }
    munmap(alloc->base, alloc->map_size);
    if (zedrv_config()->id_address && !alloc->imported) {
        memmove(&freed[1], &freed[0], (FREED_RANGES - 1) * sizeof(freed[0]));
        freed[0].base = alloc->base;
        freed[0].len = alloc->map_size;
        if (nfreed < FREED_RANGES)
            nfreed++;
    }
    /* An importer's mapping keeps the allocator's memory held. */
    devmem_release(&alloc->mem, !alloc->imported);
    /* Like the real free: the exported fd goes with the allocation. */
    if (alloc->export_fd >= 0)
        close(alloc->export_fd);
    if (alloc->memfd >= 0)
        close(alloc->memfd);
    ZEDRV_LOG("released %s %p (id %llu)",
              alloc->imported ? "import" : alloc->pool ? "USM pool" : "allocation",
              (void *)alloc->base, (unsigned long long)alloc->id);
    while (alloc->chunks != NULL) {
        struct zedrv_chunk *c = alloc->chunks;

        alloc->chunks = c->next;
        free(c);
    }
    free(alloc);
}

/* alignment as SVMAllocsManager uses it: a page multiple, 0 for a page. */
static size_t effective_alignment(size_t alignment)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);

    if (alignment <= page)
        return page;
    return alignment > SIZE_MAX - page ? 0 : (alignment + page - 1) / page * page;
}

/* Maps memfd fd (map_size bytes) at a multiple of align; with
 * ZEDRV_ALLOC_ID=address, first where a free of the same size left a
 * hole. Caller holds zedrv_lock. */
static void *map_aligned(int fd, size_t map_size, size_t align)
{
    const int prot = PROT_READ | PROT_WRITE;
    uintptr_t start, base;
    void *p;

    for (unsigned i = 0; zedrv_config()->id_address && i < nfreed; i++) {
        if (freed[i].len != map_size || (uintptr_t)freed[i].base % align != 0)
            continue;
        p = mmap(freed[i].base, map_size, prot, MAP_SHARED | MAP_FIXED_NOREPLACE, fd, 0);
        if (p == freed[i].base) {
            memmove(&freed[i], &freed[i + 1], (nfreed - i - 1) * sizeof(freed[0]));
            nfreed--;
            return p;
        }
        if (p != MAP_FAILED)
            munmap(p, map_size);
    }
    if (align <= (size_t)sysconf(_SC_PAGESIZE)) {
        p = mmap(NULL, map_size, prot, MAP_SHARED, fd, 0);
        return p == MAP_FAILED ? NULL : p;
    }
    if (map_size > SIZE_MAX - align)
        return NULL;
    /* Reserve size + align, keep the aligned part (any align: divide). */
    p = mmap(NULL, map_size + align, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
             -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    start = (uintptr_t)p;
    base = (start + align - 1) / align * align;
    if (mmap((void *)base, map_size, prot, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) {
        munmap(p, map_size + align);
        return NULL;
    }
    if (base > start)
        munmap(p, base - start);
    if (start + map_size + align > base + map_size)
        munmap((void *)(base + map_size), start + map_size + align - (base + map_size));
    return (void *)base;
}

/* ZE_RELAXED_ALLOCATION_LIMITS_EXP_FLAG_MAX_SIZE in the descriptor chain. */
static bool relaxed_size(const void *pnext)
{
    for (const ze_base_desc_t *d = pnext; d != NULL; d = d->pNext)
        if (d->stype == ZE_STRUCTURE_TYPE_RELAXED_ALLOCATION_LIMITS_EXP_DESC &&
            (((const ze_relaxed_allocation_limits_exp_desc_t *)d)->flags &
             ZE_RELAXED_ALLOCATION_LIMITS_EXP_FLAG_MAX_SIZE))
            return true;
    return false;
}

/* maxMemAllocSize of zedrv_device_get_properties. */
#define ZEDRV_MAX_ALLOC ((size_t)1 << 32)

struct zedrv_alloc *zedrv_alloc_new(ze_context_handle_t context, ze_device_handle_t device,
                                    size_t size, size_t align, ze_memory_type_t type,
                                    int pool_class, ze_result_t *r)
{
    size_t map_size = page_round(size);
    const bool device_mem = type != ZE_MEMORY_TYPE_HOST;
    const ze_result_t oom = device_mem ? ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY
                                       : ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
    char name[96], tag[DEVMEM_TAG_LEN] = "";
    struct devmem_ref mem = {DEVMEM_NONE, 0};
    struct zedrv_alloc *a = NULL;
    void *base = NULL;
    int fd = -1;

    if (device_mem) {
        zedrv_devmem_setup();
        if (devmem_alloc(0, map_size, &mem) != 0) {
            ZEDRV_LOG("alloc type %d size %zu: device memory full (ZEDRV_TOTAL_MEM)", (int)type,
                      size);
            *r = ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY;
            return NULL;
        }
        devmem_tag(&mem, tag, sizeof(tag));
    }
    /* The tag tells an importer which ledger slot its mapping holds. */
    snprintf(name, sizeof(name), ZEDRV_MEMFD_ALLOC ":%s", tag);
    fd = memfd_create(name, MFD_CLOEXEC);
    if (fd >= 0 && ftruncate(fd, (off_t)map_size) != 0) {
        ZEDRV_LOG("ftruncate(memfd, %zu) failed: %m", map_size);
        close(fd);
        fd = -1;
    }
    pthread_mutex_lock(&zedrv_lock);
    if (fd >= 0)
        base = map_aligned(fd, map_size, align);
    if (base != NULL)
        a = alloc_add(context, device, base, size, map_size, fd, type);
    if (a != NULL) {
        a->mem = mem;
        a->pool = pool_class >= 0;
        a->bucket = pool_class >= 0 ? (unsigned)pool_class : 0;
    }
    pthread_mutex_unlock(&zedrv_lock);
    if (a == NULL) {
        if (base != NULL)
            munmap(base, map_size);
        if (fd >= 0)
            close(fd);
        devmem_release(&mem, 1);
        *r = base != NULL ? ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY : oom;
        return NULL;
    }
    *r = ZE_RESULT_SUCCESS;
    return a;
}

void zedrv_alloc_take_id(void)
{
    alloc_next_id++;
}

struct zedrv_alloc *zedrv_alloc_first(void)
{
    return alloc_list;
}

static ze_result_t mem_alloc(ze_context_handle_t context, ze_device_handle_t device,
                             size_t size, size_t alignment, ze_memory_type_t type,
                             uint32_t flags, const void *pnext, void **ptr)
{
    size_t align = effective_alignment(alignment);
    struct zedrv_alloc *a;
    ze_result_t r;

    if (!zedrv_context_ok(context))
        return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    if (device != NULL && !zedrv_device_ok(device))
        return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    if (ptr == NULL)
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    if (size == 0 || (size > ZEDRV_MAX_ALLOC && !relaxed_size(pnext)))
        return ZE_RESULT_ERROR_UNSUPPORTED_SIZE;
    if (align == 0)
        return type != ZE_MEMORY_TYPE_HOST ? ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY
                                           : ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
    if (zedrv_pool_alloc(context, device, size, alignment, type, flags, pnext, ptr, &r))
        return r;
    a = zedrv_alloc_new(context, device, size, align, type, -1, &r);
    if (a == NULL)
        return r;
    ZEDRV_LOG("alloc type %d size %zu align %zu = %p (id %llu, memfd %d)", (int)type, size,
              alignment, (void *)a->base, (unsigned long long)a->id, a->memfd);
    *ptr = a->base;
    return ZE_RESULT_SUCCESS;
}

ze_result_t zedrv_mem_alloc_device(ze_context_handle_t context,
                                   const ze_device_mem_alloc_desc_t *desc, size_t size,
                                   size_t alignment, ze_device_handle_t device, void **ptr)
{
    if (desc == NULL)
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    if (!zedrv_device_ok(device))
        return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    return mem_alloc(context, device, size, alignment, ZE_MEMORY_TYPE_DEVICE, desc->flags,
                     desc->pNext, ptr);
}

ze_result_t zedrv_mem_alloc_host(ze_context_handle_t context,
                                 const ze_host_mem_alloc_desc_t *desc, size_t size,
                                 size_t alignment, void **ptr)
{
    if (desc == NULL)
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    return mem_alloc(context, NULL, size, alignment, ZE_MEMORY_TYPE_HOST, desc->flags,
                     desc->pNext, ptr);
}

ze_result_t zedrv_mem_alloc_shared(ze_context_handle_t context,
                                   const ze_device_mem_alloc_desc_t *device_desc,
                                   const ze_host_mem_alloc_desc_t *host_desc, size_t size,
                                   size_t alignment, ze_device_handle_t device, void **ptr)
{
    if (device_desc == NULL || host_desc == NULL)
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    return mem_alloc(context, device, size, alignment, ZE_MEMORY_TYPE_SHARED,
                     device_desc->flags, device_desc->pNext, ptr);
}

ze_result_t zedrv_free_any(const void *ptr, const char *what)
{
    struct zedrv_alloc *a;

    pthread_mutex_lock(&zedrv_lock);
    a = zedrv_alloc_find(ptr);
    if (a == NULL) {
        pthread_mutex_unlock(&zedrv_lock);
        ZEDRV_LOG("%s(%p): no allocation or IPC mapping there", what, ptr);
        return ZE_RESULT_ERROR_INVALID_ARGUMENT;
    }
    if (a->pool) {
        ze_result_t r = zedrv_pool_free(a, ptr);

        pthread_mutex_unlock(&zedrv_lock);
        ZEDRV_LOG("%s(%p): pooled allocation: 0x%x", what, ptr, (unsigned)r);
        return r;
    }
    ZEDRV_LOG("%s(%p): releasing %s %p", what, ptr, a->imported ? "IPC mapping" : "allocation",
              (void *)a->base);
    zedrv_alloc_release(a);
    pthread_mutex_unlock(&zedrv_lock);
    return ZE_RESULT_SUCCESS;
}

ze_result_t zedrv_mem_free(ze_context_handle_t context, void *ptr)
{
    if (!zedrv_context_ok(context))
        return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    if (ptr == NULL)
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    return zedrv_free_any(ptr, "zeMemFree");
}

void zedrv_alloc_context_destroyed(ze_context_handle_t context)
{
    enum zedrv_ctx_destroy mode = zedrv_config()->ctx_destroy;
    struct zedrv_alloc **pp;

    if (mode == ZEDRV_CTX_DESTROY_KEEP)
        return;
    pthread_mutex_lock(&zedrv_lock);
    pp = &alloc_list;
    while (*pp != NULL) {
        struct zedrv_alloc *a = *pp;

        if (a->pool && mode == ZEDRV_CTX_DESTROY_ALL &&
            zedrv_pool_context_destroyed(a, context)) {
            /* The pool is the device's: only the context's chunks went, and
             * the pool may have gone with them: start over. */
            pp = &alloc_list;
            continue;
        }
        if (a->pool || a->context != context || (!a->imported && mode != ZEDRV_CTX_DESTROY_ALL)) {
            pp = &a->next;
            continue;
        }
        ZEDRV_LOG("zeContextDestroy(%p): releasing %s %p", (void *)context,
                  a->imported ? "IPC mapping" : "allocation", (void *)a->base);
        zedrv_alloc_release(a); /* unlinks *pp */
    }
    pthread_mutex_unlock(&zedrv_lock);
}

ze_result_t zedrv_mem_get_alloc_properties(ze_context_handle_t context, const void *ptr,
                                           ze_memory_allocation_properties_t *props,
                                           ze_device_handle_t *device)
{
    struct zedrv_alloc *a;

    if (!zedrv_context_ok(context))
        return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    if (ptr == NULL || props == NULL)
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    pthread_mutex_lock(&zedrv_lock);
    a = zedrv_alloc_find(ptr);
    if (a == NULL) {
        pthread_mutex_unlock(&zedrv_lock);
        /* Context::getMemAllocProperties: unknown memory is not an error. */
        props->type = ZE_MEMORY_TYPE_UNKNOWN;
        return ZE_RESULT_SUCCESS;
    }
    props->type = a->type;
    props->id = a->id;
    props->pageSize = (uint64_t)sysconf(_SC_PAGESIZE);
    if (device != NULL)
        *device = a->device;
    pthread_mutex_unlock(&zedrv_lock);
    return ZE_RESULT_SUCCESS;
}

ze_result_t zedrv_mem_get_address_range(ze_context_handle_t context, const void *ptr,
                                        void **base, size_t *size)
{
    struct zedrv_alloc *a;

    if (!zedrv_context_ok(context))
        return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    if (ptr == NULL)
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    pthread_mutex_lock(&zedrv_lock);
    a = zedrv_alloc_find(ptr);
    if (a == NULL) {
        pthread_mutex_unlock(&zedrv_lock);
        /* The classic-era driver's answer; ZE_RESULT_ERROR_ADDRESS_NOT_FOUND
         * (spec 1.10+, compute-runtime 78b291bafc, Oct 2025) is not in the
         * 1.8.12 headers. */
        return ZE_RESULT_ERROR_UNKNOWN;
    }
    if (a->pool) {
        /* Context::getMemAddressRange: the pooled allocation, not the pool;
         * a pointer in the pool that no allocation holds is not found. */
        const struct zedrv_chunk *c = zedrv_pool_chunk(a, ptr);

        if (c == NULL) {
            pthread_mutex_unlock(&zedrv_lock);
            return ZE_RESULT_ERROR_UNKNOWN;
        }
        if (base != NULL)
            *base = a->base + c->offset;
        if (size != NULL)
            *size = c->size;
        pthread_mutex_unlock(&zedrv_lock);
        return ZE_RESULT_SUCCESS;
    }
    if (base != NULL)
        *base = a->base;
    if (size != NULL)
        *size = a->size;
    pthread_mutex_unlock(&zedrv_lock);
    return ZE_RESULT_SUCCESS;
}
