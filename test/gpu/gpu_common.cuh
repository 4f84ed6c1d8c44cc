/* SPDX-License-Identifier: MIT */
/*
 * Shared pieces of the GPU-machine test programs (rt_vmm_ipc, mpi_ipc,
 * bench_ipc): error checks, the byte pattern with its fill/verify kernels,
 * driver entry points for VMM allocation, and a VMM buffer of one or more
 * chunks mapped contiguously.
 *
 * Driver entry points come either from linking -lcuda (--drv link, what
 * most C programs do) or from cudaGetDriverEntryPointByVersion (--drv
 * entry, what PyTorch and other runtime users do); both reach ipcbyval's
 * interception, through different routes.
 */
#ifndef GPU_COMMON_CUH
#define GPU_COMMON_CUH

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static const char *gpu_prog = "gpu";
static const char *gpu_role = "main";

/* name, version of the PFN typedef in cudaTypedefs.h */
#define GPU_DRV_FUNCS(X)                         \
    X(GetErrorName, 6000)                        \
    X(MemGetAllocationGranularity, 10020)        \
    X(MemCreate, 10020)                          \
    X(MemRelease, 10020)                         \
    X(MemAddressReserve, 10020)                  \
    X(MemAddressFree, 10020)                     \
    X(MemMap, 10020)                             \
    X(MemUnmap, 10020)                           \
    X(MemSetAccess, 10020)                       \
    X(MemGetAddressRange, 3020)                  \
    X(MemExportToShareableHandle, 10020)         \
    X(MemRetainAllocationHandle, 11000)          \
    X(IpcGetMemHandle, 4010)                     \
    X(IpcOpenMemHandle, 11000)                   \
    X(IpcCloseMemHandle, 4010)                   \
    X(PointerGetAttribute, 4000)                 \
    X(CtxGetCurrent, 4000)

struct gpu_drv {
#define X(name, ver) PFN_cu##name##_v##ver name;
    GPU_DRV_FUNCS(X)
#undef X
};

static struct gpu_drv drv;

#define RT(call)                                                                    \
    do {                                                                            \
        cudaError_t e_ = (call);                                                    \
        if (e_ != cudaSuccess) {                                                    \
            fprintf(stderr, "%s: %s: %s failed: %s (%s)\n", gpu_prog, gpu_role, #call, \
                    cudaGetErrorName(e_), cudaGetErrorString(e_));                  \
            return 1;                                                               \
        }                                                                           \
    } while (0)

static inline const char *gpu_cu_name(CUresult rc)
{
    const char *s = NULL;

    if (drv.GetErrorName)
        drv.GetErrorName(rc, &s);
    return s ? s : "unknown CUresult";
}

#define DRV(call)                                                                   \
    do {                                                                            \
        CUresult r_ = (call);                                                       \
        if (r_ != CUDA_SUCCESS) {                                                   \
            fprintf(stderr, "%s: %s: %s failed: %s\n", gpu_prog, gpu_role, #call,    \
                    gpu_cu_name(r_));                                               \
            return 1;                                                               \
        }                                                                           \
    } while (0)

/* Loads the driver table; call after the runtime made a context current. */
static inline int gpu_drv_load(int entry_points)
{
    cudaDriverEntryPointQueryResult st;

    if (!entry_points) {
#define X(name, ver) drv.name = cu##name;
        GPU_DRV_FUNCS(X)
#undef X
        return 0;
    }
#define X(name, ver)                                                                \
    RT(cudaGetDriverEntryPointByVersion("cu" #name, (void **)&drv.name, CUDART_VERSION, \
                                        cudaEnableDefault, &st));                   \
    if (!drv.name || st != cudaDriverEntryPointSuccess) {                           \
        fprintf(stderr, "%s: %s: no driver entry point cu%s\n", gpu_prog, gpu_role, #name); \
        return 1;                                                                   \
    }
    GPU_DRV_FUNCS(X)
#undef X
    return 0;
}

/* Chunk-dependent so that a wrong chunk is caught; seed per owner. */
__host__ __device__ static inline uint8_t gpu_pattern(uint64_t i, uint32_t seed)
{
    return (uint8_t)(((i * 2654435761u) >> 11) + (i >> 21) * 37u + seed * 101u);
}

__global__ static void gpu_fill(uint8_t *p, size_t n, uint64_t off, uint32_t seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        p[i] = gpu_pattern(off + i, seed);
}

/* Counts mismatches and records the lowest mismatching index. */
__global__ static void gpu_verify(const uint8_t *p, size_t n, uint64_t off, uint32_t seed,
                                  unsigned long long *bad, unsigned long long *first)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        if (p[i] != gpu_pattern(off + i, seed)) {
            atomicAdd(bad, 1ull);
            atomicMin(first, (unsigned long long)i);
        }
    }
}

