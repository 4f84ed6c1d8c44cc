/* SPDX-License-Identifier: MIT */
/*
 * bw_ipc: read bandwidth through an IPC mapping, by-value VMM against
 * legacy, plus the peer-access checks mpi_ipc does not make.
 *
 * The child exports on --dev-exp 1 GiB of VMM memory (--chunks chunks,
 * each its own cuMemCreate with POSIX-fd handle type, mapped contiguously)
 * and 1 GiB of cudaMalloc memory, each with its own word pattern, and
 * sends both cudaIpcGetMemHandle handles (VMM: ipcbyval's by-value handle,
 * so run this under ipcbyval) with each buffer's word sum. The parent, on
 * --dev-imp: cudaDeviceEnablePeerAccess(dev-exp) when the GPUs differ (no
 * P2P: exit 3, "no peer access"); cudaIpcOpenMemHandle of both; a kernel
 * checks every word through the mapped pointers (VMM: across all chunks,
 * from the base); cuMemcpyPeer of each whole buffer into a buffer on
 * dev-exp, checked there ("bw_ipc: peer checks ok ..."); then a read
 * kernel (word sum, compared with the exporter's), --runs times, VMM and
 * legacy interleaved, cudaEvent-timed; medians give
 * "bw_ipc: vmm-byvalue X GB/s, legacy Y GB/s, ratio Z" (Z = X / Y) and an
 * info line with a local-memory baseline.
 * Exit 0 when every check passed (the caller judges the ratio), 1 on
 * failure, 2 on bad usage, 3 when the GPUs cannot access each other.
 * Usage: bw_ipc [--dev-exp N] [--dev-imp N] [--mib M] [--chunks C] [--runs R]
 */
#include "gpu_common.cuh"

#include <algorithm>
#include <errno.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

enum { VMM, LEGACY, NBUF };
static const char *buf_names[NBUF] = { "vmm-byvalue", "legacy" };
static const uint32_t buf_seeds[NBUF] = { 0x1234567u, 0x7654321u };

struct opts {
    int dev_exp, dev_imp, chunks, runs;
    size_t bytes;
};

struct msg {
    uint32_t magic, pad;
    cudaIpcMemHandle_t handle[NBUF];
    uint64_t bytes;
    unsigned long long sum[NBUF];
};

#define MSG_MAGIC 0x42574931u

/* Messages are far below PIPE_BUF: one write is atomic, one read gets it. */
static int msg_io(int fd, void *m, size_t n, int writing)
{
    ssize_t r;

    do
        r = writing ? write(fd, m, n) : read(fd, m, n);
    while (r < 0 && errno == EINTR);
    return r == (ssize_t)n ? 0 : -1;
}

/* Word w of a buffer with seed s: differs per word, per MiB and per buffer. */
__host__ __device__ static inline uint32_t bw_word(uint64_t w, uint32_t s)
{
    return (uint32_t)(w * 2654435761u) ^ (s + (uint32_t)(w >> 18) * 40503u);
}

__global__ static void bw_fill(uint4 *p, size_t n16, uint32_t s)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n16;
         i += (size_t)gridDim.x * blockDim.x) {
        uint64_t w = i * 4;
        p[i] = make_uint4(bw_word(w, s), bw_word(w + 1, s), bw_word(w + 2, s), bw_word(w + 3, s));
    }
}

__global__ static void bw_check(const uint4 *p, size_t n16, uint32_t s, unsigned long long *bad,
                                unsigned long long *first)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n16;
         i += (size_t)gridDim.x * blockDim.x) {
        uint4 v = p[i];
        uint64_t w = i * 4;
        if (v.x != bw_word(w, s) || v.y != bw_word(w + 1, s) || v.z != bw_word(w + 2, s) ||
            v.w != bw_word(w + 3, s)) {
            atomicAdd(bad, 1ull);
            atomicMin(first, (unsigned long long)w * 4);
        }
    }
}

/* The timed kernel: every word added into a 64-bit sum (order-independent,
 * so the result is exact and comparable); four 16-byte loads in flight per
 * thread and iteration. */
