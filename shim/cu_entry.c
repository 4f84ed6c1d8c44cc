/* SPDX-License-Identifier: MIT */
/*
 * cu_entry.c - every route into the CUDA calls of symbols.h: the exported
 * wrappers, and what cuGetProcAddress and the runtime's
 * cudaGetDriverEntryPoint* hand out. libcudart (static or shared: PyTorch,
 * CuPy, every nvcc program) never calls by symbol: it dlsym's
 * cuGetProcAddress_v2 from libcuda (dlsym.c hands out ours) and asks it
 * for every other entry point, so ours answers the table's names with our
 * wrappers, of the version asked for. Also the real libcuda entry points,
 * found at run time (ipcbyval never links libcuda: one binary serves
 * machines with and without NVIDIA GPUs), and the context ends.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/config.h"
#include "cache/imports.h"
#include "cache/init.h"
#include "cache/log.h"
#include "cache/transport.h"
#include "shim/cu.h"
#include "shim/symbols.h"

#define CU_EXPORT __attribute__((visibility("default")))
#define ARGS(...) __VA_ARGS__
#define CALL(macro, ...) macro(__VA_ARGS__)

/* ---- the real entry points ---------------------------------------------- */

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
    byval_enter();
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
    byval_leave();
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

static int active(void)
{
    return byval_init() && byval_cfg.cuda;
}

/* ---- context ends ---------------------------------------------------------
 * Our mappings in a context are released before the driver destroys it:
 * cudaDeviceReset() keeps the primary context's handle value and
 * cuCtxDestroy + cuCtxCreate may hand out the same value again, so a
 * cached mapping keyed by the context would be found again after its
 * memory went with the old context. cuCtxDestroy names its context; a
 * primary context's reset names a device (its context is found with
 * GetState and a retain/release pair that cannot destroy it), and its
 * release destroys it only when it drops the last retain: counted here,
 * and checked after the call (inactive now: destroyed, the mappings of it
 * are forgotten, as their memory went with it).
 *
 * What goes with a context: its cuMemAlloc memory, so the legacy exports
 * of it end first (their registry entries withdrawn: importers release
 * their closed mappings and a re-open reaches the driver, which refuses
 * it as natively), then our mappings in it. VMM memory is no context's
 * (an H100 kept a mapping after a reset): its exports live on.
 */

#define MAX_DEVICES 64

/* Retains of each device's primary context seen through our wrappers. */
static int retains[MAX_DEVICES];

/* The primary context of dev while it is active, else NULL. */
static CUcontext primary_of(const byval_cu_real_t *rl, CUdevice dev)
{
    unsigned flags = 0;
    int on = 0;
    CUcontext ctx = NULL;
    if (!rl->primary_get_state || !rl->primary_retain || !rl->primary_release_v2)
        return NULL;
    byval_enter();
    if (rl->primary_get_state(dev, &flags, &on) == CUDA_SUCCESS && on &&
        rl->primary_retain(&ctx, dev) == CUDA_SUCCESS)
        rl->primary_release_v2(dev); /* ours: it was active, so not the last */
    byval_leave();
    return ctx;
}

static void context_dying(CUcontext ctx)
{
    if (!ctx || !active())
        return;
    size_t ended = byval_cu_legacy_ctx_gone(ctx);
    size_t n = byval_imports_purge((uintptr_t)ctx, 0);
    if (ended || n)
        BYVAL_LOG_DEBUG("context %p: ended %zu export%s and released %zu mapping%s of it before "
                        "the driver destroys it",
                        (void *)ctx, ended, ended == 1 ? "" : "s", n, n == 1 ? "" : "s");
}

/* After a release: destroyed (inactive now) though the count did not say
 * so (retains we did not see)? Its mappings are gone with it. */
