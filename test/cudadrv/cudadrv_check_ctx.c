/* SPDX-License-Identifier: MIT */
/* cudadrv_check_ctx.c - the double's context lifetimes as measured on
 * driver 580: created contexts and their handle values, primary contexts'
 * reset and release (cudadrv_check.h). */
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "test/cudadrv/cudadrv_check.h"

struct current_arg {
    CUcontext ctx;
    int ready, go;
    CUresult rc;
};

/* Makes arg->ctx current, waits until the main thread destroyed it. */
static void *hold_current(void *p)
{
    struct current_arg *a = p;

    cuCtxSetCurrent(a->ctx);
    __atomic_store_n(&a->ready, 1, __ATOMIC_RELEASE);
    while (!__atomic_load_n(&a->go, __ATOMIC_ACQUIRE))
        usleep(1000);
    a->rc = cuCtxSynchronize();
    return NULL;
}

/* cuCtxCreate reuses the most recently destroyed handle value; destroying
 * a context frees its cuMemAlloc memory (stale pointers fail), pops it
 * from this thread and leaves it destroyed in others. Runs with the
 * primary context of device 0 current. */
void check_contexts(CUcontext primary)
{
    CUcontext a, b, c, e, f, cur;
    CUdeviceptr x, base;
    struct current_arg arg = { 0 };
    pthread_t th;
    size_t size;
    char byte = 0;

    CHECK(cuCtxCreate(&a, NULL, 0, 0) == CUDA_SUCCESS && cuCtxDestroy(a) == CUDA_SUCCESS);
    CHECK(cuCtxCreate(&b, NULL, 0, 0) == CUDA_SUCCESS && b == a);
    CHECK(cuCtxCreate(&c, NULL, 0, 1) == CUDA_SUCCESS && c != b);
    CHECK(cuCtxDestroy(b) == CUDA_SUCCESS && cuCtxDestroy(c) == CUDA_SUCCESS);
    CHECK(cuCtxCreate(&e, NULL, 0, 0) == CUDA_SUCCESS && e == c);
    CHECK(cuCtxCreate(&f, NULL, 0, 0) == CUDA_SUCCESS && f == b);
    CHECK(cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == f);
    CHECK(cuMemAlloc(&x, 8192) == CUDA_SUCCESS && cuMemsetD8(x, 'x', 8192) == CUDA_SUCCESS);
    CHECK(cuCtxDestroy(f) == CUDA_SUCCESS);
    CHECK(cuCtxDestroy(f) == CUDA_ERROR_INVALID_CONTEXT);
    CHECK(cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == e);
    CHECK(cuMemGetAddressRange(&base, &size, x) == CUDA_ERROR_NOT_FOUND);
    CHECK(cuMemFree(x) == CUDA_ERROR_INVALID_VALUE);
    CHECK(cuMemcpyDtoH(&byte, x, 1) == CUDA_ERROR_ILLEGAL_ADDRESS);
    CHECK(cuMemcpy((CUdeviceptr)(uintptr_t)&byte, x + 100, 1) == CUDA_ERROR_ILLEGAL_ADDRESS);
    /* A context current to another thread, destroyed here. */
    arg.ctx = e;
    CHECK(pthread_create(&th, NULL, hold_current, &arg) == 0);
    while (!__atomic_load_n(&arg.ready, __ATOMIC_ACQUIRE))
        usleep(1000);
    CHECK(cuCtxDestroy(e) == CUDA_SUCCESS);
    __atomic_store_n(&arg.go, 1, __ATOMIC_RELEASE);
    pthread_join(th, NULL);
    CHECK(arg.rc == CUDA_ERROR_CONTEXT_IS_DESTROYED);
    CHECK(cuCtxSetCurrent(e) == CUDA_ERROR_INVALID_CONTEXT);
    CHECK(cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == primary);
    CHECK(cuCtxDestroy(primary) == CUDA_ERROR_INVALID_CONTEXT);
}

/* Primary context of device 1: reset destroys its state but keeps the
 * handle and the retain count; the last release destroys it too; VMM
 * memory survives both (measured on driver 580). */
