/* SPDX-License-Identifier: MIT */
/*
 * zedrv: the IPC entry points newer than loader 1.8.12's spec 1.4, as
 * compute-runtime implements them (level_zero/core/source/context/
 * context.cpp, api/core/ze_memory_api_entrypoints.cpp):
 *   zeMemGetIpcHandleWithProperties (1.15): zeMemGetIpcHandle with a pNext
 *     chain; a ze_ipc_mem_handle_type_ext_desc_t asking for
 *     FABRIC_ACCESSIBLE is refused (no fabric here) with
 *     ZE_RESULT_ERROR_UNSUPPORTED_FEATURE, other structures are ignored.
 *   zeMemGetFileDescriptorFromIpcHandleExp (1.6): the fd in the handle, if
 *     it is one this process exported and did not put back
 *     (Context::getFdFromIpcHandle looks it up in the driver's IPC map);
 *     else ZE_RESULT_ERROR_INVALID_ARGUMENT. So in another process than
 *     the exporter it fails, unless the number happens to name an export
 *     of that process, which it then returns (the wrong object).
 *   zeMemGetIpcHandleFromFileDescriptorExp (1.6): the handle of the
 *     export whose fd that is (Context::getIpcHandleFromFd copies the map
 *     entry's handle, no reference taken); else INVALID_ARGUMENT.
 * Reached through the Mem table at 1.15 (WithProperties), the MemExp
 * table (the other two), by name (dlsym of this library), and, unlike
 * compute-runtime, through zeDriverGetExtensionFunctionAddress: loader
 * 1.8.12 neither exports nor forwards them, and tests on that loader reach
 * them this way (compute-runtime answers only zex* and a few other names).
 */
#include "test/zedrv/zedrv.h"

#include <limits.h>
#include <string.h>

/* ze_api.h 1.15 (not in the 1.4 headers). */
#define ZEDRV_STYPE_IPC_MEM_HANDLE_TYPE_EXT_DESC 0x0002003Du
#define ZEDRV_IPC_MEM_HANDLE_TYPE_FLAG_FABRIC_ACCESSIBLE (1u << 1)

struct ipc_mem_handle_type_ext_desc {
    ze_structure_type_t stype;
    const void *pNext;
    uint32_t typeFlags;
};

ze_result_t zedrv_mem_get_ipc_handle_with_properties(ze_context_handle_t context, const void *ptr,
                                                     void *pNext, ze_ipc_mem_handle_t *handle)
{
    for (const ze_base_desc_t *d = pNext; d != NULL; d = d->pNext) {
        const struct ipc_mem_handle_type_ext_desc *t = (const void *)d;

        if ((uint32_t)d->stype == ZEDRV_STYPE_IPC_MEM_HANDLE_TYPE_EXT_DESC &&
            (t->typeFlags & ZEDRV_IPC_MEM_HANDLE_TYPE_FLAG_FABRIC_ACCESSIBLE))
            return ZE_RESULT_ERROR_UNSUPPORTED_FEATURE;
    }
    return zedrv_mem_get_ipc_handle(context, ptr, handle);
}

/* The fd @0: a uint64 in the classic layout, an int in the opaque one. */
static uint64_t handle_fd(const ze_ipc_mem_handle_t *h)
{
    uint64_t fd;
    int ofd;

    if (zedrv_config()->layout == ZEDRV_LAYOUT_CLASSIC) {
        memcpy(&fd, h->data, sizeof(fd));
        return fd;
    }
    memcpy(&ofd, h->data, sizeof(ofd));
    return ofd < 0 ? UINT64_MAX : (uint64_t)ofd;
}

ze_result_t zedrv_mem_get_fd_from_ipc_handle(ze_context_handle_t context,
                                             ze_ipc_mem_handle_t handle, uint64_t *fd_p)
{
    uint64_t fd = handle_fd(&handle);
    struct zedrv_alloc *a;

    if (!zedrv_context_ok(context))
        return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    if (fd_p == NULL)
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    pthread_mutex_lock(&zedrv_lock);
    a = fd <= INT_MAX ? zedrv_alloc_find_export((int)fd) : NULL;
    pthread_mutex_unlock(&zedrv_lock);
    ZEDRV_LOG("zeMemGetFileDescriptorFromIpcHandleExp(fd %llu) = %s", (unsigned long long)fd,
              a != NULL ? "ours" : "not an export of this process");
    if (a == NULL)
        return ZE_RESULT_ERROR_INVALID_ARGUMENT;
    *fd_p = fd;
    return ZE_RESULT_SUCCESS;
}

ze_result_t zedrv_mem_get_ipc_handle_from_fd(ze_context_handle_t context, uint64_t fd,
                                             ze_ipc_mem_handle_t *handle)
{
    struct zedrv_alloc *a;

    if (!zedrv_context_ok(context))
        return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    if (handle == NULL)
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    pthread_mutex_lock(&zedrv_lock);
    a = fd <= INT_MAX ? zedrv_alloc_find_export((int)fd) : NULL;
    if (a != NULL)
        zedrv_handle_write(handle, a, a->export_offset);
    pthread_mutex_unlock(&zedrv_lock);
    ZEDRV_LOG("zeMemGetIpcHandleFromFileDescriptorExp(fd %llu) = %s", (unsigned long long)fd,
              a != NULL ? "its handle" : "not an export of this process");
    return a != NULL ? ZE_RESULT_SUCCESS : ZE_RESULT_ERROR_INVALID_ARGUMENT;
}

void *zedrv_newer_entry_point(const char *name)
{
    static const struct {
        const char *name;
        void *fn;
    } table[] = {
        {"zeMemGetIpcHandleWithProperties", (void *)zedrv_mem_get_ipc_handle_with_properties},
        {"zeMemGetFileDescriptorFromIpcHandleExp", (void *)zedrv_mem_get_fd_from_ipc_handle},
        {"zeMemGetIpcHandleFromFileDescriptorExp", (void *)zedrv_mem_get_ipc_handle_from_fd},
        {"zeMemPutIpcHandle", (void *)zedrv_mem_put_ipc_handle},
        {"zeEventPoolPutIpcHandle", (void *)zedrv_event_pool_put_ipc_handle},
    };

    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
        if (strcmp(name, table[i].name) == 0)
            return table[i].fn;
    return NULL;
}
