/* SPDX-License-Identifier: MIT */
/*
 * cudadrv: VMM physical allocations (CUmemGenericAllocationHandle):
 * cuMemCreate, cuMemRelease, cuMemRetainAllocationHandle, properties,
 * granularity and the POSIX-fd export/import.
 *
 * An allocation is a memfd named "cudadrv-vmm:<device>:<handle types>:<ledger
 * tag>", so an importer rebuilds the properties from the fd alone and holds
 * the same device memory (test/devmem). Allocations are no context's: they
 * outlive cuCtxDestroy and cuDevicePrimaryCtxReset (cuda.h; a mapping was
 * still readable after a reset on driver 580). Facts reproduced:
 * every export returns a NEW fd; the fd is process-local (its number means
 * nothing elsewhere); a handle lives until released and unmapped;
 * cuMemRetainAllocationHandle returns the very handle value that was mapped.
 *
 * How an export fd names its allocation across processes: drv_vmm_ctl.c.
 */
#include "cudadrv.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define KNOWN_TYPES (CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR | CU_MEM_HANDLE_TYPE_WIN32 | \
                     CU_MEM_HANDLE_TYPE_WIN32_KMT | CU_MEM_HANDLE_TYPE_FABRIC)

static struct cudadrv_alloc **allocs;
static size_t nallocs, cap_allocs;
/* Handle values look like the driver's opaque 64-bit handles and are
 * never reused, so a stale handle is caught. */
static CUmemGenericAllocationHandle last_handle = 0xc0de00000000ull;

struct cudadrv_alloc *cudadrv_alloc_lookup(CUmemGenericAllocationHandle h)
{
    for (size_t i = 0; i < nallocs; i++)
        if (allocs[i]->handle == h && allocs[i]->refs > 0)
            return allocs[i];
    return NULL;
}

static void alloc_maybe_free(struct cudadrv_alloc *a)
{
    if (a->refs > 0 || a->maps > 0)
        return;
    for (size_t i = 0; i < nallocs; i++) {
        if (allocs[i] == a) {
            allocs[i] = allocs[--nallocs];
            break;
        }
    }
    close(a->fd);
    devmem_release(&a->mem, a->created);
    free(a);
}

size_t cudadrv_alloc_imports(void)
{
    size_t n = 0;

    for (size_t i = 0; i < nallocs; i++)
        n += !allocs[i]->created;
    return n;
}

void cudadrv_alloc_unmapped(struct cudadrv_alloc *a)
{
    a->maps--;
    alloc_maybe_free(a);
}

/* Takes ownership of fd and mem; caller holds cudadrv_lock. */
static struct cudadrv_alloc *alloc_new(int fd, size_t size, const CUmemAllocationProp *prop,
                                       const struct devmem_ref *mem, int created)
{
    struct cudadrv_alloc *a;

    if (nallocs == cap_allocs) {
        size_t cap = cap_allocs ? cap_allocs * 2 : 64;
        struct cudadrv_alloc **n = realloc(allocs, cap * sizeof(*n));

        if (!n)
            return NULL;
        allocs = n;
        cap_allocs = cap;
    }
    a = calloc(1, sizeof(*a));
    if (!a)
        return NULL;
    last_handle += 0x10;
    a->handle = last_handle;
    a->fd = fd;
    a->size = size;
    a->prop = *prop;
    a->refs = 1;
    a->block_id = cudadrv_next_block_id();
    a->mem = *mem;
    a->created = created;
    allocs[nallocs++] = a;
    return a;
}

