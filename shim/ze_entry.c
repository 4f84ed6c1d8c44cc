/* SPDX-License-Identifier: MIT */
/*
 * ze_entry.c - every route into the Level Zero IPC calls ends here:
 *  - exported symbols (direct calls; dlsym of the loader, see dlsym.c);
 *  - the DDI tables: the loader fills its dispatch table by calling its own
 *    exported zeGet*ProcAddrTable through the PLT, and programs may call
 *    them too; we interpose the getters and wrap the entries;
 *  - the zex* extensions handed out by zeDriverGetExtensionFunctionAddress.
 * A direct call passes our symbol wrapper, then the loader, then our table
 * wrapper: the symbol wrapper calls the loader inside byval_enter(), so the
 * table wrapper on the same path passes through (handled once, see
 * SYM_NEXT).
 */
#include <string.h>

#include "shim/log.h"
#include "shim/ze_route.h"

/* Resolve the loader's `name` once; NULL stays NULL until it appears. */
void *byval_ze_real_cached(void **slot, const char *name)
{
    void *p = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
    if (!p) {
        p = byval_ze_sym(name);
        __atomic_store_n(slot, p, __ATOMIC_RELEASE);
    }
    return p;
}

/* ---- exported symbols ---------------------------------------------- */

SYM_NEXT(zeMemGetIpcHandle, ze_pfnMemGetIpcHandle_t, ZE_RESULT_ERROR_UNINITIALIZED,
         (ze_context_handle_t c, const void *p, ze_ipc_mem_handle_t *h), (c, p, h))
SYM_NEXT(zeMemOpenIpcHandle, ze_pfnMemOpenIpcHandle_t, ZE_RESULT_ERROR_UNINITIALIZED,
         (ze_context_handle_t c, ze_device_handle_t d, ze_ipc_mem_handle_t h,
          ze_ipc_memory_flags_t f, void **pp),
         (c, d, h, f, pp))
SYM_NEXT(zeMemCloseIpcHandle, ze_pfnMemCloseIpcHandle_t, ZE_RESULT_ERROR_UNINITIALIZED,
         (ze_context_handle_t c, const void *p), (c, p))
SYM_NEXT(zeMemPutIpcHandle, byval_ze_mem_put_fn, ZE_RESULT_ERROR_UNSUPPORTED_FEATURE,
         (ze_context_handle_t c, ze_ipc_mem_handle_t h), (c, h))
SYM_NEXT(zeMemFree, ze_pfnMemFree_t, ZE_RESULT_ERROR_UNINITIALIZED,
         (ze_context_handle_t c, void *p), (c, p))
SYM_NEXT(zeMemFreeExt, ze_pfnMemFreeExt_t, ZE_RESULT_ERROR_UNINITIALIZED,
         (ze_context_handle_t c, const ze_memory_free_ext_desc_t *d, void *p), (c, d, p))

ZE_EXPORT ze_result_t zeMemGetIpcHandle(ze_context_handle_t ctx, const void *ptr,
                                        ze_ipc_mem_handle_t *handle)
{
    return byval_ze_get_ipc(sym_next_zeMemGetIpcHandle, ctx, ptr, handle);
}

ZE_EXPORT ze_result_t zeMemOpenIpcHandle(ze_context_handle_t ctx, ze_device_handle_t dev,
                                         ze_ipc_mem_handle_t handle, ze_ipc_memory_flags_t flags,
                                         void **pptr)
{
    return byval_ze_open_ipc(sym_next_zeMemOpenIpcHandle, ctx, dev, handle, flags, pptr);
}

ZE_EXPORT ze_result_t zeMemCloseIpcHandle(ze_context_handle_t ctx, const void *ptr)
{
    return byval_ze_close_ipc(sym_next_zeMemCloseIpcHandle, ctx, ptr);
}

ZE_EXPORT ze_result_t zeMemPutIpcHandle(ze_context_handle_t ctx, ze_ipc_mem_handle_t handle)
{
    return byval_ze_put_ipc(sym_next_zeMemPutIpcHandle, ctx, handle);
}