__global__ static void bw_read(const uint4 *__restrict__ p, size_t n16, unsigned long long *sum)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    unsigned long long acc = 0;

    for (; i + 3 * stride < n16; i += 4 * stride) {
        uint4 a = p[i], b = p[i + stride], c = p[i + 2 * stride], d = p[i + 3 * stride];
        acc += (unsigned long long)a.x + a.y + a.z + a.w;
        acc += (unsigned long long)b.x + b.y + b.z + b.w;
        acc += (unsigned long long)c.x + c.y + c.z + c.w;
        acc += (unsigned long long)d.x + d.y + d.z + d.w;
    }
    for (; i < n16; i += stride) {
        uint4 a = p[i];
        acc += (unsigned long long)a.x + a.y + a.z + a.w;
    }
    for (int o = 16; o > 0; o >>= 1)
        acc += __shfl_down_sync(0xffffffffu, acc, o);
    if ((threadIdx.x & 31) == 0)
        atomicAdd(sum, acc);
}

static unsigned grid_blocks(void)
{
    int dev = 0, sms = 132;

    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    return (unsigned)sms * 4;
}

/* Checks every word of [p, p+bytes) on the current device; 0 when good. */
static int check_words(const void *p, size_t bytes, uint32_t s, const char *what)
{
    unsigned long long *d, h[2] = { 0, ~0ull };

    RT(cudaMalloc((void **)&d, sizeof(h)));
    RT(cudaMemcpy(d, h, sizeof(h), cudaMemcpyHostToDevice));
    bw_check<<<grid_blocks(), 256>>>((const uint4 *)p, bytes / 16, s, &d[0], &d[1]);
    RT(cudaGetLastError());
    RT(cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost));
    RT(cudaFree(d));
    if (h[0]) {
        fprintf(stderr, "bw_ipc: %s: %s: %llu wrong 16-byte groups, first at byte %llu\n",
                gpu_role, what, h[0], h[1]);
        return 1;
    }
    return 0;
}

/* One read of [p, p+bytes) on the current device: its word sum and time. */
static int read_once(const void *p, size_t bytes, unsigned long long *dsum, cudaEvent_t ev[2],
                     unsigned long long *sum, float *ms)
{
    RT(cudaMemset(dsum, 0, sizeof(*dsum)));
    RT(cudaEventRecord(ev[0]));
    bw_read<<<grid_blocks(), 512>>>((const uint4 *)p, bytes / 16, dsum);
    RT(cudaGetLastError());
    RT(cudaEventRecord(ev[1]));
    RT(cudaEventSynchronize(ev[1]));
    RT(cudaEventElapsedTime(ms, ev[0], ev[1]));
    RT(cudaMemcpy(sum, dsum, sizeof(*sum), cudaMemcpyDeviceToHost));
    return 0;
}

static int exporter(const struct opts *o, int wfd, int ackfd)
{
    struct gpu_vmm v;
    struct msg m;
    void *buf[NBUF];
    unsigned long long *dsum;
    cudaEvent_t ev[2];
    float ms;
    char ack;

    gpu_role = "exporter";
    memset(&m, 0, sizeof(m));
    RT(cudaSetDevice(o->dev_exp));
    RT(cudaFree(0));
    if (gpu_drv_load(0))
        return 1;
    /* Chunks of 2 MiB granules (the VMM granularity of H100/H200). */
    if (gpu_vmm_alloc(&v, o->dev_exp, o->chunks, (int)(o->bytes / o->chunks >> 21)))
        return 1;
    if (v.len != o->bytes) {
        fprintf(stderr, "bw_ipc: exporter: %d chunks make %zu bytes, not %zu (granularity?)\n",
                o->chunks, v.len, o->bytes);
        return 1;
    }
    buf[VMM] = (void *)(uintptr_t)v.va;
    RT(cudaMalloc(&buf[LEGACY], o->bytes));
    RT(cudaMalloc((void **)&dsum, sizeof(*dsum)));
    RT(cudaEventCreate(&ev[0]));
    RT(cudaEventCreate(&ev[1]));
    for (int k = 0; k < NBUF; k++) {
        bw_fill<<<grid_blocks(), 256>>>((uint4 *)buf[k], o->bytes / 16, buf_seeds[k]);
        RT(cudaGetLastError());
        RT(cudaDeviceSynchronize());
        if (read_once(buf[k], o->bytes, dsum, ev, &m.sum[k], &ms))
            return 1;
        RT(cudaIpcGetMemHandle(&m.handle[k], buf[k]));
    }
    m.magic = MSG_MAGIC;
    m.bytes = o->bytes;
    if (msg_io(wfd, &m, sizeof(m), 1) < 0)
        return 1;
    /* The importer closes our pipe when it is done with the memory. */
    if (read(ackfd, &ack, 1) < 0)
        ack = 0;
    RT(cudaFree(buf[LEGACY]));
    return gpu_vmm_free(&v);
}