static CUresult prop_check(const CUmemAllocationProp *prop)
{
    if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
        prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
        (prop->requestedHandleTypes & ~KNOWN_TYPES))
        return CUDA_ERROR_INVALID_VALUE;
    if (prop->location.id < 0 || prop->location.id >= cudadrv_device_count())
        return CUDA_ERROR_INVALID_DEVICE;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemGetAllocationGranularity(size_t *granularity,
                                               const CUmemAllocationProp *prop,
                                               CUmemAllocationGranularity_flags option)
{
    CUresult rc = cudadrv_check_init();

    if (rc != CUDA_SUCCESS)
        return rc;
    if (!granularity || !prop || (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
                                  option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
        return CUDA_ERROR_INVALID_VALUE;
    rc = prop_check(prop);
    if (rc == CUDA_SUCCESS)
        *granularity = CUDADRV_GRANULARITY;
    return rc;
}

CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                             const CUmemAllocationProp *prop, unsigned long long flags)
{
    CUresult rc = cudadrv_check_init();
    struct cudadrv_alloc *a = NULL;
    char name[128], tag[DEVMEM_TAG_LEN];
    struct devmem_ref mem;
    int fd;

    if (rc != CUDA_SUCCESS)
        return rc;
    if (!handle || !prop || flags != 0 || size == 0 || size % CUDADRV_GRANULARITY)
        return CUDA_ERROR_INVALID_VALUE;
    rc = prop_check(prop);
    if (rc != CUDA_SUCCESS)
        return rc;
    /* No IMEX channel: FABRIC is refused as on the measured H200 host. */
    if (prop->requestedHandleTypes & CU_MEM_HANDLE_TYPE_FABRIC)
        return CUDA_ERROR_NOT_PERMITTED;
    if (prop->requestedHandleTypes & (CU_MEM_HANDLE_TYPE_WIN32 | CU_MEM_HANDLE_TYPE_WIN32_KMT))
        return CUDA_ERROR_NOT_SUPPORTED;
    if (devmem_alloc(prop->location.id, size, &mem) != 0) {
        cudadrv_trace("cuMemCreate(%zu, dev %d) = CUDA_ERROR_OUT_OF_MEMORY (device full)", size,
                      prop->location.id);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    devmem_tag(&mem, tag, sizeof(tag));
    snprintf(name, sizeof(name), CUDADRV_VMM_NAME "%d:%u:%s", prop->location.id,
             (unsigned)prop->requestedHandleTypes, tag);
    fd = memfd_create(name, MFD_CLOEXEC);
    if (fd >= 0 && ftruncate(fd, (off_t)size) < 0) {
        close(fd);
        fd = -1;
    }
    if (fd < 0) {
        devmem_release(&mem, 1);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_lock(&cudadrv_lock);
    a = alloc_new(fd, size, prop, &mem, 1);
    if (a)
        *handle = a->handle;
    pthread_mutex_unlock(&cudadrv_lock);
    if (!a) {
        close(fd);
        devmem_release(&mem, 1);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    cudadrv_trace("cuMemCreate(%zu, dev %d, types %u) = 0x%llx", size, prop->location.id,
                  (unsigned)prop->requestedHandleTypes, (unsigned long long)*handle);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle)
{
    CUresult rc = cudadrv_check_init();
    struct cudadrv_alloc *a;

    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&cudadrv_lock);
    a = cudadrv_alloc_lookup(handle);
    if (!a) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        a->refs--;
        alloc_maybe_free(a);
    }
    pthread_mutex_unlock(&cudadrv_lock);
    cudadrv_trace("cuMemRelease(0x%llx) = %d", (unsigned long long)handle, (int)rc);
    return rc;
}

CUresult CUDAAPI cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    CUresult rc = cudadrv_check_init();
    struct cudadrv_region *r;

    if (rc != CUDA_SUCCESS)
        return rc;
    if (!handle)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&cudadrv_lock);
    r = cudadrv_region_find((uintptr_t)addr, CUDADRV_MAP);
    if (!r) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        r->alloc->refs++;
        *handle = r->alloc->handle;
    }
    pthread_mutex_unlock(&cudadrv_lock);
    return rc;
}

CUresult CUDAAPI cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
                                                        CUmemGenericAllocationHandle handle)
{
    CUresult rc = cudadrv_check_init();
    struct cudadrv_alloc *a;

    if (rc != CUDA_SUCCESS)
        return rc;
    if (!prop)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&cudadrv_lock);
    a = cudadrv_alloc_lookup(handle);
    if (a)
        *prop = a->prop;
    pthread_mutex_unlock(&cudadrv_lock);
    return a ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* Export of a handle type the allocation did not request at cuMemCreate
 * is refused with CUDA_ERROR_INVALID_VALUE (the real driver refuses it
 * too; the exact code is not verified on hardware). */
