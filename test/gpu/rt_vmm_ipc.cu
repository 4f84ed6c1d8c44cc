/* SPDX-License-Identifier: MIT */
/*
 * rt_vmm_ipc: CUDA runtime IPC of VMM and legacy memory between two
 * processes (fork + pipe), as an unmodified nvcc program (static cudart)
 * does it.
 *
 * The child exports: it allocates legacy (cudaMalloc) or VMM memory
 * (cuMemCreate + cuMemMap + cuMemSetAccess, one chunk or three mapped
 * contiguously), fills a pattern with a kernel, calls cudaIpcGetMemHandle
 * on an interior pointer and on the allocation base (the bytes must be
 * equal) and sends the handle with the pointer's offset. The parent
 * imports: cudaIpcOpenMemHandle, checks every byte with a kernel and with
 * cudaMemcpy, closes; --iters repeats.
 *
 * Natively, --mem vmm fails at cudaIpcGetMemHandle with
 * cudaErrorInvalidValue; under ipcbyval it must pass. --mem legacy passes
 * both ways. Exit 0 with an "OK ..." line, 1 on failure, 2 on bad usage.
 */
#include "gpu_common.cuh"

#include <errno.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

enum mem_kind { MEM_LEGACY, MEM_VMM, MEM_VMM_MULTI };
static const char *mem_names[] = { "legacy", "vmm", "vmm-multi" };

struct opts {
    enum mem_kind mem;
    int entry_points, dev_exp, dev_imp, iters, reopen;
};

struct msg {
    uint32_t magic;
    uint32_t seed;
    cudaIpcMemHandle_t handle;
    uint64_t ptr_off, size, pat_off;
};

#define MSG_MAGIC 0x52544d31u

