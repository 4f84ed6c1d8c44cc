/* SPDX-License-Identifier: MIT */
/*
 * ze_zex.c - Intel's zexMemGetIpcHandles / zexMemOpenIpcHandles (a handle
 * per tile of an implicitly scaled allocation): each classic-layout handle
 * is made by value, each open resolves every handle's fd. The driver keeps
 * these exports itself (no put: their end is the free), and the rare
 * multi-handle open is not cached.
 */
#include <string.h>
#include <unistd.h>

#include "handles/resolve.h"
#include "shim/config.h"
#include "shim/init.h"
#include "shim/stats.h"
#include "shim/ze.h"

#define ZEX_MAX_HANDLES 16

ze_result_t byval_zex_get_ipcs(byval_zex_get_handles_fn next, ze_context_handle_t ctx, void *ptr,
                               uint32_t *count, ze_ipc_mem_handle_t *handles)
{
    if (!next)
        return ZE_RESULT_ERROR_UNINITIALIZED;
    if (!count || !handles || !*count || !byval_init() || !byval_cfg.ze)
        return next(ctx, ptr, count, handles);
    uint32_t n = *count;
    for (uint32_t i = 0; i < n; i++)
        byval_ze_pattern_fill((uint8_t *)handles[i].data);
    byval_enter();
    ze_result_t r = next(ctx, ptr, count, handles);
    byval_leave();
    uint64_t id;
    ze_device_handle_t dev = NULL;
    if (r != ZE_RESULT_SUCCESS || byval_ze_alloc_props(ctx, ptr, &id, &dev) != 0)
        return r;
    for (uint32_t i = 0; i < *count && i < n; i++)
        byval_ze_describe((uint8_t *)handles[i].data, ctx, ptr, id, dev, i);
    return r;
}

ze_result_t byval_zex_open_ipcs(byval_zex_open_handles_fn next, ze_context_handle_t ctx,
                                ze_device_handle_t dev, uint32_t count,
                                ze_ipc_mem_handle_t *handles, ze_ipc_memory_flags_t flags,
                                void **pptr)
{
    byval_self_t self;
    if (!next)
        return ZE_RESULT_ERROR_UNINITIALIZED;
    if (!handles || !count || count > ZEX_MAX_HANDLES || !byval_init() || !byval_cfg.ze ||
        byval_self_get(&self) != 0)
        return next(ctx, dev, count, handles, flags, pptr);
    ze_ipc_mem_handle_t local[ZEX_MAX_HANDLES];
    int fds[ZEX_MAX_HANDLES], ours = 0;
    ze_result_t r = ZE_RESULT_SUCCESS;
    uint32_t i;
    for (i = 0; i < count && r == ZE_RESULT_SUCCESS; i++) {
        byval_record_t rec;
        local[i] = handles[i];
        fds[i] = -1;
        if (!byval_ze_decode(handles[i].data, &rec) || rec.kind != BYVAL_KIND_ZE_MEM ||
            (rec.pid == self.pid && rec.pidns == self.pidns && rec.identity == self.identity))
            continue;
        r = byval_ze_resolve(&rec, &fds[i]);
        uint64_t fd64 = (uint64_t)fds[i];
        memcpy(local[i].data, &fd64, sizeof(fd64));
        ours = 1;
    }
    if (r == ZE_RESULT_SUCCESS) {
        if (ours)
            BYVAL_STAT_INC(opens);
        else
            BYVAL_STAT_INC(open_passthrough);
        byval_enter();
        r = next(ctx, dev, count, local, flags, pptr);
        byval_leave();
    }
    while (i--)
        if (fds[i] >= 0)
            close(fds[i]);
    return r;
}