static float median(float *t, int n)
{
    std::sort(t, t + n);
    return n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
}

/* Steps 3 and 4: kernel through the mappings, then cuMemcpyPeer to dev-exp. */
static int peer_checks(const struct opts *o, const struct msg *m, void *p[NBUF])
{
    CUcontext ctx_imp, ctx_exp;
    void *dst;

    for (int k = 0; k < NBUF; k++)
        if (check_words(p[k], m->bytes, buf_seeds[k], "kernel read through the mapping"))
            return 1;
    DRV(cuCtxGetCurrent(&ctx_imp));
    RT(cudaSetDevice(o->dev_exp));
    RT(cudaFree(0));
    DRV(cuCtxGetCurrent(&ctx_exp));
    RT(cudaMalloc(&dst, m->bytes));
    for (int k = 0; k < NBUF; k++) {
        RT(cudaMemset(dst, 0, m->bytes));
        RT(cudaDeviceSynchronize());
        DRV(cuMemcpyPeer((CUdeviceptr)(uintptr_t)dst, ctx_exp, (CUdeviceptr)(uintptr_t)p[k],
                         ctx_imp, m->bytes));
        DRV(cuCtxSynchronize());
        if (check_words(dst, m->bytes, buf_seeds[k], "cuMemcpyPeer copy on the exporter's GPU"))
            return 1;
    }
    RT(cudaFree(dst));
    RT(cudaSetDevice(o->dev_imp));
    printf("bw_ipc: peer checks ok: GPU %d -> GPU %d, %llu MiB each: kernel read through the "
           "mapping (vmm-byvalue, legacy), cuMemcpyPeer into GPU %d, peer access %s\n",
           o->dev_exp, o->dev_imp, (unsigned long long)(m->bytes >> 20), o->dev_exp,
           o->dev_exp == o->dev_imp ? "n/a (same GPU)" : "enabled");
    return 0;
}

/* Step 5: interleaved timed reads; also a local-memory baseline. */
static int bandwidth(const struct opts *o, const struct msg *m, void *p[NBUF])
{
    float t[NBUF + 1][64], ms, med[NBUF + 1];
    unsigned long long *dsum, sum, local_sum;
    cudaEvent_t ev[2];
    void *local;
    int bad = 0;

    RT(cudaMalloc((void **)&dsum, sizeof(*dsum)));
    RT(cudaMalloc(&local, m->bytes));
    bw_fill<<<grid_blocks(), 256>>>((uint4 *)local, m->bytes / 16, 99);
    RT(cudaGetLastError());
    RT(cudaEventCreate(&ev[0]));
    RT(cudaEventCreate(&ev[1]));
    if (read_once(local, m->bytes, dsum, ev, &local_sum, &ms))
        return 1;
    for (int r = -2; r < o->runs; r++) {   /* two warm-up rounds */
        for (int k = 0; k <= NBUF; k++) {
            const void *src = k < NBUF ? p[k] : local;

            if (read_once(src, m->bytes, dsum, ev, &sum, &ms))
                return 1;
            if (sum != (k < NBUF ? m->sum[k] : local_sum) && !bad++)
                fprintf(stderr, "bw_ipc: importer: %s: read kernel sum 0x%llx, expected 0x%llx\n",
                        k < NBUF ? buf_names[k] : "local", sum, k < NBUF ? m->sum[k] : local_sum);
            if (r >= 0)
                t[k][r] = ms;
        }
    }
    RT(cudaFree(local));
    RT(cudaFree(dsum));
    if (bad)
        return 1;
    for (int k = 0; k <= NBUF; k++)
        med[k] = median(t[k], o->runs);
#define GBPS(ms_) ((double)m->bytes / ((double)(ms_) * 1e-3) / 1e9)
    printf("bw_ipc: vmm-byvalue %.1f GB/s, legacy %.1f GB/s, ratio %.3f\n", GBPS(med[VMM]),
           GBPS(med[LEGACY]), GBPS(med[VMM]) / GBPS(med[LEGACY]));
    printf("bw_ipc: GPU %d -> GPU %d, %llu MiB, %d chunks, median of %d reads; local memory of "
           "GPU %d: %.1f GB/s\n", o->dev_exp, o->dev_imp, (unsigned long long)(m->bytes >> 20),
           o->chunks, o->runs, o->dev_imp, GBPS(med[NBUF]));
#undef GBPS
    return 0;
}