ZE_EXPORT ze_result_t zeMemFree(ze_context_handle_t ctx, void *ptr)
{
    return byval_ze_free(sym_next_zeMemFree, ctx, ptr);
}

ZE_EXPORT ze_result_t zeMemFreeExt(ze_context_handle_t ctx, const ze_memory_free_ext_desc_t *desc,
                                   void *ptr)
{
    return byval_ze_free_ext(sym_next_zeMemFreeExt, ctx, desc, ptr);
}

ZE_EXPORT ze_result_t zeContextDestroy(ze_context_handle_t ctx)
{
    return byval_ze_context_destroy(REAL(ze_pfnContextDestroy_t, zeContextDestroy), ctx);
}

/* ---- zex extensions -------------------------------------------------- */

static byval_zex_get_handles_fn zex_get_next;
static byval_zex_open_handles_fn zex_open_next;

static ze_result_t zex_get_wrapper(ze_context_handle_t ctx, void *ptr, uint32_t *count,
                                   ze_ipc_mem_handle_t *handles)
{
    return byval_zex_get_ipcs(__atomic_load_n(&zex_get_next, __ATOMIC_ACQUIRE), ctx, ptr, count,
                              handles);
}

static ze_result_t zex_open_wrapper(ze_context_handle_t ctx, ze_device_handle_t dev, uint32_t count,
                                    ze_ipc_mem_handle_t *handles, ze_ipc_memory_flags_t flags,
                                    void **pptr)
{
    return byval_zex_open_ipcs(__atomic_load_n(&zex_open_next, __ATOMIC_ACQUIRE), ctx, dev, count,
                               handles, flags, pptr);
}

static ze_result_t ext_address(ze_pfnDriverGetExtensionFunctionAddress_t next,
                               ze_driver_handle_t drv, const char *name, void **pfn)
{
    if (!next)
        return ZE_RESULT_ERROR_UNINITIALIZED;
    ze_result_t r = next(drv, name, pfn);
    if (r != ZE_RESULT_SUCCESS || !name || !pfn || !*pfn || byval_in_shim() || !byval_init())
        return r;
    if (strcmp(name, "zexMemGetIpcHandles") == 0 && *pfn != (void *)zex_get_wrapper) {
        __atomic_store_n(&zex_get_next, (byval_zex_get_handles_fn)*pfn, __ATOMIC_RELEASE);
        *pfn = (void *)zex_get_wrapper;
    } else if (strcmp(name, "zexMemOpenIpcHandles") == 0 && *pfn != (void *)zex_open_wrapper) {
        __atomic_store_n(&zex_open_next, (byval_zex_open_handles_fn)*pfn, __ATOMIC_RELEASE);
        *pfn = (void *)zex_open_wrapper;
    } else {
        void *w = byval_ze_ext_wrapper(name, *pfn); /* the newer entry points */
        if (w)
            *pfn = w;
    }
    return r;
}

ZE_EXPORT ze_result_t zeDriverGetExtensionFunctionAddress(ze_driver_handle_t drv, const char *name,
                                                          void **pfn)
{
    return ext_address(
        REAL(ze_pfnDriverGetExtensionFunctionAddress_t, zeDriverGetExtensionFunctionAddress), drv,
        name, pfn);
}

/* ---- DDI tables ------------------------------------------------------ */

static struct {
    ze_pfnMemGetIpcHandle_t get;
    ze_pfnMemOpenIpcHandle_t open;
    ze_pfnMemCloseIpcHandle_t close;
    ze_pfnMemFree_t free;
    ze_pfnMemFreeExt_t free_ext;
    byval_ze_mem_put_fn put;
    ze_pfnDriverGetExtensionFunctionAddress_t ext;
    ze_pfnContextDestroy_t ctx_destroy;
} next_of;

#define NEXT(field) __atomic_load_n(&next_of.field, __ATOMIC_ACQUIRE)

static ze_result_t tw_get(ze_context_handle_t c, const void *p, ze_ipc_mem_handle_t *h)
{
    return byval_ze_get_ipc(NEXT(get), c, p, h);
}