static void released(const byval_cu_real_t *rl, CUdevice dev, CUcontext ctx, int purged)
{
    unsigned flags = 0;
    int on = 1;
    if (dev >= 0 && dev < MAX_DEVICES) { /* one decrement, never below 0, under races */
        int n = __atomic_load_n(&retains[dev], __ATOMIC_RELAXED);
        while (n > 0 &&
               !__atomic_compare_exchange_n(&retains[dev], &n, n - 1, 1, __ATOMIC_RELAXED,
                                            __ATOMIC_RELAXED))
            ;
    }
    if (purged || !ctx || !rl->primary_get_state)
        return;
    byval_enter();
    int ok = rl->primary_get_state(dev, &flags, &on) == CUDA_SUCCESS;
    byval_leave();
    if (ok && !on) { /* too late to end them first: at least now */
        byval_cu_legacy_ctx_gone(ctx);
        byval_imports_purge((uintptr_t)ctx, 1);
    }
}

static CUresult primary_release(CUresult (*real)(CUdevice), CUdevice dev)
{
    const byval_cu_real_t *rl = byval_cu_real();
    if (!active())
        return real(dev);
    CUcontext ctx = primary_of(rl, dev);
    int last =
        dev >= 0 && dev < MAX_DEVICES && __atomic_load_n(&retains[dev], __ATOMIC_RELAXED) == 1;
    if (ctx && last)
        context_dying(ctx);
    CUresult r = real(dev);
    if (r == CUDA_SUCCESS)
        released(rl, dev, ctx, ctx && last);
    return r;
}

static CUresult primary_reset(CUresult (*real)(CUdevice), CUdevice dev)
{
    if (active()) {
        context_dying(primary_of(byval_cu_real(), dev)); /* NULL: none */
        if (dev >= 0 && dev < MAX_DEVICES)
            __atomic_store_n(&retains[dev], 0, __ATOMIC_RELAXED);
    }
    return real(dev);
}

static CUresult ctx_destroy(CUresult (*real)(CUcontext), CUcontext ctx)
{
    context_dying(ctx);
    return real(ctx);
}

CU_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    const byval_cu_real_t *rl = byval_cu_real();
    if (!rl || !rl->primary_retain)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = rl->primary_retain(pctx, dev);
    if (r == CUDA_SUCCESS && dev >= 0 && dev < MAX_DEVICES)
        __atomic_add_fetch(&retains[dev], 1, __ATOMIC_RELAXED);
    return r;
}

/* The exported entry points: each passes the driver's function of its
 * version to the helper above. */
#define CTX_ENTRY(name, helper, type, slot)                                         \
    CU_EXPORT CUresult name(type arg)                                               \
    {                                                                               \
        const byval_cu_real_t *rl = byval_cu_real();                                \
        return rl && rl->slot ? helper(rl->slot, arg) : CUDA_ERROR_NOT_INITIALIZED; \
    }

CTX_ENTRY(cuDevicePrimaryCtxRelease_v2, primary_release, CUdevice, primary_release_v2)
CTX_ENTRY(cuDevicePrimaryCtxRelease, primary_release, CUdevice, primary_release)
CTX_ENTRY(cuDevicePrimaryCtxReset_v2, primary_reset, CUdevice, primary_reset_v2)
CTX_ENTRY(cuDevicePrimaryCtxReset, primary_reset, CUdevice, primary_reset)
CTX_ENTRY(cuCtxDestroy_v2, ctx_destroy, CUcontext, ctx_destroy_v2)
CTX_ENTRY(cuCtxDestroy, ctx_destroy, CUcontext, ctx_destroy)

/* ---- routes ---------------------------------------------------------------- */

/* A free ends the exports naming the memory. */
static void freed(CUdeviceptr ptr)
{
    if (active()) {
        byval_cu_export_forget(ptr, 1, 0);
        byval_cu_legacy_freed(ptr);
    }
}
#define MEM_FREE(real, ptr) (freed(ptr), real(ptr))

static CUresult mem_release(__typeof__(&cuMemRelease) real, CUmemGenericAllocationHandle handle)
{
    if (active() && handle)
        byval_cu_export_forget(0, 0, handle);
    return real(handle);
}

