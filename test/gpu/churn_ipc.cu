/* SPDX-License-Identifier: MIT */
/*
 * churn_ipc: memory lifetimes an IPC cache must not change, on a real GPU.
 * Knows nothing about ipcbyval: run it natively and under ipcbyval and
 * compare. An exporter (parent) and an importer (forked child, idle
 * between rounds) exchange handles over a socketpair.
 *
 *   --case churn  (--mem legacy|vmm, --rounds N, --mib M): each round the
 *                 exporter allocates M MiB, fills it, sends the handle; the
 *                 importer opens, checks, closes, acks; the exporter frees.
 *                 Natively every round passes at constant free memory; a
 *                 cache that keeps closed mappings of freed memory runs the
 *                 GPU out of memory. After the last free the importer stays
 *                 idle and the exporter times how long until the memory is
 *                 back ("release_ms"). Prints the most memory held by the
 *                 importer after a free ("held_mib_max").
 *   --case double-close: open, close, close again (the driver answers
 *                 cudaErrorInvalidValue), then open again and check data.
 *   --case reset: open, check, close, cudaDeviceReset(), open again (the
 *                 primary context has the same handle value) and check.
 * Prints "OK churn_ipc ..." and exits 0, or "FAILED churn_ipc: ...".
 */
#include "gpu_common.cuh"

#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct msg {
    uint32_t round, seed;
    cudaIpcMemHandle_t handle;
    uint64_t size;
};

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static double free_mib(void)
{
    size_t f = 0, t = 0;
    cudaMemGetInfo(&f, &t);
    return f / 1048576.0;
}

static int xfer(int s, void *p, size_t n, int out)
{
    char *c = (char *)p;
    while (n) {
        ssize_t k = out ? write(s, c, n) : read(s, c, n);
        if (k <= 0)
            return 1;
        c += k;
        n -= (size_t)k;
    }
    return 0;
}

/* Every byte checked by a kernel (a host copy of 1 GiB per round would
 * make the 120 rounds take minutes). */
static int check_kernel(const void *p, size_t n, uint32_t seed)
{
    unsigned long long *counters, host[2] = {0, ~0ull};
    RT(cudaMalloc((void **)&counters, sizeof(host)));
    RT(cudaMemcpy(counters, host, sizeof(host), cudaMemcpyHostToDevice));
    gpu_verify<<<1024, 256>>>((const uint8_t *)p, n, 0, seed, &counters[0], &counters[1]);
    RT(cudaGetLastError());
    RT(cudaMemcpy(host, counters, sizeof(host), cudaMemcpyDeviceToHost));
    RT(cudaFree(counters));
    if (host[0]) {
        fprintf(stderr, "churn_ipc: importer: %llu wrong bytes, first at %llu\n", host[0], host[1]);
        return 1;
    }
    return 0;
}

static int import_one(const struct msg *m, int close_twice, int *double_rc)
{
    void *p = NULL;
    RT(cudaIpcOpenMemHandle(&p, m->handle, cudaIpcMemLazyEnablePeerAccess));
    if (check_kernel(p, m->size, m->seed))
        return 1;
    RT(cudaIpcCloseMemHandle(p));
    if (close_twice) {
        *double_rc = (int)cudaIpcCloseMemHandle(p);
        cudaGetLastError(); /* not sticky: clear it */
    }
    return 0;
}

