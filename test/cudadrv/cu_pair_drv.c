/* SPDX-License-Identifier: MIT */
/*
 * cu_pair: loading the driver with dlopen (RTLD_LOCAL, as libcudart does)
 * and reaching its entry points by --route: symbol (dlsym each), procaddr
 * (dlsym cuGetProcAddress_v2 only) or cudart (ask cuGetProcAddress_v2 for
 * "cuGetProcAddress" and resolve everything through the returned pointer).
 */
#include "cu_pair.h"

#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

struct drv d;
const char *role = "cu_pair";

int fail(const char *call, CUresult rc)
{
    const char *name = NULL, *text = NULL;

    if (d.GetErrorName)
        d.GetErrorName(rc, &name);
    if (d.GetErrorString)
        d.GetErrorString(rc, &text);
    fprintf(stderr, "cu_pair: %s: %s failed: %s (%s)\n", role, call,
            name ? name : "unknown CUresult", text ? text : "?");
    return 1;
}

static int resolve(void *lib, const struct opts *o)
{
    PFN_cuGetProcAddress_v12000 gpa;
    CUdriverProcAddressQueryResult st;
    void *p;
    CUresult rc;

    if (o->route == ROUTE_SYMBOL) {
#define X(field, sym, args)                                                        \
    if (!(*(void **)&d.field = dlsym(lib, sym))) {                                 \
        fprintf(stderr, "cu_pair: %s: dlsym(%s) failed: %s\n", role, sym, dlerror()); \
        return 1;                                                                  \
    }
        DRV_FUNCS(X)
#undef X
        return 0;
    }
    *(void **)&gpa = dlsym(lib, "cuGetProcAddress_v2");
    if (!gpa) {
        fprintf(stderr, "cu_pair: %s: dlsym(cuGetProcAddress_v2) failed: %s\n", role, dlerror());
        return 1;
    }
    if (o->route == ROUTE_CUDART) {
        PFN_cuGetProcAddress_v11030 gpa1 = NULL;
        PFN_cuDriverGetVersion_v2020 version = NULL;
        int v = 0;

        rc = gpa("cuGetProcAddress", (void **)&gpa1, 11030, CU_GET_PROC_ADDRESS_DEFAULT, &st);
        if (rc != CUDA_SUCCESS || !gpa1 ||
            gpa1("cuDriverGetVersion", (void **)&version, 11030, 0) != CUDA_SUCCESS ||
            !version || version(&v) != CUDA_SUCCESS || v <= 0) {
            fprintf(stderr, "cu_pair: %s: cuGetProcAddress(\"cuGetProcAddress\", 11030) "
                    "did not give a working resolver (rc %d)\n", role, (int)rc);
            return 1;
        }
        rc = gpa("cuGetProcAddress", &p, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &st);
        if (rc != CUDA_SUCCESS || !p || st != CU_GET_PROC_ADDRESS_SUCCESS) {
            fprintf(stderr, "cu_pair: %s: cuGetProcAddress(\"cuGetProcAddress\", 12000) "
                    "failed: rc %d status %d\n", role, (int)rc, (int)st);
            return 1;
        }
        *(void **)&gpa = p;
    }
#define X(field, sym, args)                                                        \
    p = NULL;                                                                      \
    rc = gpa("cu" #field, &p, o->version, CU_GET_PROC_ADDRESS_DEFAULT, &st);       \
    if (rc != CUDA_SUCCESS || !p) {                                                \
        fprintf(stderr, "cu_pair: %s: cuGetProcAddress(\"cu%s\", %d) failed: "     \
                "rc %d status %d\n", role, #field, o->version, (int)rc, (int)st);  \
        return 1;                                                                  \
    }                                                                              \
    *(void **)&d.field = p;
    DRV_FUNCS(X)
#undef X
    return 0;
}

int setup(const struct opts *o, int dev_ordinal)
{
    void *lib = dlopen(o->lib, RTLD_NOW | RTLD_LOCAL);
    CUcontext ctx;
    CUdevice dev;

    if (!lib) {
        fprintf(stderr, "cu_pair: %s: dlopen(%s) failed: %s\n", role, o->lib, dlerror());
        return 1;
    }
    if (resolve(lib, o))
        return 1;
    CU(Init, 0);
    CU(DeviceGet, &dev, dev_ordinal);
    CU(DevicePrimaryCtxRetain, &ctx, dev);
    CU(CtxSetCurrent, ctx);
    return 0;
}

CUmemAllocationProp vmm_prop(int dev)
{
    CUmemAllocationProp prop;

    memset(&prop, 0, sizeof(prop));
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    return prop;
}

int vmm_access(CUdeviceptr va, size_t len, int dev)
{
    CUmemAccessDesc acc;

    memset(&acc, 0, sizeof(acc));
    acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    acc.location.id = dev;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CU(MemSetAccess, va, len, &acc, 1);
    return 0;
}