static CUresult mem_unmap(__typeof__(&cuMemUnmap) real, CUdeviceptr ptr, size_t size)
{
    if (active())
        byval_cu_export_forget(ptr, size, 0);
    return real(ptr, size);
}

/* A chunk mapped (a pool that grows) ends no export; a handle remembered
 * for a pointer is checked against the longer run at its next get. */
static CUresult mem_map(__typeof__(&cuMemMap) real, CUdeviceptr ptr, size_t size, size_t offset,
                        CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    CUresult r = real(ptr, size, offset, handle, flags);
    if (r == CUDA_SUCCESS && active())
        byval_cu_export_mapped();
    return r;
}

/* An application's own VMM export (PyTorch expandable segments, UCX): its
 * peer's pidfd_getfd may be refused; registered, the fd can be served by
 * our broker instead (shim/syscall.c). */
static CUresult export_shareable(__typeof__(&cuMemExportToShareableHandle) real, void *shareable,
                                 CUmemGenericAllocationHandle handle,
                                 CUmemAllocationHandleType type, unsigned long long flags)
{
    CUresult r = real(shareable, handle, type, flags);
    if (r == CUDA_SUCCESS && type == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR && shareable &&
        active())
        byval_export_register_fd(*(int *)shareable);
    return r;
}

/* Our wrappers by the name asked for and the first CUDA version each
 * answers: the first row whose version is not above the one asked wins. */
static const struct {
    const char *name;
    int since;
    void *wrapper;
} routes[] = {
#define ROUTE_(name, route, since, ...) {#route, since, (void *)name},
    BYVAL_CU_SYMBOLS(ROUTE_) BYVAL_CU_CTX_SYMBOLS(ROUTE_)};

/* Replace *pfn, which the driver found, with our wrapper of symbol. */
static void substitute(const char *symbol, int version, void **pfn)
{
    if (!pfn || !*pfn || !symbol || symbol[0] != 'c' || symbol[1] != 'u')
        return;
    for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++)
        if (version >= routes[i].since && strcmp(symbol, routes[i].name) == 0) {
            *pfn = routes[i].wrapper;
            return;
        }
}

/* What the driver or the runtime found for symbol is our wrapper, if any. */
static CUresult routed(CUresult r, const char *symbol, int version, void **pfn)
{
    if (r == CUDA_SUCCESS)
        substitute(symbol, version, pfn);
    return r;
}
#define ROUTED(real, s, pfn, v, ...) routed(real(s, pfn, v, __VA_ARGS__), s, v, pfn)

#define WRAPPER_(name, route, since, field, handler, params, args)       \
    CU_EXPORT CUresult name params                                       \
    {                                                                    \
        const byval_cu_real_t *rl = byval_cu_real();                     \
        if (!rl || !rl->field)                                           \
            return CUDA_ERROR_NOT_INITIALIZED;                           \
        return CALL(handler, ((__typeof__(&name))rl->field), ARGS args); \
    }
BYVAL_CU_SYMBOLS(WRAPPER_)

/* The runtime's getters, for programs linked with the shared libcudart (a
 * static one reaches the driver through cuGetProcAddress anyway). */
static void *cudart_next(void **slot, const char *name)
{
    void *p = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
    if (!p) {
        p = byval_real_dlsym(RTLD_NEXT, name);
        __atomic_store_n(slot, p, __ATOMIC_RELEASE);
    }
    return p;
}

#define CUDART_(name, version, params, args)                                           \
    CU_EXPORT CUresult name params                                                     \
    {                                                                                  \
        static void *next;                                                             \
        __typeof__(&name) real = (__typeof__(&name))cudart_next(&next, #name);         \
        return real ? routed(real args, s, version, pfn) : CUDA_ERROR_NOT_INITIALIZED; \
    }
BYVAL_CUDART_SYMBOLS(CUDART_)