static int io_all(int fd, void *buf, size_t n, int writing)
{
    char *p = (char *)buf;

    while (n > 0) {
        ssize_t r = writing ? write(fd, p, n) : read(fd, p, n);

        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

static int init_device(const struct opts *o, int dev)
{
    RT(cudaSetDevice(dev));
    RT(cudaFree(0));   /* makes the primary context current for the driver API */
    return gpu_drv_load(o->entry_points);
}

static int exporter(const struct opts *o, int wfd, int ackfd)
{
    struct gpu_vmm v;
    struct msg m;
    cudaIpcMemHandle_t again;
    CUdeviceptr fill, ptr, base;
    size_t fill_len, size;
    void *legacy = NULL;
    char ack;

    gpu_role = "exporter";
    memset(&m, 0, sizeof(m));
    if (init_device(o, o->dev_exp))
        return 1;
    if (o->mem == MEM_LEGACY) {
        fill_len = (4 << 20) + 12345;
        RT(cudaMalloc(&legacy, fill_len));
        fill = (CUdeviceptr)(uintptr_t)legacy;
        ptr = fill + 4096 + 7;
    } else {
        if (gpu_vmm_alloc(&v, o->dev_exp, o->mem == MEM_VMM ? 1 : 3, o->mem == MEM_VMM ? 2 : 1))
            return 1;
        fill = v.va;
        fill_len = v.len;
        /* vmm: middle of the chunk; vmm-multi: inside the second chunk */
        ptr = fill + (o->mem == MEM_VMM ? v.chunk / 2 : v.chunk) + 4096 + 7;
    }
    m.seed = 11;
    if (gpu_fill_range((void *)(uintptr_t)fill, fill_len, 0, m.seed))
        return 1;
    DRV(drv.MemGetAddressRange(&base, &size, ptr));
    RT(cudaIpcGetMemHandle(&m.handle, (void *)(uintptr_t)ptr));
    RT(cudaIpcGetMemHandle(&again, (void *)(uintptr_t)base));
    if (memcmp(&m.handle, &again, sizeof(again)) != 0) {
        fprintf(stderr, "%s: exporter: cudaIpcGetMemHandle gave different bytes for the base "
                "and an interior pointer of one allocation\n", gpu_prog);
        return 1;
    }
    m.magic = MSG_MAGIC;
    m.ptr_off = ptr - base;
    m.pat_off = base - fill;
    /* Only the filled bytes are checked, should the driver round sizes. */
    m.size = size < fill_len - m.pat_off ? size : fill_len - m.pat_off;
    if (io_all(wfd, &m, sizeof(m), 1) < 0)
        return 1;
    if (read(ackfd, &ack, 1) < 0)
        ack = 0;
    if (legacy) {
        RT(cudaFree(legacy));
        return 0;
    }
    return gpu_vmm_free(&v);
}

static int import_once(const struct opts *o, const struct msg *m, int iter)
{
    void *p = NULL, *again = NULL;
    uint8_t first = 0;
    char what[64];

    RT(cudaIpcOpenMemHandle(&p, m->handle, cudaIpcMemLazyEnablePeerAccess));
    if (o->reopen && iter == 0) {
        RT(cudaIpcOpenMemHandle(&again, m->handle, cudaIpcMemLazyEnablePeerAccess));
        if (again != p) {
            fprintf(stderr, "%s: importer: second open while open gave %p, first %p\n",
                    gpu_prog, again, p);
            return 1;
        }
        RT(cudaIpcCloseMemHandle(again));
    }
    RT(cudaMemcpy(&first, (char *)p + m->ptr_off, 1, cudaMemcpyDeviceToHost));
    if (first != gpu_pattern(m->pat_off + m->ptr_off, m->seed)) {
        fprintf(stderr, "%s: importer: byte at the exported pointer is 0x%02x, expected 0x%02x\n",
                gpu_prog, first, gpu_pattern(m->pat_off + m->ptr_off, m->seed));
        return 1;
    }
    snprintf(what, sizeof(what), "iteration %d", iter);
    if (gpu_check_range(p, m->size, m->pat_off, m->seed, what))
        return 1;
    RT(cudaIpcCloseMemHandle(p));
    return 0;
}

static int importer(const struct opts *o, int rfd, int ackfd, pid_t child)
{
    struct msg m;
    int status = 0, rc = 1;

    gpu_role = "importer";
    if (init_device(o, o->dev_imp))
        goto out;
    if (io_all(rfd, &m, sizeof(m), 0) < 0 || m.magic != MSG_MAGIC) {
        fprintf(stderr, "%s: importer: the exporter sent no handle\n", gpu_prog);
        goto out;
    }
    for (int i = 0; i < o->iters; i++)
        if (import_once(o, &m, i))
            goto out;
    rc = 0;
out:
    close(ackfd);
    if (waitpid(child, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "%s: exporter (pid %d) failed (wait status 0x%x)\n", gpu_prog,
                (int)child, status);
        rc = 1;
    }
    if (rc == 0)
        printf("OK rt_vmm_ipc mem=%s drv=%s dev %d -> %d iters=%d size=%llu offset=%llu\n",
               mem_names[o->mem], o->entry_points ? "entry" : "link", o->dev_exp, o->dev_imp,
               o->iters, (unsigned long long)m.size, (unsigned long long)m.ptr_off);
    return rc;
}

static int usage(void)
{
    fprintf(stderr, "usage: rt_vmm_ipc [--mem legacy|vmm|vmm-multi] [--drv link|entry]\n"
            "                  [--dev-exp N] [--dev-imp N] [--iters K] [--reopen]\n");
    return 2;
}

int main(int argc, char **argv)
{
    struct opts o = { MEM_VMM, 0, 0, 0, 1, 0 };
    int to_imp[2], to_exp[2];
    pid_t pid;

    gpu_prog = "rt_vmm_ipc";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int k = -1;

        if (!strcmp(a, "--mem") && v) {
            for (int j = 0; j < 3; j++)
                if (!strcmp(v, mem_names[j]))
                    k = j;
            if (k < 0)
                return usage();
            o.mem = (enum mem_kind)k, i++;
        } else if (!strcmp(a, "--drv") && v && (!strcmp(v, "link") || !strcmp(v, "entry"))) {
            o.entry_points = !strcmp(v, "entry"), i++;
        } else if (!strcmp(a, "--dev-exp") && v) {
            o.dev_exp = atoi(v), i++;
        } else if (!strcmp(a, "--dev-imp") && v) {
            o.dev_imp = atoi(v), i++;
        } else if (!strcmp(a, "--iters") && v && (o.iters = atoi(v)) > 0) {
            i++;
        } else if (!strcmp(a, "--reopen")) {
            o.reopen = 1;
        } else {
            return usage();
        }
    }
    /* No CUDA call before fork: a CUDA context must not cross fork(). */
    if (pipe(to_imp) < 0 || pipe(to_exp) < 0) {
        perror("rt_vmm_ipc: pipe");
        return 1;
    }
    fflush(NULL);
    pid = fork();
    if (pid < 0) {
        perror("rt_vmm_ipc: fork");
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
