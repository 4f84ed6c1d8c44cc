/* SPDX-License-Identifier: MIT */
/*
 * cu_pair: two processes share GPU memory through a 64-byte IPC handle
 * sent over a pipe, the way an unmodified MPI program does.
 *
 * The child exports: it allocates (legacy cuMemAlloc, or VMM cuMemCreate
 * memory, one or three chunks mapped contiguously), fills a pattern, asks
 * cuIpcGetMemHandle for an interior pointer and for the allocation base
 * (the bytes must be equal, as with the real driver), and sends the handle,
 * the pointer's offset in the allocation and the allocation's size. The
 * parent imports: cuIpcOpenMemHandle, adds the offset, copies the whole
 * allocation back and checks every byte, closes; --iters repeats that.
 * The importer is the parent so that pidfd_getfd (ipcbyval) on the child
 * is allowed even under Yama ptrace_scope=1.
 *
 * Nothing CUDA is linked: libcuda.so.1 is dlopen'ed (RTLD_LOCAL) and its
 * entry points are reached one of three ways (--route, cu_pair_drv.c):
 *   symbol   dlsym each cu* symbol from the library handle
 *   procaddr dlsym only cuGetProcAddress_v2, resolve the rest through it
 *   cudart   like libcudart: dlsym cuGetProcAddress_v2, ask it for
 *            "cuGetProcAddress" (12000) and resolve everything through the
 *            pointer it returns; the 11030 (4-argument) variant is
 *            fetched and used once as well.
 * --churn R repeats the whole exchange R times with a fresh allocation
 * each round (--size MiB sets the legacy allocation's size): the exporter
 * allocates, shares, waits for the importer's open+check+close, frees. With
 * the double's CUDADRV_TOTAL_MEM it shows whether the importer gives the
 * exporter's freed memory back: natively every round fits; an importer
 * that keeps closed mappings makes the exporter's allocation fail with
 * CUDA_ERROR_OUT_OF_MEMORY.
 * Exit 0 with an "OK ..." line, 1 with a line naming the failing call and
 * its CUDA error, 2 on bad usage.
 */
#include "cu_pair.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test/io_all.h"

/* What the exporter sends: the handle plus where the pointer lies. */
struct msg {
    uint32_t magic;
    uint32_t pad;
    CUipcMemHandle handle;
    uint64_t ptr_off;   /* pointer - allocation base */
    uint64_t size;      /* allocation size (cuMemGetAddressRange) */
    uint64_t pat_off;   /* allocation base - start of the filled range */
};

#define MSG_MAGIC 0x50554331u
#define MAX_CHUNKS 3

static const char *mem_names[] = { "legacy", "vmm", "vmm-multi" };
static const char *route_names[] = { "symbol", "procaddr", "cudart" };

/* Chunk-dependent, so a mapping of the wrong chunk is caught. */
static uint8_t pattern(uint64_t i)
{
    return (uint8_t)(((i * 2654435761u) >> 11) + (i >> 21) * 37u);
}

struct exported {
    CUdeviceptr fill;     /* start of the filled range */
    size_t fill_len;
    CUdeviceptr ptr;      /* the pointer whose handle is sent */
    CUmemGenericAllocationHandle chunks[MAX_CHUNKS];
    int nchunks;
};

