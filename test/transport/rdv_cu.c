/* SPDX-License-Identifier: MIT */
/* rdv_cu - rdv_pair (rdv_pair.h) on CUDA: --mem legacy (cuMemAlloc) or
 * vmm (cuMemCreate, one chunk), --route symbol|procaddr|cudart (default
 * cudart, as libcudart programs reach the driver), through cu_pair_drv.c
 * (libcuda.so.1 by dlopen: the double under make check, the real driver
 * under make check-gpu). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test/cudadrv/cu_pair.h"
#include "test/devmem/devmem.h" /* the ledger the doubles share */
#include "test/transport/rdv_pair.h"

static struct opts o = {.mem = MEM_VMM, .route = ROUTE_CUDART, .version = 12000,
                        .lib = "libcuda.so.1"};

struct alloc {
    CUdeviceptr p;
    size_t len;
    CUmemGenericAllocationHandle chunk;
};

static int option(int argc, char **argv, int i)
{
    if (i + 1 >= argc)
        return 0;
    const char *v = argv[i + 1];
    if (!strcmp(argv[i], "--mem") && (!strcmp(v, "legacy") || !strcmp(v, "vmm")))
        o.mem = !strcmp(v, "legacy") ? MEM_LEGACY : MEM_VMM;
    else if (!strcmp(argv[i], "--route") && !strcmp(v, "symbol"))
        o.route = ROUTE_SYMBOL;
    else if (!strcmp(argv[i], "--route") && !strcmp(v, "procaddr"))
        o.route = ROUTE_PROCADDR;
    else if (!strcmp(argv[i], "--route") && !strcmp(v, "cudart"))
        o.route = ROUTE_CUDART;
    else
        return 0;
    return 2;
}

static int init(int exporter)
{
    role = exporter ? "exporter" : "importer";
    return setup(&o, 0);
}

static int allocate(size_t size, struct alloc *a)
{
    CUmemAllocationProp prop = vmm_prop(0);
    size_t gran;
    if (o.mem == MEM_LEGACY) {
        a->len = size;
        CU(MemAlloc, &a->p, size);
        return 0;
    }
    CU(MemGetAllocationGranularity, &gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    a->len = (size + gran - 1) / gran * gran;
    CU(MemAddressReserve, &a->p, a->len, 0, 0, 0);
    CU(MemCreate, &a->chunk, a->len, &prop, 0);
    CU(MemMap, a->p, a->len, 0, a->chunk, 0);
    return vmm_access(a->p, a->len, 0);
}

static int export_one(size_t size, uint64_t seed, uint8_t h[RDV_HANDLE], void **alloc_p)
{
    struct alloc *a = calloc(1, sizeof(*a));
    uint8_t *buf = malloc(size);
    CUipcMemHandle ipc;
    if (!a || !buf || allocate(size, a))
        return 1;
    rdv_fill(buf, size, seed);
    CU(MemcpyHtoD, a->p, buf, size);
    free(buf);
    CU(IpcGetMemHandle, &ipc, a->p);
    memcpy(h, ipc.reserved, RDV_HANDLE);
    *alloc_p = a;
    return 0;
}

static int free_one(void *alloc)
{
    struct alloc *a = alloc;
    if (o.mem == MEM_LEGACY) {
        CU(MemFree, a->p);
    } else {
        CU(MemUnmap, a->p, a->len);
        CU(MemRelease, a->chunk);
        CU(MemAddressFree, a->p, a->len);
    }
    free(a);
    return 0;
}

static int import_one(const uint8_t h[RDV_HANDLE], size_t size, uint64_t seed, int *right_p)
{
    CUipcMemHandle ipc;
    CUdeviceptr p;
    uint8_t *buf = malloc(size);
    memcpy(ipc.reserved, h, RDV_HANDLE);
    if (!buf)
        return 1;
    CU(IpcOpenMemHandle, &p, ipc, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    CU(MemcpyDtoH, buf, p, size);
    *right_p = rdv_check(buf, size, seed);
    free(buf);
    CU(IpcCloseMemHandle, p);
    if (rdv_double_close && d.IpcCloseMemHandle(p) == CUDA_SUCCESS) {
        fprintf(stderr, "rdv_cu: importer: a second close succeeded\n");
        *right_p = 0;
    }
    return 0;
}

/* The double's ledger; the real driver has none. */
static int ledger(uint64_t *used_p, uint64_t *freed_held_p)
{
    static CUresult (*stats)(int, struct devmem_stats *);
    if (!stats) {
        void *h = dlopen("libcuda.so.1", RTLD_NOLOAD | RTLD_LAZY);
        if (h)
            stats = (CUresult(*)(int, struct devmem_stats *))dlsym(h, "cudadrvMemStats");
    }
    struct devmem_stats st = {0};
    if (!stats || stats(0, &st) != CUDA_SUCCESS || !st.shared)
        return -1;
    *used_p = st.used;
    *freed_held_p = st.freed_held;
    return 0;
}

static int seq_open(const uint8_t h[RDV_HANDLE], void **map_p)
{
    CUipcMemHandle ipc;
    CUdeviceptr p = 0;
    memcpy(ipc.reserved, h, RDV_HANDLE);
    int rc = (int)d.IpcOpenMemHandle(&p, ipc, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    *map_p = (void *)(uintptr_t)p;
    return rc;
}

static int seq_check(void *map, size_t size, uint64_t seed)
{
    uint8_t *buf = malloc(size);
    int right = buf && d.MemcpyDtoH(buf, (CUdeviceptr)(uintptr_t)map, size) == CUDA_SUCCESS &&
                rdv_check(buf, size, seed);
    free(buf);
    return right;
}

static int seq_close(void *map)
{
    return (int)d.IpcCloseMemHandle((CUdeviceptr)(uintptr_t)map);
}

/* cuDevicePrimaryCtxReset (its code): the primary context's handle value
 * stays (as after cudaDeviceReset), made current again. */
static int seq_ctx_renew(void)
{
    CUdevice dev;
    CUcontext ctx;
    int rc = d.DeviceGet(&dev, 0) == CUDA_SUCCESS ? (int)d.DevicePrimaryCtxReset(dev) : -1;
    if (d.DevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || d.CtxSetCurrent(ctx) != CUDA_SUCCESS)
        fprintf(stderr, "rdv_cu: no primary context after the reset\n");
    return rc;
}

int main(int argc, char **argv)
{
    static const struct rdv_ops ops = {"cuda",     option,    init,       export_one,
                                       free_one,   import_one, ledger,    NULL,
                                       NULL,       NULL,      seq_open,   seq_check,
                                       seq_close,  seq_ctx_renew};
    return rdv_main(argc, argv, &ops);
}
