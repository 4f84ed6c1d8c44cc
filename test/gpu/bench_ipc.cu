/* SPDX-License-Identifier: MIT */
/*
 * bench_ipc: latency table of CUDA IPC export/open/close, to run natively
 * and under ipcbyval (LD_PRELOAD) on the GPU machine.
 *
 * The child exports and times: legacy cuIpcGetMemHandle (first, repeated),
 * the driver's own VMM export cuMemExportToShareableHandle(POSIX_FD)
 * (first, repeated; a new fd each call) and cuIpcGetMemHandle on another
 * VMM allocation (fails natively; under ipcbyval first and repeated). The
 * parent opens what it was sent and times the first open and close, then
 * --iters open+close cycles: natively the driver's cost, under ipcbyval
 * the cached reopen; then the same cycles timed in batches (the ratios of
 * make bench-gpu use those). Medians and 90th percentiles in microseconds.
 * --api rt measures the cudaIpc* calls instead of the cuIpc* ones.
 */
#include "gpu_common.cuh"

#include <errno.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum row { GET_LEGACY, EXPORT_NATIVE, GET_VMM, OPEN_LEGACY, CLOSE_LEGACY, CYCLE_LEGACY, OPEN_VMM,
           CLOSE_VMM, CYCLE_VMM, CTX_CURRENT, NROWS };

/* memory kind, whether the call is the API under test (cu or cuda), call */
static const struct {
    const char *kind;
    int api;
    const char *call;
} row_names[NROWS] = {
    { "legacy", 1, "IpcGetMemHandle" },
    { "VMM", 0, "cuMemExportToShareableHandle(POSIX_FD)" },
    { "VMM", 1, "IpcGetMemHandle (by value: ipcbyval)" },
    { "legacy", 1, "IpcOpenMemHandle" },
    { "legacy", 1, "IpcCloseMemHandle" },
    { "legacy", 1, "IpcOpen+Close cycle (batched)" },
    { "VMM", 1, "IpcOpenMemHandle (ipcbyval)" },
    { "VMM", 1, "IpcCloseMemHandle (ipcbyval)" },
    { "VMM", 1, "IpcOpen+Close cycle (batched, ipcbyval)" },
    { "driver", 0, "cuCtxGetCurrent (batched)" },
};

struct stat_row {
    double first, median, p90;
    int n;
    char err[48];   /* empty when measured */
};

struct msg {
    uint32_t magic, vmm_ok;
    cudaIpcMemHandle_t legacy, vmm;
    struct stat_row rows[NROWS];
};

#define MSG_MAGIC 0x42454e31u

struct opts {
    int iters, dev_exp, dev_imp, entry_points, rt_api;
};

static struct opts o = { 200, 0, 0, 0, 0 };

static double now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

static void summarize(struct stat_row *r, double first, double *t, int n)
{
    qsort(t, (size_t)n, sizeof(*t), cmp_double);
    r->first = first;
    r->n = n;
    r->median = n ? t[n / 2] : 0;
    r->p90 = n ? t[(n * 9) / 10 < n ? (n * 9) / 10 : n - 1] : 0;
}

/* The IPC calls under test, through the driver or the runtime API.
 * They return 0 or write the error's name into err. */
static int ipc_get(cudaIpcMemHandle_t *h, CUdeviceptr p, char *err, size_t len)
{
    if (o.rt_api) {
        cudaError_t e = cudaIpcGetMemHandle(h, (void *)(uintptr_t)p);

        if (e != cudaSuccess)
            snprintf(err, len, "%s", cudaGetErrorName(e));
        return e != cudaSuccess;
    }
    CUresult rc = drv.IpcGetMemHandle((CUipcMemHandle *)h, p);

    if (rc != CUDA_SUCCESS)
        snprintf(err, len, "%s", gpu_cu_name(rc));
    return rc != CUDA_SUCCESS;
}

