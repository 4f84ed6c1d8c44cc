/* SPDX-License-Identifier: MIT */
/*
 * ze_entry_event.c - every route into the event-pool IPC calls: exported
 * symbols (and so dlsym of the loader, dlsym.c) and the EventPool DDI
 * table (zeGetEventPoolProcAddrTable, which the loader fills its own
 * dispatch table with; the 1.6 layout adds pfnPutIpcHandle). Handled once
 * per call whatever the route (ze_route.h, SYM_NEXT).
 */
#include "shim/log.h"
#include "shim/ze_route.h"

/* ---- exported symbols ---------------------------------------------- */

SYM_NEXT(zeEventPoolCreate, ze_pfnEventPoolCreate_t, ZE_RESULT_ERROR_UNINITIALIZED,
         (ze_context_handle_t c, const ze_event_pool_desc_t *d, uint32_t n, ze_device_handle_t *ds,
          ze_event_pool_handle_t *pp),
         (c, d, n, ds, pp))
SYM_NEXT(zeEventPoolGetIpcHandle, ze_pfnEventPoolGetIpcHandle_t, ZE_RESULT_ERROR_UNINITIALIZED,
         (ze_event_pool_handle_t p, ze_ipc_event_pool_handle_t *h), (p, h))
SYM_NEXT(zeEventPoolOpenIpcHandle, ze_pfnEventPoolOpenIpcHandle_t, ZE_RESULT_ERROR_UNINITIALIZED,
         (ze_context_handle_t c, ze_ipc_event_pool_handle_t h, ze_event_pool_handle_t *pp),
         (c, h, pp))
SYM_NEXT(zeEventPoolCloseIpcHandle, ze_pfnEventPoolCloseIpcHandle_t, ZE_RESULT_ERROR_UNINITIALIZED,
         (ze_event_pool_handle_t p), (p))
SYM_NEXT(zeEventPoolPutIpcHandle, byval_ze_pool_put_fn, ZE_RESULT_ERROR_UNSUPPORTED_FEATURE,
         (ze_context_handle_t c, ze_ipc_event_pool_handle_t h), (c, h))
SYM_NEXT(zeEventPoolDestroy, ze_pfnEventPoolDestroy_t, ZE_RESULT_ERROR_UNINITIALIZED,
         (ze_event_pool_handle_t p), (p))

ZE_EXPORT ze_result_t zeEventPoolCreate(ze_context_handle_t ctx, const ze_event_pool_desc_t *desc,
                                        uint32_t ndevices, ze_device_handle_t *devices,
                                        ze_event_pool_handle_t *pool_p)
{
    return byval_ze_pool_create(sym_next_zeEventPoolCreate, ctx, desc, ndevices, devices, pool_p);
}

ZE_EXPORT ze_result_t zeEventPoolGetIpcHandle(ze_event_pool_handle_t pool,
                                              ze_ipc_event_pool_handle_t *handle)
{
    return byval_ze_pool_get_ipc(sym_next_zeEventPoolGetIpcHandle, pool, handle);
}

ZE_EXPORT ze_result_t zeEventPoolOpenIpcHandle(ze_context_handle_t ctx,
                                               ze_ipc_event_pool_handle_t handle,
                                               ze_event_pool_handle_t *pool_p)
{
    return byval_ze_pool_open_ipc(sym_next_zeEventPoolOpenIpcHandle, ctx, handle, pool_p);
}

ZE_EXPORT ze_result_t zeEventPoolCloseIpcHandle(ze_event_pool_handle_t pool)
{
    return byval_ze_pool_close_ipc(sym_next_zeEventPoolCloseIpcHandle, pool);
}

ZE_EXPORT ze_result_t zeEventPoolPutIpcHandle(ze_context_handle_t ctx,
                                              ze_ipc_event_pool_handle_t handle)
{
    return byval_ze_pool_put_ipc(sym_next_zeEventPoolPutIpcHandle, ctx, handle);
}

ZE_EXPORT ze_result_t zeEventPoolDestroy(ze_event_pool_handle_t pool)
{
    return byval_ze_pool_destroy(sym_next_zeEventPoolDestroy, pool);
}

/* ---- the EventPool table ------------------------------------------- */

static struct {
    ze_pfnEventPoolCreate_t create;
    ze_pfnEventPoolGetIpcHandle_t get;
    ze_pfnEventPoolOpenIpcHandle_t open;
    ze_pfnEventPoolCloseIpcHandle_t close;
    ze_pfnEventPoolDestroy_t destroy;
    byval_ze_pool_put_fn put;
} next_of;

static ze_result_t tw_create(ze_context_handle_t c, const ze_event_pool_desc_t *d, uint32_t n,
                             ze_device_handle_t *ds, ze_event_pool_handle_t *pp)
{
    return byval_ze_pool_create(NEXT_OF(next_of.create), c, d, n, ds, pp);
}

static ze_result_t tw_get(ze_event_pool_handle_t p, ze_ipc_event_pool_handle_t *h)
{
    return byval_ze_pool_get_ipc(NEXT_OF(next_of.get), p, h);
}

static ze_result_t tw_open(ze_context_handle_t c, ze_ipc_event_pool_handle_t h,
                           ze_event_pool_handle_t *pp)
{
    return byval_ze_pool_open_ipc(NEXT_OF(next_of.open), c, h, pp);
}

static ze_result_t tw_close(ze_event_pool_handle_t p)
{
    return byval_ze_pool_close_ipc(NEXT_OF(next_of.close), p);
}

static ze_result_t tw_destroy(ze_event_pool_handle_t p)
{
    return byval_ze_pool_destroy(NEXT_OF(next_of.destroy), p);
}

static ze_result_t tw_put(ze_context_handle_t c, ze_ipc_event_pool_handle_t h)
{
    return byval_ze_pool_put_ipc(NEXT_OF(next_of.put), c, h);
}

ZE_EXPORT ze_result_t zeGetEventPoolProcAddrTable(ze_api_version_t version,
                                                  ze_event_pool_dditable_t *table)
{
    ze_pfnGetEventPoolProcAddrTable_t real =
        REAL(ze_pfnGetEventPoolProcAddrTable_t, zeGetEventPoolProcAddrTable);
    if (!real)
        return ZE_RESULT_ERROR_UNINITIALIZED;
    ze_result_t r = real(version, table);
    if (r != ZE_RESULT_SUCCESS || !table || !byval_init())
        return r;
    WRAP_SLOT(table->pfnCreate, next_of.create, tw_create);
    WRAP_SLOT(table->pfnGetIpcHandle, next_of.get, tw_get);
    WRAP_SLOT(table->pfnOpenIpcHandle, next_of.open, tw_open);
    WRAP_SLOT(table->pfnCloseIpcHandle, next_of.close, tw_close);
    WRAP_SLOT(table->pfnDestroy, next_of.destroy, tw_destroy);
    if (version >= BYVAL_ZE_API_1_6)
        WRAP_SLOT(((byval_ze_pool_ddi_1_6_t *)table)->pfnPutIpcHandle, next_of.put, tw_put);
    return r;
}