static int importer(int s, const char *kase)
{
    gpu_role = "importer";
    RT(cudaSetDevice(0));
    RT(cudaFree(0));
    char ready = 'r'; /* our context exists: the exporter's baseline counts it */
    if (write(s, &ready, 1) != 1)
        return 1;
    struct msg m;
    while (xfer(s, &m, sizeof(m), 0) == 0) {
        int rc = 0, dbl = 0;
        if (!strcmp(kase, "double-close")) {
            rc = import_one(&m, 1, &dbl);
            printf("churn_ipc: second close: %s\n", cudaGetErrorName((cudaError_t)dbl));
            if (!rc && dbl != cudaErrorInvalidValue) {
                fprintf(stderr, "churn_ipc: second close returned %d, not cudaErrorInvalidValue\n", dbl);
                rc = 1;
            }
            rc = rc || import_one(&m, 0, &dbl); /* the next open works */
        } else if (!strcmp(kase, "reset")) {
            rc = import_one(&m, 0, &dbl);
            RT(cudaDeviceReset());
            RT(cudaSetDevice(0));
            RT(cudaFree(0));
            rc = rc || import_one(&m, 0, &dbl); /* same context value, new context */
        } else {
            rc = import_one(&m, 0, &dbl);
        }
        if (xfer(s, &rc, sizeof(rc), 1) || rc)
            return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *kase = "churn", *mem = "legacy";
    int rounds = 120, mib = 1024;
    gpu_prog = "churn_ipc";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--case"))
            kase = argv[i + 1];
        else if (!strcmp(argv[i], "--mem"))
            mem = argv[i + 1];
        else if (!strcmp(argv[i], "--rounds"))
            rounds = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--mib"))
            mib = atoi(argv[i + 1]);
    }
    if (strcmp(kase, "churn"))
        rounds = 2;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
        return 2;
    pid_t child = fork(); /* before any CUDA call */
    if (child == 0) {
        close(sv[0]);
        int rc = importer(sv[1], kase);
        fflush(stdout); /* _exit flushes nothing */
        _exit(rc);
    }
    close(sv[1]);
    int s = sv[0], vmm = !strcmp(mem, "vmm"), failed = 0, done = 0;
    gpu_role = "exporter";
    RT(cudaSetDevice(0));
    RT(cudaFree(0));
    if (gpu_drv_load(0))
        return 1;
    char ready;
    if (xfer(s, &ready, 1, 0)) /* the importer's context, before the baseline */
        return 1;
    double base = free_mib(), held_max = 0;
    size_t size = (size_t)mib << 20;
    for (int r = 0; r < rounds && !failed; r++) {
        double before = free_mib();
        if (base - before > held_max)
            held_max = base - before;
        struct msg m;
        memset(&m, 0, sizeof(m));
        m.round = (uint32_t)r;
        m.seed = 1000u + (uint32_t)r;
        m.size = size;
        void *p = NULL;
        struct gpu_vmm v;
        if (vmm) {
            int gran = (int)(size / (2u << 20));
            if (gpu_vmm_alloc(&v, 0, 1, gran ? gran : 1)) {
                printf("churn_ipc: round %d: allocation failed (free %.0f MiB)\n", r, free_mib());
                failed = 1;
                break;
            }
            p = (void *)v.va;
        } else if (cudaMalloc(&p, size) != cudaSuccess) {
            printf("churn_ipc: round %d: cudaMalloc failed (free %.0f MiB)\n", r, free_mib());
            failed = 1;
            break;
        }
        if (gpu_fill_range(p, size, 0, m.seed) ||
            cudaIpcGetMemHandle(&m.handle, p) != cudaSuccess) {
            printf("churn_ipc: round %d: cudaIpcGetMemHandle failed: %s\n", r,
                   cudaGetErrorName(cudaGetLastError()));
            failed = 1;
        }
        if (!r && !vmm) { /* driver 580's legacy handle: the exporter's pid at bytes 8-11 */
            uint32_t pid;
            memcpy(&pid, m.handle.reserved + 8, 4);
            printf("churn_ipc: legacy handle bytes 8-11 = %u, getpid() = %d\n", pid, (int)getpid());
        }
        int rc = 1;
        if (!failed && (xfer(s, &m, sizeof(m), 1) || xfer(s, &rc, sizeof(rc), 0) || rc)) {
            printf("churn_ipc: round %d: the importer failed\n", r);
            failed = 1;
        }
        double t_free = now_ms();
        if (vmm)
            gpu_vmm_free(&v);
        else
            cudaFree(p);
        if (!failed)
            done++;
        if (r == rounds - 1 && !strcmp(kase, "churn")) {
            /* The importer is idle: how long until the memory is back? */
            double t = t_free, left = 0;
            while ((left = base - free_mib()) > 64 && now_ms() - t_free < 2000)
                usleep(200);
            t = now_ms();
            printf("churn_ipc: release_ms %.2f (held after %.0f ms: %.0f MiB)\n", t - t_free,
                   t - t_free, left > 0 ? left : 0);
            if (left > 64)
                failed = 1;
        }
    }
    printf("churn_ipc: held_mib_max %.0f (rounds %d of %d, %s, %d MiB)\n", held_max, done, rounds,
           mem, mib);
    if (!strcmp(kase, "churn") && held_max > 2.0 * mib + 64)
        failed = 1;
    close(s);
    int st = 0;
    waitpid(child, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st))
        failed = 1;
    if (failed) {
        printf("FAILED churn_ipc: %s %s\n", kase, mem);
        return 1;
    }
    printf("OK churn_ipc %s %s\n", kase, mem);
    return 0;
}