CUresult CUDAAPI cuMemExportToShareableHandle(void *shareableHandle,
                                              CUmemGenericAllocationHandle handle,
                                              CUmemAllocationHandleType handleType,
                                              unsigned long long flags)
{
    CUresult rc = cudadrv_check_init();
    struct cudadrv_alloc *a;
    int fd = -1;

    if (rc != CUDA_SUCCESS)
        return rc;
    if (!shareableHandle || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (handleType == CU_MEM_HANDLE_TYPE_WIN32 || handleType == CU_MEM_HANDLE_TYPE_WIN32_KMT)
        return CUDA_ERROR_NOT_SUPPORTED;
    pthread_mutex_lock(&cudadrv_lock);
    a = cudadrv_alloc_lookup(handle);
    if (!a || handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR ||
        !(a->prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
        rc = CUDA_ERROR_INVALID_VALUE;
    else if ((fd = cudadrv_vmm_ctl_export(a)) < 0)
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_unlock(&cudadrv_lock);
    if (rc == CUDA_SUCCESS)
        *(int *)shareableHandle = fd;
    cudadrv_trace("cuMemExportToShareableHandle(0x%llx, type %d) = %d fd %d",
                  (unsigned long long)handle, (int)handleType, (int)rc, fd);
    return rc;
}

/* Only fds of this double's VMM memfds are accepted: anything else (a
 * legacy memfd, a pipe, a closed number) is CUDA_ERROR_INVALID_VALUE. The
 * caller may close its fd afterwards: the allocation keeps a duplicate. */
CUresult CUDAAPI cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle,
                                                void *osHandle,
                                                CUmemAllocationHandleType shHandleType)
{
    CUresult rc = cudadrv_check_init();
    int fd = (int)(intptr_t)osHandle, dup_fd, dev, tag_at = 0;
    char path[64], link[160], tag[DEVMEM_TAG_LEN] = "";
    CUmemAllocationProp prop;
    struct cudadrv_alloc *a;
    struct devmem_ref mem;
    unsigned types;
    struct stat st;
    ssize_t n;

    if (rc != CUDA_SUCCESS)
        return rc;
    if (!handle)
        return CUDA_ERROR_INVALID_VALUE;
    if (shHandleType == CU_MEM_HANDLE_TYPE_WIN32 || shHandleType == CU_MEM_HANDLE_TYPE_WIN32_KMT)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || fd < 0)
        return CUDA_ERROR_INVALID_VALUE;
    dup_fd = cudadrv_vmm_ctl_import(fd);
    if (dup_fd < 0) /* an allocation's memfd itself (CUDADRV_VMM_EXPORT=memfd) */
        dup_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (dup_fd >= 0) {
        snprintf(path, sizeof(path), "/proc/self/fd/%d", dup_fd);
        n = readlink(path, link, sizeof(link) - 1);
    } else {
        n = -1;
    }
    link[n < 0 ? 0 : n] = '\0';
    if (sscanf(link, "/memfd:" CUDADRV_VMM_NAME "%d:%u:%n", &dev, &types, &tag_at) != 2 ||
        fstat(dup_fd, &st) < 0 || st.st_size <= 0) {
        cudadrv_trace("cuMemImportFromShareableHandle: fd %d is no live export ('%s'), refused",
                      fd, link);
        if (dup_fd >= 0)
            close(dup_fd);
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (dev < 0 || dev >= cudadrv_device_count()) {
        close(dup_fd);
        return CUDA_ERROR_INVALID_DEVICE;
    }
    if (tag_at > 0)
        snprintf(tag, sizeof(tag), "%.*s", (int)strcspn(link + tag_at, " "), link + tag_at);
    /* The same physical memory: held, not allocated again. */
    devmem_acquire(tag, dev, (uint64_t)st.st_size, &mem);
    memset(&prop, 0, sizeof(prop));
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.requestedHandleTypes = (CUmemAllocationHandleType)types;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    pthread_mutex_lock(&cudadrv_lock);
    a = alloc_new(dup_fd, (size_t)st.st_size, &prop, &mem, 0);
    if (a)
        *handle = a->handle;
    pthread_mutex_unlock(&cudadrv_lock);
    if (!a) {
        close(dup_fd);
        devmem_release(&mem, 0);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    cudadrv_trace("cuMemImportFromShareableHandle(fd %d) = 0x%llx size %lld", fd,
                  (unsigned long long)*handle, (long long)st.st_size);
    return CUDA_SUCCESS;
}