/* Steps 1-5; 3 when the GPUs cannot access each other. */
static int import_all(const struct opts *o, int rfd)
{
    struct msg m;
    void *p[NBUF] = { NULL, NULL };
    int can = 1;

    RT(cudaSetDevice(o->dev_imp));
    RT(cudaFree(0));
    if (gpu_drv_load(0))
        return 1;
    if (o->dev_imp != o->dev_exp) {
        RT(cudaDeviceCanAccessPeer(&can, o->dev_imp, o->dev_exp));
        if (!can) {
            printf("bw_ipc: no peer access: GPU %d cannot access GPU %d "
                   "(cudaDeviceCanAccessPeer = 0)\n", o->dev_imp, o->dev_exp);
            return 3;
        }
        cudaError_t e = cudaDeviceEnablePeerAccess(o->dev_exp, 0);
        if (e != cudaErrorPeerAccessAlreadyEnabled)
            RT(e);
        (void)cudaGetLastError();
    }
    if (msg_io(rfd, &m, sizeof(m), 0) < 0 || m.magic != MSG_MAGIC) {
        fprintf(stderr, "bw_ipc: importer: the exporter sent no handles\n");
        return 1;
    }
    for (int k = 0; k < NBUF; k++)
        RT(cudaIpcOpenMemHandle(&p[k], m.handle[k], cudaIpcMemLazyEnablePeerAccess));
    if (peer_checks(o, &m, p) || bandwidth(o, &m, p))
        return 1;
    for (int k = 0; k < NBUF; k++)
        RT(cudaIpcCloseMemHandle(p[k]));
    return 0;
}

static int importer(const struct opts *o, int rfd, int ackfd, pid_t child)
{
    int status = 0, rc;

    gpu_role = "importer";
    rc = import_all(o, rfd);
    close(ackfd);   /* the exporter may free its memory now */
    if (waitpid(child, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "bw_ipc: exporter (pid %d) failed (wait status 0x%x)\n", (int)child,
                status);
        if (rc == 0)
            rc = 1;
    }
    return rc;
}

static int usage(void)
{
    fprintf(stderr, "usage: bw_ipc [--dev-exp N] [--dev-imp N] [--mib M] [--chunks C] "
            "[--runs R]\n");
    return 2;
}

int main(int argc, char **argv)
{
    struct opts o = { 0, 0, 8, 10, (size_t)1 << 30 };
    int to_imp[2], to_exp[2];
    pid_t pid;

    gpu_prog = "bw_ipc";
    if (argc % 2 == 0)
        return usage();
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i];
        int v = atoi(argv[i + 1]);

        if (!strcmp(a, "--dev-exp"))
            o.dev_exp = v;
        else if (!strcmp(a, "--dev-imp"))
            o.dev_imp = v;
        else if (!strcmp(a, "--mib") && v >= 2)
            o.bytes = (size_t)v << 20;
        else if (!strcmp(a, "--chunks") && v >= 1 && v <= GPU_MAX_CHUNKS)
            o.chunks = v;
        else if (!strcmp(a, "--runs") && v >= 1 && v <= 64)
            o.runs = v;
        else
            return usage();
    }
    /* No CUDA call before fork: a CUDA context must not cross fork(). */
    if (pipe(to_imp) < 0 || pipe(to_exp) < 0) {
        perror("bw_ipc: pipe");
        return 1;
    }
    fflush(NULL);
    pid = fork();
    if (pid < 0) {
        perror("bw_ipc: fork");
        return 1;
    }
    if (pid == 0) {
        close(to_imp[0]);
        close(to_exp[1]);
        _exit(exporter(&o, to_imp[1], to_exp[0]));
    }
    close(to_imp[1]);
    close(to_exp[0]);
    return importer(&o, to_imp[0], to_exp[1], pid);
}
