/* SPDX-License-Identifier: MIT */
/*
 * stress_cu.c - the CUDA backend of the stress workload: legacy memory
 * (cuMemAlloc) or, with STRESS_CU_VMM=1, VMM memory of 1-3 chunks of the
 * allocation granularity (cuMemCreate, POSIX fds allowed). Links libcuda:
 * the driver double (test/cudadrv) or the real driver, the same source.
 * Worker 3 runs on the last device's primary context and resets it as its
 * destroy; the others make contexts with cuCtxCreate. Words are read with
 * cuMemcpyDtoH (a real device's memory is not the host's).
 */
#include "test/stress/stress.h"

#include <cuda.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

static int vmm, ndev;
static CUcontext exp_ctx;
static size_t gran;

struct blk {
    CUdeviceptr p;
    size_t size;
    int chunks;
    CUmemGenericAllocationHandle h[3];
};

static CUmemAllocationProp prop(int dev)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof(p));
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = dev;
    p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    return p;
}

static int init(int importer)
{
    CUdevice d;
    const char *v = getenv("STRESS_CU_VMM");
    vmm = v && !strcmp(v, "1");
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGetCount(&ndev) != CUDA_SUCCESS || ndev < 1 ||
        cuDeviceGet(&d, 0) != CUDA_SUCCESS)
        return -1;
    if (vmm) {
        CUmemAllocationProp p = prop(0);
        if (cuMemGetAllocationGranularity(&gran, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM) !=
            CUDA_SUCCESS)
            return -1;
    }
    return importer || cuDevicePrimaryCtxRetain(&exp_ctx, d) == CUDA_SUCCESS ? 0 : -1;
}

static int fill(struct blk *b, uint64_t serial)
{
    uint64_t *w = malloc(b->size);
    if (!w)
        return -1;
    for (size_t i = 0; i < b->size / 8; i++)
        w[i] = stress_word(serial, i * 8);
    CUresult r = cuMemcpyHtoD(b->p, w, b->size);
    free(w);
    return r == CUDA_SUCCESS ? 0 : -1;
}

static void mfree(void *blk)
{
    struct blk *b = blk;
    cuCtxSetCurrent(exp_ctx);
    if (!vmm) {
        cuMemFree(b->p);
    } else {
        cuMemUnmap(b->p, b->size);
        for (int i = 0; i < b->chunks; i++)
            cuMemRelease(b->h[i]);
        cuMemAddressFree(b->p, b->size);
    }
    free(b);
}

static int alloc(void **blkp, size_t *size, uint64_t serial)
{
    struct blk *b = calloc(1, sizeof(*b));
    if (!b)
        return -1;
    cuCtxSetCurrent(exp_ctx);
    if (!vmm) {
        b->size = *size & ~(size_t)7;
        if (cuMemAlloc(&b->p, b->size) != CUDA_SUCCESS) {
            free(b);
            return -1;
        }
    } else {
        CUmemAllocationProp p = prop(0);
        CUmemAccessDesc a = {.location = p.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
        b->chunks = 1 + (int)(serial % 3);
        b->size = gran * (size_t)b->chunks;
        if (cuMemAddressReserve(&b->p, b->size, 0, 0, 0) != CUDA_SUCCESS) {
            free(b);
            return -1;
        }
        for (int i = 0; i < b->chunks; i++)
            if (cuMemCreate(&b->h[i], gran, &p, 0) != CUDA_SUCCESS ||
                cuMemMap(b->p + gran * (size_t)i, gran, 0, b->h[i], 0) != CUDA_SUCCESS) {
                b->chunks = i; /* a leak of the failed one's pieces: a failing driver */
                mfree(b);
                return -1;
            }
        cuMemSetAccess(b->p, b->size, &a, 1);
    }
    *size = b->size;
    if (fill(b, serial) != 0) {
        mfree(b);
        return -1;
    }
    *blkp = b;
    return 0;
}

static int get(void *blk, struct stress_msg *m, int *fd_p)
{
    CUipcMemHandle h;
    *fd_p = -1;
    cuCtxSetCurrent(exp_ctx);
    if (cuIpcGetMemHandle(&h, ((struct blk *)blk)->p) != CUDA_SUCCESS)
        return -1;
    memcpy(m->handle, h.reserved, STRESS_HANDLE);
    return 0;
}

static int ctx_new(struct stress_ctx *c)
{
    c->device = c->kind == STRESS_CTX_PRIMARY ? ndev - 1 : 0;
    CUdevice d;
    if (cuDeviceGet(&d, c->device) != CUDA_SUCCESS)
        return -1;
    if (c->kind == STRESS_CTX_PRIMARY)
        return cuDevicePrimaryCtxRetain((CUcontext *)&c->h, d) == CUDA_SUCCESS ? 0 : -1;
#if CUDA_VERSION >= 13000
    CUresult r = cuCtxCreate((CUcontext *)&c->h, NULL, 0, d);
#else
    CUresult r = cuCtxCreate((CUcontext *)&c->h, 0, d);
#endif
    return r == CUDA_SUCCESS ? 0 : -1;
}

static void ctx_bind(const struct stress_ctx *c)
{
    cuCtxSetCurrent(c->h);
}

static int ctx_destroy(struct stress_ctx *c)
{
    if (c->kind == STRESS_CTX_PRIMARY)
        return cuDevicePrimaryCtxReset(c->device) == CUDA_SUCCESS ? 0 : -1;
    return cuCtxDestroy(c->h) == CUDA_SUCCESS ? 0 : -1;
}

static int open_ipc(const struct stress_ctx *c, const struct stress_msg *m, int fd, uintptr_t *p)
{
    CUipcMemHandle h;
    CUdeviceptr d = 0;
    (void)c;
    (void)fd;
    memcpy(h.reserved, m->handle, STRESS_HANDLE);
    CUresult r = cuIpcOpenMemHandle(&d, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    *p = (uintptr_t)d;
    return (int)r;
}

static int close_ipc(const struct stress_ctx *c, uintptr_t p)
{
    (void)c;
    return (int)cuIpcCloseMemHandle((CUdeviceptr)p);
}

static int read_word(const struct stress_ctx *c, uintptr_t p, uint64_t *w)
{
    (void)c;
    return cuMemcpyDtoH(w, (CUdeviceptr)p, sizeof(*w)) == CUDA_SUCCESS ? 0 : -1;
}

/* The double's counters (test/cudadrv); the real driver has none. */
static int stats(uint64_t *live, uint64_t *dead_closes)
{
    CUresult (*fn)(uint64_t *, uint64_t *);
    *(void **)&fn = dlsym(RTLD_DEFAULT, "cudadrvIpcStats");
    return fn && fn(live, dead_closes) == CUDA_SUCCESS ? 0 : -1;
}

/* VMM mappings are no context's state: left open, they stay. */
static int keeps(void)
{
    return vmm;
}

static int send_msg(int sock, const struct stress_msg *m, int fd)
{
    (void)fd;
    return send(sock, m, sizeof(*m), MSG_NOSIGNAL) == (ssize_t)sizeof(*m) ? 0 : -1;
}

static int recv_msg(int sock, struct stress_msg *m, int *fd_p)
{
    *fd_p = -1;
    return recv(sock, m, sizeof(*m), 0) == (ssize_t)sizeof(*m) ? 0 : -1;
}

STRESS_BACKEND("cuda");
