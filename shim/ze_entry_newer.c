/* SPDX-License-Identifier: MIT */
/*
 * ze_entry_newer.c - the routes into the IPC entry points newer than the
 * 1.8.12 loader (spec 1.4) we build against: zeMemGetIpcHandleWithProperties
 * (1.15), zeMemGetFileDescriptorFromIpcHandleExp and
 * zeMemGetIpcHandleFromFileDescriptorExp (1.6, MemExp table), and the
 * puts (1.6) where zeDriverGetExtensionFunctionAddress hands them out.
 *  - symbols: resolved lazily in the loader; a loader without them gets
 *    ZE_RESULT_ERROR_UNSUPPORTED_FEATURE (dlsym of such a loader finds
 *    nothing, as natively: dlsym.c hands out a wrapper only for a symbol
 *    the loader has);
 *  - DDI tables: the Mem table's 1.15 slot (from zeGetMemProcAddrTable,
 *    ze_entry.c) and zeGetMemExpProcAddrTable;
 *  - zeDriverGetExtensionFunctionAddress, which older loaders forward to
 *    the driver for any name (the way to reach experimental functions
 *    through a loader that does not export them).
 */
#include <string.h>

#include "shim/log.h"
#include "shim/ze_route.h"

/* ---- exported symbols ---------------------------------------------- */

SYM_NEXT(zeMemGetIpcHandleWithProperties, byval_ze_get_props_fn,
         ZE_RESULT_ERROR_UNSUPPORTED_FEATURE,
         (ze_context_handle_t c, const void *p, void *n, ze_ipc_mem_handle_t *h), (c, p, n, h))
SYM_NEXT(zeMemGetFileDescriptorFromIpcHandleExp, byval_ze_fd_from_ipc_fn,
         ZE_RESULT_ERROR_UNSUPPORTED_FEATURE,
         (ze_context_handle_t c, ze_ipc_mem_handle_t h, uint64_t *fd), (c, h, fd))
SYM_NEXT(zeMemGetIpcHandleFromFileDescriptorExp, byval_ze_ipc_from_fd_fn,
         ZE_RESULT_ERROR_UNSUPPORTED_FEATURE,
         (ze_context_handle_t c, uint64_t fd, ze_ipc_mem_handle_t *h), (c, fd, h))

ZE_EXPORT ze_result_t zeMemGetIpcHandleWithProperties(ze_context_handle_t ctx, const void *ptr,
                                                      void *pNext, ze_ipc_mem_handle_t *handle)
{
    return byval_ze_get_ipc_props(sym_next_zeMemGetIpcHandleWithProperties, ctx, ptr, pNext,
                                  handle);
}

ZE_EXPORT ze_result_t zeMemGetFileDescriptorFromIpcHandleExp(ze_context_handle_t ctx,
                                                             ze_ipc_mem_handle_t handle,
                                                             uint64_t *fd_p)
{
    return byval_ze_fd_from_ipc(sym_next_zeMemGetFileDescriptorFromIpcHandleExp, ctx, handle, fd_p);
}

ZE_EXPORT ze_result_t zeMemGetIpcHandleFromFileDescriptorExp(ze_context_handle_t ctx, uint64_t fd,
                                                             ze_ipc_mem_handle_t *handle)
{
    return byval_ze_ipc_from_fd(sym_next_zeMemGetIpcHandleFromFileDescriptorExp, ctx, fd, handle);
}

/* ---- table and extension wrappers ------------------------------------ */

static struct {
    byval_ze_get_props_fn props;
    byval_ze_fd_from_ipc_fn fd_from_ipc;
    byval_ze_ipc_from_fd_fn ipc_from_fd;
    byval_ze_mem_put_fn mem_put;
    byval_ze_pool_put_fn pool_put;
} next_of;

static ze_result_t tw_props(ze_context_handle_t c, const void *p, void *n, ze_ipc_mem_handle_t *h)
{
    return byval_ze_get_ipc_props(NEXT_OF(next_of.props), c, p, n, h);
}

static ze_result_t tw_fd_from_ipc(ze_context_handle_t c, ze_ipc_mem_handle_t h, uint64_t *fd)
{
    return byval_ze_fd_from_ipc(NEXT_OF(next_of.fd_from_ipc), c, h, fd);
}

static ze_result_t tw_ipc_from_fd(ze_context_handle_t c, uint64_t fd, ze_ipc_mem_handle_t *h)
{
    return byval_ze_ipc_from_fd(NEXT_OF(next_of.ipc_from_fd), c, fd, h);
}

static ze_result_t tw_mem_put(ze_context_handle_t c, ze_ipc_mem_handle_t h)
{
    return byval_ze_put_ipc(NEXT_OF(next_of.mem_put), c, h);
}

static ze_result_t tw_pool_put(ze_context_handle_t c, ze_ipc_event_pool_handle_t h)
{
    return byval_ze_pool_put_ipc(NEXT_OF(next_of.pool_put), c, h);
}

void byval_ze_wrap_mem_newer(ze_api_version_t version, ze_mem_dditable_t *table)
{
    if (version >= BYVAL_ZE_API_1_15)
        WRAP_SLOT(((byval_ze_mem_ddi_1_15_t *)table)->pfnGetIpcHandleWithProperties, next_of.props,
                  tw_props);
}

ZE_EXPORT ze_result_t zeGetMemExpProcAddrTable(ze_api_version_t version,
                                               byval_ze_mem_exp_ddi_t *table)
{
    typedef ze_result_t (*getter_t)(ze_api_version_t, byval_ze_mem_exp_ddi_t *);
    getter_t real = REAL(getter_t, zeGetMemExpProcAddrTable);
    if (!real)
        return ZE_RESULT_ERROR_UNINITIALIZED;
    ze_result_t r = real(version, table);
    if (r != ZE_RESULT_SUCCESS || !table || !byval_init())
        return r;
    WRAP_SLOT(table->pfnGetFileDescriptorFromIpcHandleExp, next_of.fd_from_ipc, tw_fd_from_ipc);
    WRAP_SLOT(table->pfnGetIpcHandleFromFileDescriptorExp, next_of.ipc_from_fd, tw_ipc_from_fd);
    return r;
}

/* What zeDriverGetExtensionFunctionAddress hands out for these names. */
void *byval_ze_ext_wrapper(const char *name, void *pfn)
{
    static const struct {
        const char *name;
        void **next;
        void *wrapper;
    } ext[] = {
        {"zeMemGetIpcHandleWithProperties", (void **)&next_of.props, (void *)tw_props},
        {"zeMemGetFileDescriptorFromIpcHandleExp", (void **)&next_of.fd_from_ipc,
         (void *)tw_fd_from_ipc},
        {"zeMemGetIpcHandleFromFileDescriptorExp", (void **)&next_of.ipc_from_fd,
         (void *)tw_ipc_from_fd},
        {"zeMemPutIpcHandle", (void **)&next_of.mem_put, (void *)tw_mem_put},
        {"zeEventPoolPutIpcHandle", (void **)&next_of.pool_put, (void *)tw_pool_put},
    };
    for (size_t i = 0; i < sizeof(ext) / sizeof(ext[0]); i++) {
        if (strcmp(name, ext[i].name) != 0)
            continue;
        void *slot = pfn;
        byval_ze_wrap_slot(&slot, ext[i].next, ext[i].wrapper, ext[i].name);
        return slot;
    }
    return NULL;
}
