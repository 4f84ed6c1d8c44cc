/* SPDX-License-Identifier: MIT */
/* cu_real.c - the real libcuda entry points, found at run time: ipcbyval
 * never links against libcuda, so one binary serves machines with and
 * without NVIDIA GPUs. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#include "shim/cu.h"
#include "shim/symbols.h"

static byval_cu_real_t real;
static int real_ok;
static pthread_mutex_t real_lock = PTHREAD_MUTEX_INITIALIZER;

#define SYM(field, name) (*(void **)&real.field = byval_real_dlsym(h, name))

const byval_cu_real_t *byval_cu_real(void)
{
    if (__atomic_load_n(&real_ok, __ATOMIC_ACQUIRE))
        return &real;
    pthread_mutex_lock(&real_lock);
    if (!real_ok) {
        /* Only once libcuda is there: our wrappers run because the program
         * reached libcuda, so a no-load open finds it. */
        void *h = dlopen("libcuda.so.1", RTLD_NOLOAD | RTLD_LAZY);
        if (h) {
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
            __atomic_store_n(&real_ok, 1, __ATOMIC_RELEASE);
        }
    }
    pthread_mutex_unlock(&real_lock);
    return real_ok ? &real : NULL;
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
