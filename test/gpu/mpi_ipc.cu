/* SPDX-License-Identifier: MIT */
/*
 * mpi_ipc: an unmodified MPI job that shares GPU memory by IPC handle.
 *
 * Every rank of a node (node-local rank r uses GPU r % ngpus) allocates a
 * legacy buffer (cudaMalloc) and a VMM buffer (--chunks chunks, each its own
 * cuMemCreate, mapped contiguously, POSIX-fd exportable like PyTorch's
 * expandable segments), fills each with a rank-specific pattern by kernel,
 * exports an interior pointer with cudaIpcGetMemHandle and MPI_Allgathers
 * the 64-byte handle, the pointer's offset and the allocation size. Every
 * rank then opens every other rank's handles (--iters times), checks the
 * bytes with a kernel and with cudaMemcpy, and closes.
 *
 * Natively the VMM export fails (cudaErrorInvalidValue) and the job
 * reports it; under ipcbyval both kinds must pass. Rank 0 prints
 * "OK mpi_ipc ..." or "FAILED mpi_ipc: N errors"; every rank exits 1 when
 * any rank saw an error. Usage:
 *   mpirun -n N mpi_ipc [--mem legacy|vmm|all] [--chunks C] [--iters K]
 *                       [--drv link|entry]
 */
#include "gpu_common.cuh"

#include <mpi.h>
#include <stdlib.h>

enum { KIND_LEGACY, KIND_VMM, NKINDS };
static const char *kind_names[] = { "legacy", "vmm" };

/* What each rank publishes per memory kind. */
struct pub {
    int32_t ok;           /* 1: handle valid */
    int32_t err;          /* cudaError_t of a failed export */
    uint32_t seed;
    uint32_t pad;
    cudaIpcMemHandle_t handle;
    uint64_t ptr_off, size, pat_off;
};

struct opts {
    int kinds[NKINDS];
    int chunks, iters, entry_points;
};

static int rank, lrank, lsize;

struct owned {
    void *legacy;
    struct gpu_vmm vmm;
    int have_vmm;
};

/* Allocates and fills one kind; fills p with what peers need. A failed
 * export is published, not fatal: the peers count it. */
static int make_buffer(const struct opts *o, int kind, int dev, struct owned *own, struct pub *p)
{
    CUdeviceptr fill, ptr, base;
    size_t fill_len, size;
    cudaIpcMemHandle_t again;
    cudaError_t e;

    memset(p, 0, sizeof(*p));
    p->seed = (uint32_t)(rank * 8 + kind + 1);
    if (kind == KIND_LEGACY) {
        fill_len = (2 << 20) + 4099 + (size_t)rank;
        RT(cudaMalloc(&own->legacy, fill_len));
        fill = (CUdeviceptr)(uintptr_t)own->legacy;
        ptr = fill + 4096 + 3;
    } else {
        if (gpu_vmm_alloc(&own->vmm, dev, o->chunks, 1))
            return 1;
        own->have_vmm = 1;
        fill = own->vmm.va;
        fill_len = own->vmm.len;
        /* inside the second chunk when there is one */
        ptr = fill + (o->chunks > 1 ? own->vmm.chunk : 0) + 4096 + 3;
    }
    if (gpu_fill_range((void *)(uintptr_t)fill, fill_len, 0, p->seed))
        return 1;
    DRV(drv.MemGetAddressRange(&base, &size, ptr));
    p->ptr_off = ptr - base;
    p->pat_off = base - fill;
    /* Only the filled bytes are checked, should the driver round sizes. */
    p->size = size < fill_len - p->pat_off ? size : fill_len - p->pat_off;
    e = cudaIpcGetMemHandle(&p->handle, (void *)(uintptr_t)ptr);
    if (e == cudaSuccess)
        e = cudaIpcGetMemHandle(&again, (void *)(uintptr_t)base);
    if (e != cudaSuccess) {
        fprintf(stderr, "mpi_ipc: rank %d: %s: cudaIpcGetMemHandle failed: %s (%s)\n", rank,
                kind_names[kind], cudaGetErrorName(e), cudaGetErrorString(e));
        p->err = e;
        return 0;
    }
    if (memcmp(&again, &p->handle, sizeof(again)) != 0) {
        fprintf(stderr, "mpi_ipc: rank %d: %s: cudaIpcGetMemHandle gave different bytes for "
                "the base and an interior pointer\n", rank, kind_names[kind]);
        return 1;
    }
    p->ok = 1;
    return 0;
}

static int open_peer(const struct opts *o, int kind, int peer, const struct pub *p)
{
    char what[96];
    void *base = NULL;
    uint8_t first = 0;

    for (int it = 0; it < o->iters; it++) {
        RT(cudaIpcOpenMemHandle(&base, p->handle, cudaIpcMemLazyEnablePeerAccess));
        RT(cudaMemcpy(&first, (char *)base + p->ptr_off, 1, cudaMemcpyDeviceToHost));
        if (first != gpu_pattern(p->pat_off + p->ptr_off, p->seed)) {
            fprintf(stderr, "mpi_ipc: rank %d: %s of local rank %d: wrong byte at the "
                    "exported pointer\n", rank, kind_names[kind], peer);
            return 1;
        }
        snprintf(what, sizeof(what), "%s of local rank %d, iteration %d", kind_names[kind],
                 peer, it);
        if (gpu_check_range(base, p->size, p->pat_off, p->seed, what))
            return 1;
        RT(cudaIpcCloseMemHandle(base));
    }
    return 0;
}