static int allocate(const struct opts *o, struct exported *e)
{
    CUmemAllocationProp prop = vmm_prop(o->dev_exp);
    size_t gran, chunk;

    if (o->mem == MEM_LEGACY) {
        e->fill_len = o->size_mib ? (size_t)o->size_mib << 20 : (1 << 20) + 12345;
        CU(MemAlloc, &e->fill, e->fill_len);
        e->ptr = e->fill + 4096 + 7;
        return 0;
    }
    CU(MemGetAllocationGranularity, &gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    e->nchunks = o->mem == MEM_VMM ? 1 : MAX_CHUNKS;
    chunk = o->mem == MEM_VMM ? 2 * gran : gran;
    e->fill_len = chunk * (size_t)e->nchunks;
    CU(MemAddressReserve, &e->fill, e->fill_len, 0, 0, 0);
    for (int i = 0; i < e->nchunks; i++) {
        CU(MemCreate, &e->chunks[i], chunk, &prop, 0);
        CU(MemMap, e->fill + (size_t)i * chunk, chunk, 0, e->chunks[i], 0);
    }
    if (vmm_access(e->fill, e->fill_len, o->dev_exp))
        return 1;
    /* vmm: the middle of the allocation; vmm-multi: inside chunk 2. */
    e->ptr = e->fill + (o->mem == MEM_VMM ? chunk / 2 : chunk) + 4096 + 7;
    return 0;
}

static int release(const struct opts *o, struct exported *e)
{
    if (o->mem == MEM_LEGACY) {
        CU(MemFree, e->fill);
        return 0;
    }
    CU(MemUnmap, e->fill, e->fill_len);
    for (int i = 0; i < e->nchunks; i++)
        CU(MemRelease, e->chunks[i]);
    CU(MemAddressFree, e->fill, e->fill_len);
    return 0;
}

/* One allocation: filled, shared, released once the importer acks (or
 * is gone). */
static int export_round(const struct opts *o, int wfd, int ackfd)
{
    struct exported e = { 0 };
    CUipcMemHandle again;
    struct msg m = { 0 };
    CUdeviceptr base;
    size_t size;
    unsigned char *buf;
    char ack;

    if (allocate(o, &e))
        return 1;
    buf = malloc(e.fill_len);
    if (!buf)
        return 1;
    for (size_t i = 0; i < e.fill_len; i++)
        buf[i] = pattern(i);
    CU(MemcpyHtoD, e.fill, buf, e.fill_len);
    free(buf);
    CU(MemGetAddressRange, &base, &size, e.ptr);
    CU(IpcGetMemHandle, &m.handle, e.ptr);
    CU(IpcGetMemHandle, &again, base);
    if (memcmp(&m.handle, &again, sizeof(again)) != 0) {
        fprintf(stderr, "cu_pair: exporter: cuIpcGetMemHandle gave different bytes for "
                "the base and an interior pointer of one allocation\n");
        return 1;
    }
    m.magic = MSG_MAGIC;
    m.ptr_off = e.ptr - base;
    m.pat_off = base - e.fill;
    /* Only the filled bytes are checked, should a driver round sizes. */
    m.size = size < e.fill_len - m.pat_off ? size : e.fill_len - m.pat_off;
    if (o->verbose) {
        fprintf(stderr, "cu_pair: exporter: ptr 0x%llx base 0x%llx size %zu handle ",
                (unsigned long long)e.ptr, (unsigned long long)base, size);
        for (int i = 0; i < CU_IPC_HANDLE_SIZE; i++)
            fprintf(stderr, "%02x", (unsigned char)m.handle.reserved[i]);
        fputc('\n', stderr);
    }
    if (test_write_all(wfd, &m, sizeof(m)) < 0) {
        fprintf(stderr, "cu_pair: exporter: write to importer failed: %s\n", strerror(errno));
        return 1;
    }
    /* Keep the memory alive until the importer is done (or gone). */
    if (read(ackfd, &ack, 1) < 0)
        ack = 0;
    return release(o, &e);
}

static int exporter(const struct opts *o, int wfd, int ackfd)
{
    role = "exporter";
    if (setup(o, o->dev_exp))
        return 1;
    for (int r = 0; r < (o->churn ? o->churn : 1); r++)
        if (export_round(o, wfd, ackfd))
            return 1;
    return 0;
}

static int check(const unsigned char *buf, const struct msg *m, int iter)
{
    for (uint64_t i = 0; i < m->size; i++) {
        if (buf[i] != pattern(m->pat_off + i)) {
            fprintf(stderr, "cu_pair: importer: iteration %d: byte %llu of the allocation is "
                    "0x%02x, expected 0x%02x\n", iter, (unsigned long long)i, buf[i],
                    pattern(m->pat_off + i));
            return 1;
        }
    }
    return 0;
}

static int import_once(const struct msg *m, unsigned char *buf, int iter, int reopen,
                       int verbose)
{
    CUdeviceptr p, again, ptr;
    unsigned char first;

    CU(IpcOpenMemHandle, &p, m->handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    if (verbose)
        fprintf(stderr, "cu_pair: importer: iteration %d: opened at 0x%llx\n", iter,
                (unsigned long long)p);
    if (reopen) {
        CU(IpcOpenMemHandle, &again, m->handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
        if (again != p) {
            fprintf(stderr, "cu_pair: importer: second open while open gave 0x%llx, "
                    "first 0x%llx (the driver returns the same pointer)\n",
                    (unsigned long long)again, (unsigned long long)p);
            return 1;
        }
        CU(IpcCloseMemHandle, again);
    }
    /* The program's view: base + offset is its pointer. */
    ptr = p + m->ptr_off;
    CU(MemcpyDtoH, &first, ptr, 1);
    if (first != pattern(m->pat_off + m->ptr_off)) {
        fprintf(stderr, "cu_pair: importer: byte at the exported pointer is 0x%02x, "
                "expected 0x%02x\n", first, pattern(m->pat_off + m->ptr_off));
        return 1;
    }
    memset(buf, 0, m->size);
    CU(MemcpyDtoH, buf, p, m->size);
    if (check(buf, m, iter))
        return 1;
    CU(IpcCloseMemHandle, p);
    return 0;
}

static double now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

/* --bench N: N open+close cycles of the handle (after the checked opens),
 * timed in 21 batches; prints the median batch mean (make bench's CUDA
 * row: the cached re-open on the double). */
static int bench_cycles(const struct msg *m, int n)
{
    enum { BATCHES = 21 };
    double per[BATCHES];
    int each = n / BATCHES > 0 ? n / BATCHES : 1;
    CUdeviceptr p;

    for (int b = 0; b < BATCHES; b++) {
        double t0 = now_ns();

        for (int i = 0; i < each; i++) {
            CU(IpcOpenMemHandle, &p, m->handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
            CU(IpcCloseMemHandle, p);
        }
        per[b] = (now_ns() - t0) / each;
    }
    qsort(per, BATCHES, sizeof(per[0]), cmp_double);
    printf("cycle_ns %.1f\n", per[BATCHES / 2]);
    return 0;
}

static int importer(const struct opts *o, int rfd, int ackfd, pid_t child)
{
    struct msg m;
    unsigned char *buf = NULL;
    int status = 0, rc = 1;

    role = "importer";
    if (setup(o, o->dev_imp))
        goto out;
    if (test_read_all(rfd, &m, sizeof(m)) < 0 || m.magic != MSG_MAGIC) {
        fprintf(stderr, "cu_pair: importer: the exporter sent no handle\n");
        goto out;
    }
    buf = malloc(m.size ? m.size : 1);
    if (!buf)
        goto out;
    for (int r = 0; o->churn && r < o->churn; r++) {
        if (r > 0 && (test_read_all(rfd, &m, sizeof(m)) < 0 || m.magic != MSG_MAGIC)) {
            fprintf(stderr, "cu_pair: importer: churn round %d: the exporter sent no handle\n",
                    r);
            goto out;
        }
        if (import_once(&m, buf, r, o->reopen && r == 0, o->verbose) || write(ackfd, "k", 1) != 1)
            goto out;
    }
    for (int i = 0; !o->churn && i < o->iters; i++)
        if (import_once(&m, buf, i, o->reopen && i == 0, o->verbose))
            goto out;
    if (o->bench && bench_cycles(&m, o->bench))
        goto out;
    rc = 0;
out:
    free(buf);
    close(ackfd);   /* releases the exporter */
    if (waitpid(child, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        if (WIFSIGNALED(status))
            fprintf(stderr, "cu_pair: exporter (pid %d) killed by signal %d\n", (int)child,
                    WTERMSIG(status));
        else
            fprintf(stderr, "cu_pair: exporter (pid %d) exited with %d\n", (int)child,
                    WEXITSTATUS(status));
        rc = 1;
    }
    if (rc == 0)
        printf("OK cu_pair mem=%s route=%s iters=%d churn=%d size=%llu offset=%llu\n",
               mem_names[o->mem], route_names[o->route], o->iters, o->churn,
               (unsigned long long)m.size, (unsigned long long)m.ptr_off);
    return rc;
}

static int pick(const char *v, const char **names, int n)
{
    for (int i = 0; v && i < n; i++)
        if (strcmp(v, names[i]) == 0)
            return i;
    return -1;
}

static int usage(void)
{
    fprintf(stderr, "usage: cu_pair [--mem legacy|vmm|vmm-multi] [--route symbol|procaddr|cudart]\n"
            "               [--iters K] [--reopen] [--dev-exp N] [--dev-imp N]\n"
            "               [--cuda-version V] [--lib PATH] [--bench N] [-v]\n"
            "               [--churn ROUNDS] [--size MIB]\n");
    return 2;
}

int main(int argc, char **argv)
{
    struct opts o = { MEM_LEGACY, ROUTE_SYMBOL, 1, 0, 0, 0, 0, CUDA_VERSION, 0, 0, 0,
                      "libcuda.so.1" };
    int to_imp[2], to_exp[2];
    pid_t pid;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int k;

        if (!strcmp(a, "-v")) {
            o.verbose = 1;
        } else if (!strcmp(a, "--reopen")) {
            o.reopen = 1;
        } else if (!strcmp(a, "--mem") && (k = pick(v, mem_names, 3)) >= 0) {
            o.mem = (enum mem_kind)k, i++;
        } else if (!strcmp(a, "--route") && (k = pick(v, route_names, 3)) >= 0) {
            o.route = (enum route)k, i++;
        } else if (!strcmp(a, "--iters") && v && (o.iters = atoi(v)) > 0) {
            i++;
        } else if (!strcmp(a, "--dev-exp") && v) {
            o.dev_exp = atoi(v), i++;
        } else if (!strcmp(a, "--dev-imp") && v) {
            o.dev_imp = atoi(v), i++;
        } else if (!strcmp(a, "--bench") && v && (o.bench = atoi(v)) > 0) {
            i++;
        } else if (!strcmp(a, "--churn") && v && (o.churn = atoi(v)) > 0) {
            i++;
        } else if (!strcmp(a, "--size") && v && (o.size_mib = atoi(v)) > 0) {
            i++;
        } else if (!strcmp(a, "--cuda-version") && v) {
            o.version = atoi(v), i++;
        } else if (!strcmp(a, "--lib") && v) {
            o.lib = v, i++;
        } else {
            return usage();
        }
    }
    /* Fork before any CUDA call: a CUDA state must not cross fork(). */
    if (pipe(to_imp) < 0 || pipe(to_exp) < 0) {
        perror("cu_pair: pipe");
        return 1;
    }
    fflush(NULL);
    pid = fork();
    if (pid < 0) {
        perror("cu_pair: fork");
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
