/* SPDX-License-Identifier: MIT */
/*
 * zedrv: allocations. Every allocation, device, host or shared, is a memfd
 * mapped MAP_SHARED, so that another process holding (a dup of) the memfd
 * sees the same bytes: the stand-in for a dma-buf. Allocations and IPC
 * mappings live in one list under zedrv_lock.
 */
#include "test/zedrv/zedrv.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

static struct zedrv_alloc *alloc_list;
/* Per-process, increasing, never reused, as the real driver's alloc id. */
static uint64_t alloc_next_id = 1;

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
    a->id = alloc_next_id++;
    a->next = alloc_list;
    alloc_list = a;
    return a;
}

struct zedrv_alloc *zedrv_alloc_add_import(ze_context_handle_t context,
                                           ze_device_handle_t device, void *base,
                                           size_t map_size, ze_memory_type_t type)
{
    struct zedrv_alloc *a = alloc_add(context, device, base, map_size, map_size, -1, type);

    if (a != NULL)
        a->imported = true;
    return a;
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
    /* Like the real free: the exported fd goes with the allocation. */
    if (alloc->export_fd >= 0)
        close(alloc->export_fd);
    if (alloc->memfd >= 0)
        close(alloc->memfd);
    ZEDRV_LOG("released %s %p (id %llu)", alloc->imported ? "import" : "allocation",
              (void *)alloc->base, (unsigned long long)alloc->id);
    free(alloc);
}

static ze_result_t mem_alloc(ze_context_handle_t context, ze_device_handle_t device,
                             size_t size, size_t alignment, ze_memory_type_t type, void **ptr)
{
    struct zedrv_alloc *a;
    size_t map_size;
    void *base;
    int fd;

    if (!zedrv_context_ok(context))
        return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    if (device != NULL && !zedrv_device_ok(device))
        return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    if (ptr == NULL)
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    if (size == 0)
        return ZE_RESULT_ERROR_UNSUPPORTED_SIZE;
    /* mmap gives page alignment; more than that is not needed by tests. */
    if ((alignment & (alignment - 1)) != 0 || alignment > (size_t)sysconf(_SC_PAGESIZE))
        return ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT;
    base = zedrv_shm_create(ZEDRV_MEMFD_ALLOC, size, &fd, &map_size);
    if (base == NULL)
        return type == ZE_MEMORY_TYPE_HOST ? ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY
                                           : ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY;
    pthread_mutex_lock(&zedrv_lock);
    a = alloc_add(context, device, base, size, map_size, fd, type);
    pthread_mutex_unlock(&zedrv_lock);
    if (a == NULL) {
        munmap(base, map_size);
        close(fd);
        return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
    }
    ZEDRV_LOG("alloc type %d size %zu = %p (id %llu, memfd %d)", (int)type, size, base,
              (unsigned long long)a->id, fd);
    *ptr = base;
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
    return mem_alloc(context, device, size, alignment, ZE_MEMORY_TYPE_DEVICE, ptr);
}

ze_result_t zedrv_mem_alloc_host(ze_context_handle_t context,
                                 const ze_host_mem_alloc_desc_t *desc, size_t size,
                                 size_t alignment, void **ptr)
{
    if (desc == NULL)
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    return mem_alloc(context, NULL, size, alignment, ZE_MEMORY_TYPE_HOST, ptr);
}

ze_result_t zedrv_mem_alloc_shared(ze_context_handle_t context,
                                   const ze_device_mem_alloc_desc_t *device_desc,
                                   const ze_host_mem_alloc_desc_t *host_desc, size_t size,
                                   size_t alignment, ze_device_handle_t device, void **ptr)
{
    if (device_desc == NULL || host_desc == NULL)
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    return mem_alloc(context, device, size, alignment, ZE_MEMORY_TYPE_SHARED, ptr);
}

ze_result_t zedrv_mem_free(ze_context_handle_t context, void *ptr)
{
    struct zedrv_alloc *a;

    if (!zedrv_context_ok(context))
        return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    if (ptr == NULL)
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    pthread_mutex_lock(&zedrv_lock);
    a = zedrv_alloc_find(ptr);
    /* compute-runtime Context::freeMem: unknown pointer is INVALID_ARGUMENT;
     * an IPC mapping must go through zeMemCloseIpcHandle. */
    if (a == NULL || a->imported || (char *)ptr != a->base) {
        pthread_mutex_unlock(&zedrv_lock);
        return ZE_RESULT_ERROR_INVALID_ARGUMENT;
    }
    zedrv_alloc_release(a);
    pthread_mutex_unlock(&zedrv_lock);
    return ZE_RESULT_SUCCESS;
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
    if (base != NULL)
        *base = a->base;
    if (size != NULL)
        *size = a->size;
    pthread_mutex_unlock(&zedrv_lock);
    return ZE_RESULT_SUCCESS;
}