/* Fills [p, p+n) on the current device with the pattern from offset off. */
static inline int gpu_fill_range(void *p, size_t n, uint64_t off, uint32_t seed)
{
    gpu_fill<<<256, 256>>>((uint8_t *)p, n, off, seed);
    RT(cudaGetLastError());
    RT(cudaDeviceSynchronize());
    return 0;
}

/* Checks [p, p+n) by a kernel and by cudaMemcpy to the host; 0 when good. */
static inline int gpu_check_range(const void *p, size_t n, uint64_t off, uint32_t seed, const char *what)
{
    unsigned long long *counters, host[2] = { 0, ~0ull };
    uint8_t *buf;

    RT(cudaMalloc((void **)&counters, sizeof(host)));
    RT(cudaMemcpy(counters, host, sizeof(host), cudaMemcpyHostToDevice));
    gpu_verify<<<256, 256>>>((const uint8_t *)p, n, off, seed, &counters[0], &counters[1]);
    RT(cudaGetLastError());
    RT(cudaMemcpy(host, counters, sizeof(host), cudaMemcpyDeviceToHost));
    RT(cudaFree(counters));
    if (host[0] != 0) {
        fprintf(stderr, "%s: %s: %s: kernel found %llu wrong bytes, first at %llu\n", gpu_prog,
                gpu_role, what, host[0], host[1]);
        return 1;
    }
    buf = (uint8_t *)malloc(n);
    if (!buf)
        return 1;
    RT(cudaMemcpy(buf, p, n, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++) {
        if (buf[i] != gpu_pattern(off + i, seed)) {
            fprintf(stderr, "%s: %s: %s: cudaMemcpy byte %zu is 0x%02x, expected 0x%02x\n",
                    gpu_prog, gpu_role, what, i, buf[i], gpu_pattern(off + i, seed));
            free(buf);
            return 1;
        }
    }
    free(buf);
    return 0;
}

#define GPU_MAX_CHUNKS 16

struct gpu_vmm {
    CUdeviceptr va;
    size_t len, chunk;
    int nchunks;
    CUmemGenericAllocationHandle h[GPU_MAX_CHUNKS];
};

/* nchunks chunks of `granules` granularity units each, POSIX-fd exportable
 * (like PyTorch's expandable segments), mapped contiguously, read-write
 * for device dev. */
static inline int gpu_vmm_alloc(struct gpu_vmm *v, int dev, int nchunks, int granules)
{
    CUmemAllocationProp prop;
    CUmemAccessDesc acc;
    size_t gran;

    memset(v, 0, sizeof(*v));
    memset(&prop, 0, sizeof(prop));
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    if (nchunks < 1 || nchunks > GPU_MAX_CHUNKS)
        return 1;
    DRV(drv.MemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    v->chunk = gran * (size_t)granules;
    v->nchunks = nchunks;
    v->len = v->chunk * (size_t)nchunks;
    DRV(drv.MemAddressReserve(&v->va, v->len, 0, 0, 0));
    for (int i = 0; i < nchunks; i++) {
        DRV(drv.MemCreate(&v->h[i], v->chunk, &prop, 0));
        DRV(drv.MemMap(v->va + (size_t)i * v->chunk, v->chunk, 0, v->h[i], 0));
    }
    memset(&acc, 0, sizeof(acc));
    acc.location = prop.location;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    DRV(drv.MemSetAccess(v->va, v->len, &acc, 1));
    return 0;
}

static inline int gpu_vmm_free(struct gpu_vmm *v)
{
    DRV(drv.MemUnmap(v->va, v->len));
    for (int i = 0; i < v->nchunks; i++)
        DRV(drv.MemRelease(v->h[i]));
    DRV(drv.MemAddressFree(v->va, v->len));
    return 0;
}

#endif