void check_primary_lifetime(CUcontext primary0)
{
    CUmemAllocationProp prop;
    CUmemAccessDesc acc;
    CUmemGenericAllocationHandle h;
    CUcontext p, q, cur;
    CUdeviceptr x, va, base;
    size_t chunk = 2 * MiB, size, fr, tot;
    unsigned long long id = 0;
    CUdevice d = -1;
    unsigned flags;
    int active = -1;
    char c = 0;

    memset(&prop, 0, sizeof(prop));
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 1;
    acc.location = prop.location;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CHECK(cuDevicePrimaryCtxGetState(1, &flags, &active) == CUDA_SUCCESS && active == 0);
    CHECK(cuDevicePrimaryCtxRetain(&p, 1) == CUDA_SUCCESS && cuCtxSetCurrent(p) == 0);
    CHECK(cuDevicePrimaryCtxGetState(1, &flags, &active) == CUDA_SUCCESS && active == 1);
    CHECK(cuMemAlloc(&x, 4096) == CUDA_SUCCESS);
    CHECK(cuMemCreate(&h, chunk, &prop, 0) == CUDA_SUCCESS);
    CHECK(cuMemAddressReserve(&va, chunk, 0, 0, 0) == CUDA_SUCCESS);
    CHECK(cuMemMap(va, chunk, 0, h, 0) == CUDA_SUCCESS);
    CHECK(cuMemSetAccess(va, chunk, &acc, 1) == CUDA_SUCCESS);
    CHECK(cuMemcpyHtoD(va, "V", 1) == CUDA_SUCCESS);
    /* Reset: inactive, still current, the same handle on the next retain. */
    CHECK(cuDevicePrimaryCtxReset(1) == CUDA_SUCCESS);
    CHECK(cuDevicePrimaryCtxGetState(1, &flags, &active) == CUDA_SUCCESS && active == 0);
    CHECK(cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == p);
    CHECK(cuMemAlloc(&base, 4096) == CUDA_ERROR_CONTEXT_IS_DESTROYED);
    CHECK(cuMemGetInfo(&fr, &tot) == CUDA_ERROR_CONTEXT_IS_DESTROYED);
    /* As measured on an H100: the device is still told, the id is not. */
    CHECK(cuCtxGetDevice(&d) == CUDA_SUCCESS && d == 1);
    CHECK(cuCtxGetId(NULL, &id) == CUDA_ERROR_CONTEXT_IS_DESTROYED);
    CHECK(cuCtxSynchronize() == CUDA_ERROR_CONTEXT_IS_DESTROYED);
    CHECK(cuDevicePrimaryCtxRetain(&q, 1) == CUDA_SUCCESS && q == p);
    CHECK(cuCtxGetId(p, &id) == CUDA_SUCCESS);
    CHECK(cuMemGetAddressRange(&base, &size, x) == CUDA_ERROR_NOT_FOUND);
    CHECK(cuMemFree(x) == CUDA_ERROR_INVALID_VALUE);
    CHECK(cuMemcpyDtoH(&c, va, 1) == CUDA_SUCCESS && c == 'V');
    /* Two retains, two releases: the reset released nothing. */
    CHECK(cuDevicePrimaryCtxRelease(1) == CUDA_SUCCESS);
    CHECK(cuDevicePrimaryCtxGetState(1, &flags, &active) == CUDA_SUCCESS && active == 1);
    CHECK(cuMemAlloc(&x, 4096) == CUDA_SUCCESS);
    CHECK(cuDevicePrimaryCtxRelease(1) == CUDA_SUCCESS);
    CHECK(cuDevicePrimaryCtxGetState(1, &flags, &active) == CUDA_SUCCESS && active == 0);
    CHECK(cuDevicePrimaryCtxRelease(1) == CUDA_ERROR_INVALID_CONTEXT);
    CHECK(cuMemAlloc(&base, 4096) == CUDA_ERROR_CONTEXT_IS_DESTROYED);
    CHECK(cuDevicePrimaryCtxRetain(&q, 1) == CUDA_SUCCESS && q == p);
    CHECK(cuMemGetAddressRange(&base, &size, x) == CUDA_ERROR_NOT_FOUND);
    CHECK(cuMemcpyDtoH(&c, va, 1) == CUDA_SUCCESS && c == 'V');
    CHECK(cuMemUnmap(va, chunk) == CUDA_SUCCESS && cuMemAddressFree(va, chunk) == CUDA_SUCCESS);
    CHECK(cuMemRelease(h) == CUDA_SUCCESS);
    CHECK(cuDevicePrimaryCtxRelease_v2(1) == CUDA_SUCCESS);
    CHECK(cuCtxSetCurrent(primary0) == CUDA_SUCCESS);
}
