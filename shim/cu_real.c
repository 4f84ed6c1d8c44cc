/* SPDX-License-Identifier: MIT */
/* cu_real.c - the real libcuda entry points, found at run time: ipcbyval
 * never links against libcuda, so one binary serves machines with and
 * without NVIDIA GPUs. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include "shim/cu.h"
#include "shim/symbols.h"

/* The table, published once and complete (never changed after): NULL
 * until libcuda is there.
 *
 * No lock (issue 15, fork deadlock): a lock taken here by one thread while
 * another forks stays taken in the child, whose first wrapped call then
 * hangs. Racing first callers each resolve their own table (dlsym gives
 * every one the same pointers) and the first to publish wins; a fork at
 * any moment leaves the child NULL or a whole table. */
static byval_cu_real_t *real_p;

#define SYM(field, name) (*(void **)&t->field = byval_real_dlsym(h, name))

static const byval_cu_real_t *cu_real_resolve(void)
{
    /* Only once libcuda is there: our wrappers run because the program
     * reached libcuda, so a no-load open finds it. */
    void *h = dlopen("libcuda.so.1", RTLD_NOLOAD | RTLD_LAZY);
    if (!h)
        return NULL;
    byval_cu_real_t *t = calloc(1, sizeof(*t));
    if (!t) {
        dlclose(h);
        return NULL;
    }
    SYM(pointer_get_attribute, "cuPointerGetAttribute");
    SYM(mem_get_address_range, "cuMemGetAddressRange_v2");
    SYM(retain_allocation_handle, "cuMemRetainAllocationHandle");
    SYM(get_allocation_properties, "cuMemGetAllocationPropertiesFromHandle");
    SYM(export_shareable, "cuMemExportToShareableHandle");
    SYM(import_shareable, "cuMemImportFromShareableHandle");
    SYM(address_reserve, "cuMemAddressReserve");
    SYM(address_free, "cuMemAddressFree");
    SYM(map, "cuMemMap");
    SYM(set_access, "cuMemSetAccess");
    SYM(ctx_get_current, "cuCtxGetCurrent");
    SYM(ctx_set_current, "cuCtxSetCurrent");
    SYM(ctx_get_device, "cuCtxGetDevice");
    SYM(ctx_get_id, "cuCtxGetId");
    SYM(get_error_name, "cuGetErrorName");
    SYM(ipc_get, "cuIpcGetMemHandle");
    SYM(ipc_open_v2, "cuIpcOpenMemHandle_v2");
    SYM(ipc_open, "cuIpcOpenMemHandle");
    SYM(ipc_close, "cuIpcCloseMemHandle");
    SYM(mem_free_v2, "cuMemFree_v2");
    SYM(mem_free, "cuMemFree");
    SYM(mem_release, "cuMemRelease");
    SYM(mem_unmap, "cuMemUnmap");
    SYM(ctx_destroy_v2, "cuCtxDestroy_v2");
    SYM(ctx_destroy, "cuCtxDestroy");
    SYM(primary_retain, "cuDevicePrimaryCtxRetain");
    SYM(primary_release_v2, "cuDevicePrimaryCtxRelease_v2");
    SYM(primary_release, "cuDevicePrimaryCtxRelease");
    SYM(primary_reset_v2, "cuDevicePrimaryCtxReset_v2");
    SYM(primary_reset, "cuDevicePrimaryCtxReset");
    SYM(primary_get_state, "cuDevicePrimaryCtxGetState");
    SYM(get_proc_address, "cuGetProcAddress");
    SYM(get_proc_address_v2, "cuGetProcAddress_v2");
    dlclose(h); /* NOLOAD took a reference; the program holds its own */
    byval_cu_real_t *published = NULL;
    if (__atomic_compare_exchange_n(&real_p, &published, t, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return t;
    free(t); /* another thread published the same table first */
    return published;
}

const byval_cu_real_t *byval_cu_real(void)
{
    const byval_cu_real_t *t = __atomic_load_n(&real_p, __ATOMIC_ACQUIRE);
    return t ? t : cu_real_resolve();
}

const char *byval_cu_err(CUresult r)
{
    static __thread char buf[32];
    const char *name = NULL;
    const byval_cu_real_t *rl = byval_cu_real();
    if (rl && rl->get_error_name && rl->get_error_name(r, &name) == CUDA_SUCCESS && name)
        return name;
    snprintf(buf, sizeof(buf), "CUresult %d", (int)r);
    return buf;
}

CUcontext byval_cu_ctx_push(CUcontext ctx)
{
    CUcontext saved = NULL;
    const byval_cu_real_t *rl = byval_cu_real();
    if (!rl || !rl->ctx_get_current || !rl->ctx_set_current)
        return NULL;
    rl->ctx_get_current(&saved);
    if (ctx && ctx != saved)
        rl->ctx_set_current(ctx);
    return saved;
}

void byval_cu_ctx_pop(CUcontext saved)
{
    const byval_cu_real_t *rl = byval_cu_real();
    CUcontext cur = NULL;
    if (rl && rl->ctx_get_current && rl->ctx_set_current && rl->ctx_get_current(&cur) == 0 &&
        cur != saved)
        rl->ctx_set_current(saved);
}

int byval_cu_attr_u64(const byval_cu_real_t *rl, CUpointer_attribute a, CUdeviceptr p,
                      uint64_t *out)
{
    /* Some attributes are 4 bytes, some 8: read into a zeroed 8-byte slot. */
    uint64_t v = 0;
    if (rl->pointer_get_attribute(&v, a, p) != CUDA_SUCCESS)
        return -1;
    *out = v;
    return 0;
}
