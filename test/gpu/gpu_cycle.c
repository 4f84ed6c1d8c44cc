/* SPDX-License-Identifier: MIT */
/*
 * gpu_cycle: the cached re-open as a real program sees it: two exec'd
 * processes (not a fork: nothing inherited), linked with the static CUDA
 * runtime as nvcc links by default, one exporting, one opening and
 * closing the handle in batches (make bench-gpu pins the importer to each
 * vCPU in turn).
 *
 *   gpu_cycle export --mem legacy|vmm [--api rt|drv]
 *       allocates 2 MiB (cudaMalloc/cuMemAlloc, or cuMemCreate + map),
 *       prints "handle <128 hex digits>", then waits for EOF on stdin.
 *   gpu_cycle import --handle HEX [--api rt|drv] [--batch N] [--batches B]
 *       one checked open+close first, then B batches of N open+close
 *       cycles, each batch timed as a whole (no clock read per call);
 *       prints "cycle_us MIN MEDIAN MAX" over the batches' means.
 *
 * --api rt: cudaIpcGetMemHandle / cudaIpcOpenMemHandle / cudaIpcCloseMemHandle
 * (the runtime, which reaches the driver through cuGetProcAddress);
 * --api drv: the cuIpc* symbols of libcuda. Only --api drv works on the
 * CUDA double of make check (the runtime's start-up asks for more of the
 * driver than the double has): make bench-gpu's logic is tested there.
 * Exit 0, or 1 with a line naming the failing call.
 */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define GPU_PROG "gpu_cycle"
#include "gpu_c.h"

static int rt; /* --api rt */

#define RT(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "gpu_cycle: %s: %s\n", #call, cudaGetErrorName(e_));                   \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* A current context on device 0: the runtime's primary one, or the
 * driver's. */
static int init(void)
{
    CUcontext ctx;
    CUdevice dev;
    if (rt) {
        RT(cudaSetDevice(0));
        RT(cudaFree(0));
        return 0;
    }
    CU(cuInit(0));
    CU(cuDeviceGet(&dev, 0));
    CU(cuDevicePrimaryCtxRetain(&ctx, dev));
    CU(cuCtxSetCurrent(ctx));
    return 0;
}

static int export_vmm(CUdeviceptr *p)
{
    CUmemAllocationProp prop;
    CUmemAccessDesc acc;
    CUmemGenericAllocationHandle h;
    size_t size = 2u << 20, gran;
    memset(&prop, 0, sizeof(prop));
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    CU(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    size = (size + gran - 1) / gran * gran;
    CU(cuMemAddressReserve(p, size, 0, 0, 0));
    CU(cuMemCreate(&h, size, &prop, 0));
    CU(cuMemMap(*p, size, 0, h, 0));
    memset(&acc, 0, sizeof(acc));
    acc.location = prop.location;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CU(cuMemSetAccess(*p, size, &acc, 1));
    return 0;
}

static int do_export(const char *mem)
{
    unsigned char h[64];
    CUdeviceptr p = 0;
    void *vp = NULL;
    char c;
    if (init())
        return 1;
    if (!strcmp(mem, "vmm")) {
        if (export_vmm(&p))
            return 1;
    } else if (rt) {
        RT(cudaMalloc(&vp, 2u << 20));
        p = (CUdeviceptr)(uintptr_t)vp;
    } else {
        CU(cuMemAlloc(&p, 2u << 20));
    }
    if (rt)
        RT(cudaIpcGetMemHandle((cudaIpcMemHandle_t *)h, (void *)(uintptr_t)p));
    else
        CU(cuIpcGetMemHandle((CUipcMemHandle *)h, p));
    printf("handle ");
    for (int i = 0; i < 64; i++)
        printf("%02x", h[i]);
    printf("\n");
    fflush(stdout);
    while (read(0, &c, 1) > 0)
        ;
    return 0;
}

static int cycle(const unsigned char *h)
{
    if (rt) {
        void *p = NULL;
        cudaIpcMemHandle_t rh;
        memcpy(&rh, h, sizeof(rh));
        RT(cudaIpcOpenMemHandle(&p, rh, cudaIpcMemLazyEnablePeerAccess));
        RT(cudaIpcCloseMemHandle(p));
        return 0;
    }
    CUipcMemHandle ch;
    CUdeviceptr p;
    memcpy(&ch, h, sizeof(ch));
    CU(cuIpcOpenMemHandle(&p, ch, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    CU(cuIpcCloseMemHandle(p));
    return 0;
}

static int do_import(const char *hex, int batch, int batches)
{
    unsigned char h[64];
    double *per = calloc((size_t)batches, sizeof(double));
    if (!per || strlen(hex) != 128)
        return fprintf(stderr, "gpu_cycle: --handle wants 128 hex digits\n"), 1;
    for (int i = 0; i < 64; i++)
        if (sscanf(hex + 2 * i, "%2hhx", &h[i]) != 1)
            return fprintf(stderr, "gpu_cycle: bad --handle\n"), 1;
    if (init() || cycle(h))
        return 1;
    for (int b = 0; b < batches; b++) {
        double t0 = now_us();
        for (int i = 0; i < batch; i++)
            if (cycle(h))
                return 1;
        per[b] = (now_us() - t0) / batch;
    }
    qsort(per, (size_t)batches, sizeof(*per), cmp_double);
    printf("cycle_us %.4f %.4f %.4f\n", per[0], per[batches / 2], per[batches - 1]);
    free(per);
    return 0;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "", *mem = "legacy", *hex = "";
    int batch = 10000, batches = 5;
    for (int i = 2; i + 1 < argc; i += 2) {
        const char *a = argv[i], *v = argv[i + 1];
        if (!strcmp(a, "--mem"))
            mem = v;
        else if (!strcmp(a, "--api"))
            rt = !strcmp(v, "rt");
        else if (!strcmp(a, "--handle"))
            hex = v;
        else if (!strcmp(a, "--batch"))
            batch = atoi(v);
        else if (!strcmp(a, "--batches"))
            batches = atoi(v);
    }
    if (!strcmp(mode, "export") && (!strcmp(mem, "legacy") || !strcmp(mem, "vmm")))
        return do_export(mem);
    if (!strcmp(mode, "import") && batch > 0 && batches > 0)
        return do_import(hex, batch, batches);
    fprintf(stderr, "usage: gpu_cycle export --mem legacy|vmm [--api rt|drv]\n"
                    "       gpu_cycle import --handle HEX [--api rt|drv] [--batch N] "
                    "[--batches B]\n");
    return 2;
}
