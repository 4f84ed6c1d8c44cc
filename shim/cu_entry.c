/* SPDX-License-Identifier: MIT */
/*
 * cu_entry.c - every route into the CUDA calls of symbols.h: the exported
 * wrappers, and what cuGetProcAddress and the runtime's
 * cudaGetDriverEntryPoint* hand out. libcudart (static or shared: PyTorch,
 * CuPy, every nvcc program) never calls by symbol: it dlsym's
 * cuGetProcAddress_v2 from libcuda (dlsym.c hands out ours) and asks it
 * for every other entry point, so ours answers the table's names with our
 * wrappers, of the version asked for.
 */
#include <dlfcn.h>
#include <string.h>

#include "shim/config.h"
#include "shim/cu.h"
#include "shim/init.h"
#include "shim/symbols.h"
#include "cache/transport.h"

#define CU_EXPORT __attribute__((visibility("default")))
#define ARGS(...) __VA_ARGS__
#define CALL(macro, ...) macro(__VA_ARGS__)

static int active(void)
{
    return byval_init() && byval_cfg.cuda;
}

/* A free ends the exports naming the memory. */
static void freed(CUdeviceptr ptr)
{
    if (active()) {
        byval_cu_export_forget_range(ptr, 1);
        byval_cu_legacy_freed(ptr);
    }
}
#define MEM_FREE(real, ptr) (freed(ptr), real(ptr))

static CUresult mem_release(byval_cu_release_fn real, CUmemGenericAllocationHandle handle)
{
    if (active())
        byval_cu_export_forget_handle(handle);
    return real(handle);
}

static CUresult mem_unmap(byval_cu_unmap_fn real, CUdeviceptr ptr, size_t size)
{
    if (active())
        byval_cu_export_forget_range(ptr, size);
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