static ze_result_t tw_open(ze_context_handle_t c, ze_device_handle_t d, ze_ipc_mem_handle_t h,
                           ze_ipc_memory_flags_t f, void **pp)
{
    return byval_ze_open_ipc(NEXT(open), c, d, h, f, pp);
}

static ze_result_t tw_close(ze_context_handle_t c, const void *p)
{
    return byval_ze_close_ipc(NEXT(close), c, p);
}

static ze_result_t tw_free(ze_context_handle_t c, void *p)
{
    return byval_ze_free(NEXT(free), c, p);
}

static ze_result_t tw_free_ext(ze_context_handle_t c, const ze_memory_free_ext_desc_t *d, void *p)
{
    return byval_ze_free_ext(NEXT(free_ext), c, d, p);
}

static ze_result_t tw_put(ze_context_handle_t c, ze_ipc_mem_handle_t h)
{
    return byval_ze_put_ipc(NEXT(put), c, h);
}

static ze_result_t tw_ctx_destroy(ze_context_handle_t c)
{
    return byval_ze_context_destroy(NEXT(ctx_destroy), c);
}

static ze_result_t tw_ext(ze_driver_handle_t d, const char *n, void **pfn)
{
    return ext_address(NEXT(ext), d, n, pfn);
}

void byval_ze_wrap_slot(void **slot, void **next, void *wrapper, const char *what)
{
    void *cur = *slot;
    if (!cur || cur == wrapper)
        return;
    void *expected = NULL;
    if (!__atomic_compare_exchange_n(next, &expected, cur, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) &&
        expected != cur)
        BYVAL_LOG_DEBUG("%s: a second table holds %p (first: %p); calls go to the first", what, cur,
                        expected);
    *slot = wrapper;
}

#define WRAP(table_field, next_field, wrapper) WRAP_SLOT(table_field, next_of.next_field, wrapper)

ZE_EXPORT ze_result_t zeGetMemProcAddrTable(ze_api_version_t version, ze_mem_dditable_t *table)
{
    ze_pfnGetMemProcAddrTable_t real = REAL(ze_pfnGetMemProcAddrTable_t, zeGetMemProcAddrTable);
    if (!real)
        return ZE_RESULT_ERROR_UNINITIALIZED;
    ze_result_t r = real(version, table);
    if (r != ZE_RESULT_SUCCESS || !table || !byval_init())
        return r;
    WRAP(table->pfnGetIpcHandle, get, tw_get);
    WRAP(table->pfnOpenIpcHandle, open, tw_open);
    WRAP(table->pfnCloseIpcHandle, close, tw_close);
    WRAP(table->pfnFree, free, tw_free);
    WRAP(table->pfnFreeExt, free_ext, tw_free_ext);
    if (version >= BYVAL_ZE_API_1_6)
        WRAP(((byval_ze_mem_ddi_1_6_t *)table)->pfnPutIpcHandle, put, tw_put);
    byval_ze_wrap_mem_newer(version, table);
    return r;
}

ZE_EXPORT ze_result_t zeGetDriverProcAddrTable(ze_api_version_t version,
                                               ze_driver_dditable_t *table)
{
    ze_pfnGetDriverProcAddrTable_t real =
        REAL(ze_pfnGetDriverProcAddrTable_t, zeGetDriverProcAddrTable);
    if (!real)
        return ZE_RESULT_ERROR_UNINITIALIZED;
    ze_result_t r = real(version, table);
    if (r != ZE_RESULT_SUCCESS || !table || !byval_init())
        return r;
    WRAP(table->pfnGetExtensionFunctionAddress, ext, tw_ext);
    return r;
}

ZE_EXPORT ze_result_t zeGetContextProcAddrTable(ze_api_version_t version,
                                                ze_context_dditable_t *table)
{
    ze_pfnGetContextProcAddrTable_t real =
        REAL(ze_pfnGetContextProcAddrTable_t, zeGetContextProcAddrTable);
    if (!real)
        return ZE_RESULT_ERROR_UNINITIALIZED;
    ze_result_t r = real(version, table);
    if (r != ZE_RESULT_SUCCESS || !table || !byval_init())
        return r;
    WRAP(table->pfnDestroy, ctx_destroy, tw_ctx_destroy);
    return r;
}