static int run_kind(const struct opts *o, int kind, int dev, MPI_Comm local, int *errors)
{
    struct owned own;
    struct pub mine, *all;

    memset(&own, 0, sizeof(own));
    all = (struct pub *)calloc((size_t)lsize, sizeof(*all));
    if (!all || make_buffer(o, kind, dev, &own, &mine))
        return 1;
    MPI_Allgather(&mine, (int)sizeof(mine), MPI_BYTE, all, (int)sizeof(mine), MPI_BYTE, local);
    for (int j = 0; j < lsize; j++) {
        if (j == lrank)
            continue;
        if (!all[j].ok) {
            /* The exporter already printed why. */
            (*errors)++;
            continue;
        }
        if (open_peer(o, kind, j, &all[j]))
            (*errors)++;
    }
    /* Peers are done with this rank's memory once everyone passed here. */
    MPI_Barrier(local);
    if (own.legacy)
        RT(cudaFree(own.legacy));
    if (own.have_vmm && gpu_vmm_free(&own.vmm))
        return 1;
    free(all);
    return 0;
}

static int parse(int argc, char **argv, struct opts *o)
{
    o->kinds[KIND_LEGACY] = o->kinds[KIND_VMM] = 1;
    o->chunks = 3;
    o->iters = 2;
    o->entry_points = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

        if (!strcmp(a, "--mem") && v) {
            o->kinds[KIND_LEGACY] = !strcmp(v, "legacy") || !strcmp(v, "all");
            o->kinds[KIND_VMM] = !strcmp(v, "vmm") || !strcmp(v, "all");
            if (!o->kinds[KIND_LEGACY] && !o->kinds[KIND_VMM])
                return 1;
            i++;
        } else if (!strcmp(a, "--chunks") && v && (o->chunks = atoi(v)) >= 1 &&
                   o->chunks <= GPU_MAX_CHUNKS) {
            i++;
        } else if (!strcmp(a, "--iters") && v && (o->iters = atoi(v)) >= 1) {
            i++;
        } else if (!strcmp(a, "--drv") && v && (!strcmp(v, "link") || !strcmp(v, "entry"))) {
            o->entry_points = !strcmp(v, "entry");
            i++;
        } else {
            return 1;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct opts o;
    MPI_Comm local;
    int nranks, ngpus = 0, dev, errors = 0, total = 0, fatal = 0;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    gpu_prog = "mpi_ipc";
    gpu_role = "setup";
    if (parse(argc, argv, &o)) {
        if (rank == 0)
            fprintf(stderr, "usage: mpirun -n N mpi_ipc [--mem legacy|vmm|all] [--chunks C] "
                    "[--iters K] [--drv link|entry]\n");
        MPI_Finalize();
        return 2;
    }
    /* IPC works within a node: peers are the ranks sharing this node. */
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
    MPI_Comm_rank(local, &lrank);
    MPI_Comm_size(local, &lsize);
    if (cudaGetDeviceCount(&ngpus) != cudaSuccess || ngpus < 1) {
        fprintf(stderr, "mpi_ipc: rank %d: no CUDA device\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    dev = lrank % ngpus;
    if (cudaSetDevice(dev) != cudaSuccess || cudaFree(0) != cudaSuccess ||
        gpu_drv_load(o.entry_points))
        MPI_Abort(MPI_COMM_WORLD, 1);
    for (int k = 0; k < NKINDS; k++) {
        int before = errors;

        if (!o.kinds[k])
            continue;
        gpu_role = kind_names[k];
        if (run_kind(&o, k, dev, local, &errors)) {
            /* A local CUDA failure (not a peer's export): stop cleanly. */
            fatal = 1;
            errors++;
            break;
        }
        if (errors == before)
            printf("mpi_ipc: rank %d (gpu %d): %s: opened %d peers x %d iterations, data ok\n",
                   rank, dev, kind_names[k], lsize - 1, o.iters);
    }
    if (fatal)
        MPI_Abort(MPI_COMM_WORLD, 1);
    MPI_Allreduce(&errors, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) {
        if (total == 0)
            printf("OK mpi_ipc ranks=%d local=%d gpus=%d mem=%s chunks=%d iters=%d drv=%s\n",
                   nranks, lsize, ngpus,
                   !o.kinds[KIND_VMM] ? "legacy" : !o.kinds[KIND_LEGACY] ? "vmm" : "all",
                   o.chunks, o.iters, o.entry_points ? "entry" : "link");
        else
            printf("FAILED mpi_ipc: %d errors\n", total);
    }
    MPI_Comm_free(&local);
    MPI_Finalize();
    return total ? 1 : 0;
}