static int ipc_open(CUdeviceptr *p, const cudaIpcMemHandle_t *h)
{
    CUipcMemHandle ch;
    void *vp = NULL;

    if (o.rt_api) {
        RT(cudaIpcOpenMemHandle(&vp, *h, cudaIpcMemLazyEnablePeerAccess));
        *p = (CUdeviceptr)(uintptr_t)vp;
        return 0;
    }
    memcpy(&ch, h, sizeof(ch));
    DRV(drv.IpcOpenMemHandle(p, ch, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    return 0;
}

static int ipc_close(CUdeviceptr p)
{
    if (o.rt_api)
        RT(cudaIpcCloseMemHandle((void *)(uintptr_t)p));
    else
        DRV(drv.IpcCloseMemHandle(p));
    return 0;
}

static int time_gets(struct stat_row *r, cudaIpcMemHandle_t *h, CUdeviceptr p, double *t)
{
    double t0 = now_us(), first;

    if (ipc_get(h, p, r->err, sizeof(r->err)))
        return 1;
    first = now_us() - t0;
    for (int i = 0; i < o.iters; i++) {
        t0 = now_us();
        if (ipc_get(h, p, r->err, sizeof(r->err)))
            return 1;
        t[i] = now_us() - t0;
    }
    summarize(r, first, t, o.iters);
    return 0;
}

static int time_exports(struct stat_row *r, CUmemGenericAllocationHandle h, double *t)
{
    double first = 0, t0;
    int fd;

    for (int i = -1; i < o.iters; i++) {
        t0 = now_us();
        DRV(drv.MemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
        if (i < 0)
            first = now_us() - t0;
        else
            t[i] = now_us() - t0;
        close(fd);
    }
    summarize(r, first, t, o.iters);
    return 0;
}

static int init_device(int dev)
{
    RT(cudaSetDevice(dev));
    RT(cudaFree(0));
    return gpu_drv_load(o.entry_points);
}

static int exporter(int wfd, int ackfd, double *t)
{
    struct gpu_vmm a, b;
    struct msg m;
    void *legacy;
    char ack;

    gpu_role = "exporter";
    memset(&m, 0, sizeof(m));
    if (init_device(o.dev_exp))
        return 1;
    RT(cudaMalloc(&legacy, 2 << 20));
    /* Two VMM allocations: the driver's export of one must not warm up
     * ipcbyval's export of the other. */
    if (gpu_vmm_alloc(&a, o.dev_exp, 1, 1) || gpu_vmm_alloc(&b, o.dev_exp, 1, 1))
        return 1;
    if (time_gets(&m.rows[GET_LEGACY], &m.legacy, (CUdeviceptr)(uintptr_t)legacy, t)) {
        fprintf(stderr, "bench_ipc: exporter: legacy IpcGetMemHandle failed: %s\n",
                m.rows[GET_LEGACY].err);
        return 1;
    }
    if (time_exports(&m.rows[EXPORT_NATIVE], a.h[0], t))
        return 1;
    m.vmm_ok = !time_gets(&m.rows[GET_VMM], &m.vmm, b.va, t);
    m.magic = MSG_MAGIC;
    if (write(wfd, &m, sizeof(m)) != (ssize_t)sizeof(m))
        return 1;
    if (read(ackfd, &ack, 1) < 0)
        ack = 0;
    RT(cudaFree(legacy));
    return gpu_vmm_free(&a) || gpu_vmm_free(&b);
}

static int time_opens(struct stat_row *open_row, struct stat_row *close_row,
                      const cudaIpcMemHandle_t *h, double *t_open, double *t_close)
{
    double t0, first_open, first_close;
    CUdeviceptr p;

    t0 = now_us();
    if (ipc_open(&p, h))
        return 1;
    first_open = now_us() - t0;
    t0 = now_us();
    if (ipc_close(p))
        return 1;
    first_close = now_us() - t0;
    for (int i = 0; i < o.iters; i++) {
        t0 = now_us();
        if (ipc_open(&p, h))
            return 1;
        t_open[i] = now_us() - t0;
        t0 = now_us();
        if (ipc_close(p))
            return 1;
        t_close[i] = now_us() - t0;
    }
    summarize(open_row, first_open, t_open, o.iters);
    summarize(close_row, first_close, t_close, o.iters);
    return 0;
}

/* Whole open+close cycles timed in batches: a cached cycle costs a few
 * hundred ns, as much as the two clock reads per call that time_opens
 * adds; a batch of cycles between two reads measures the cycle alone, the
 * same way natively and under ipcbyval. Median of the batches' means. */
#define CYCLE_BATCHES 21
static int time_cycles(struct stat_row *row, const cudaIpcMemHandle_t *h, double *t)
{
    int n = o.iters / CYCLE_BATCHES > 0 ? o.iters / CYCLE_BATCHES : 1;
    CUdeviceptr p;

    for (int b = 0; b < CYCLE_BATCHES; b++) {
        double t0 = now_us();

        for (int i = 0; i < n; i++)
            if (ipc_open(&p, h) || ipc_close(p))
                return 1;
        t[b] = (now_us() - t0) / n;
    }
    summarize(row, t[0], t, CYCLE_BATCHES);
    return 0;
}

/* The driver's own floor under a cached legacy open: the key holds the
 * current context, which only the driver can tell. */
static int time_ctx_current(struct stat_row *row, double *t)
{
    int n = o.iters / CYCLE_BATCHES > 0 ? o.iters / CYCLE_BATCHES : 1;
    CUcontext c;

    for (int b = 0; b < CYCLE_BATCHES; b++) {
        double t0 = now_us();

        for (int i = 0; i < n; i++)
            DRV(drv.CtxGetCurrent(&c));
        t[b] = (now_us() - t0) / n;
    }
    summarize(row, t[0], t, CYCLE_BATCHES);
    return 0;
}

static void print_table(const struct msg *m)
{
    const char *pre = getenv("LD_PRELOAD");
    const char *api = o.rt_api ? "cuda" : "cu";

    printf("bench_ipc: %s, api=%s, device %d -> %d, %d samples per row, microseconds\n",
           pre && strstr(pre, "ipcbyval") ? "with ipcbyval" : "native",
           o.rt_api ? "runtime" : "driver", o.dev_exp, o.dev_imp, o.iters);
    printf("| %-48s | %9s | %9s | %9s |\n", "operation", "first", "median", "p90");
    printf("|%.50s|%.11s|%.11s|%.11s|\n", "--------------------------------------------------",
           "-----------", "-----------", "-----------");
    for (int i = 0; i < NROWS; i++) {
        const struct stat_row *r = &m->rows[i];
        char name[64];

        snprintf(name, sizeof(name), "%s %s%s", row_names[i].kind,
                 row_names[i].api ? api : "", row_names[i].call);
        if (r->err[0] || r->n == 0)
            printf("| %-48s | %-33s |\n", name, r->err[0] ? r->err : "not measured");
        else
            printf("| %-48s | %9.2f | %9.2f | %9.2f |\n", name, r->first, r->median, r->p90);
    }
    printf("Open/close rows: first = first open of the handle; median/p90 = open+close\n"
           "cycles, i.e. the driver natively and the cached reopen under ipcbyval.\n");
}

static int importer(int rfd, int ackfd, pid_t child, double *t1, double *t2)
{
    struct msg m;
    int status = 0, rc = 1;

    gpu_role = "importer";
    if (init_device(o.dev_imp))
        goto out;
    if (read(rfd, &m, sizeof(m)) != (ssize_t)sizeof(m) || m.magic != MSG_MAGIC) {
        fprintf(stderr, "bench_ipc: importer: the exporter sent no handles\n");
        goto out;
    }
    if (time_opens(&m.rows[OPEN_LEGACY], &m.rows[CLOSE_LEGACY], &m.legacy, t1, t2) ||
        time_cycles(&m.rows[CYCLE_LEGACY], &m.legacy, t1) ||
        time_ctx_current(&m.rows[CTX_CURRENT], t1))
        goto out;
    if (!m.vmm_ok) {
        snprintf(m.rows[OPEN_VMM].err, sizeof(m.rows[OPEN_VMM].err), "no handle (export failed)");
        snprintf(m.rows[CLOSE_VMM].err, sizeof(m.rows[CLOSE_VMM].err), "no handle");
        snprintf(m.rows[CYCLE_VMM].err, sizeof(m.rows[CYCLE_VMM].err), "no handle");
    } else if (time_opens(&m.rows[OPEN_VMM], &m.rows[CLOSE_VMM], &m.vmm, t1, t2) ||
               time_cycles(&m.rows[CYCLE_VMM], &m.vmm, t1)) {
        goto out;
    }
    print_table(&m);
    rc = 0;
out:
    close(ackfd);
    if (waitpid(child, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "bench_ipc: exporter failed (wait status 0x%x)\n", status);
        rc = 1;
    }
    return rc;
}

int main(int argc, char **argv)
{
    int to_imp[2], to_exp[2];
    double *t1, *t2;
    pid_t pid;

    gpu_prog = "bench_ipc";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

        if (!strcmp(a, "--iters") && v && (o.iters = atoi(v)) > 0) {
            i++;
        } else if (!strcmp(a, "--dev-exp") && v) {
            o.dev_exp = atoi(v), i++;
        } else if (!strcmp(a, "--dev-imp") && v) {
            o.dev_imp = atoi(v), i++;
        } else if (!strcmp(a, "--drv") && v && (!strcmp(v, "link") || !strcmp(v, "entry"))) {
            o.entry_points = !strcmp(v, "entry"), i++;
        } else if (!strcmp(a, "--api") && v && (!strcmp(v, "drv") || !strcmp(v, "rt"))) {
            o.rt_api = !strcmp(v, "rt"), i++;
        } else {
            fprintf(stderr, "usage: bench_ipc [--iters N] [--dev-exp N] [--dev-imp N] "
                    "[--drv link|entry] [--api drv|rt]\n");
            return 2;
        }
    }
    t1 = (double *)calloc((size_t)o.iters, sizeof(double));
    t2 = (double *)calloc((size_t)o.iters, sizeof(double));
    if (!t1 || !t2 || pipe(to_imp) < 0 || pipe(to_exp) < 0) {
        perror("bench_ipc");
        return 1;
    }
    fflush(NULL);
    pid = fork();   /* before any CUDA call */
    if (pid < 0) {
        perror("bench_ipc: fork");
        return 1;
    }
    if (pid == 0) {
        close(to_imp[0]);
        close(to_exp[1]);
        _exit(exporter(to_imp[1], to_exp[0], t1));
    }
    close(to_imp[1]);
    close(to_exp[0]);
    return importer(to_imp[0], to_exp[1], pid, t1, t2);
}
