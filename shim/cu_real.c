/* SPDX-License-Identifier: MIT */
/* cu_real.c - the real libcuda entry points, found at run time (ipcbyval
 * never links libcuda: one binary serves machines with and without NVIDIA
 * GPUs), and the small helpers every CUDA file calls them through. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include "shim/cu.h"
#include "shim/symbols.h"

/* The table, published once and complete: NULL until libcuda is there.
 * No lock (one held by a thread while another forks would hang the
 * child's first wrapped call): racing first callers each resolve the same
 * pointers and the first to publish wins. */
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
    SYM(import_shareable, "cuMemImportFromShareableHandle");
    SYM(address_reserve, "cuMemAddressReserve");
    SYM(address_free, "cuMemAddressFree");
    SYM(set_access, "cuMemSetAccess");
    SYM(ctx_get_current, "cuCtxGetCurrent");
    SYM(ctx_set_current, "cuCtxSetCurrent");
    SYM(ctx_get_device, "cuCtxGetDevice");
    SYM(ctx_get_id, "cuCtxGetId");
    SYM(get_error_name, "cuGetErrorName");
    SYM(primary_get_state, "cuDevicePrimaryCtxGetState");
#define INTERPOSED_(name, route, since, field, ...) SYM(field, #name);
    BYVAL_CU_SYMBOLS(INTERPOSED_)
    BYVAL_CU_CTX_SYMBOLS(INTERPOSED_)
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
