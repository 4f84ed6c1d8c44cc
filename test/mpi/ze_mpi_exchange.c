/* SPDX-License-Identifier: MIT */
/*
 * ze_mpi_exchange: an MPI job that shares Level Zero device buffers by IPC
 * handle, the way an application does when it trusts the handle to be a
 * value: each rank exports its buffers, sends the 64-byte handles to
 * (rank + 1) % n with MPI_Sendrecv, opens the ones it received, copies them
 * with an immediate command list and checks every byte.
 *
 * --events: each rank also exports an IPC event pool of two events with
 * event 1 signalled; its successor opens it, must read event 1 signalled
 * and signals event 0, which the owner then waits for (5 s at most).
 * --allocs 0 --events exchanges event pools only.
 *
 * --reopen: rank 0 exports --allocs buffers (16) once; rank 1 opens and
 * closes them round-robin, --iters opens in all (10000), checking a sample.
 * Knows nothing about ipcbyval.
 */
#include "test/mpi/zeapp.h"

#include <dirent.h>
#include <mpi.h>

#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TAG_HANDLES 17
#define SAMPLE_BYTES 256

struct opts {
    enum zeapp_route route;
    unsigned allocs;
    size_t size;
    unsigned iters;
    bool events, reopen, realloc, host;
};

static void die_abort(int code)
{
    /* Give the launcher's output forwarding time to pass the error line on
     * before MPI_Abort tears the job down (MPICH's hydra drops it otherwise). */
    usleep(200000);
    MPI_Abort(MPI_COMM_WORLD, code);
}

static void *alloc_buf(struct zeapp *app, const struct opts *o)
{
    return o->host ? zeapp_alloc_host(app, o->size) : zeapp_alloc_device(app, o->size);
}

/* Copy the peer's buffer in and compare it with the peer's pattern. */
static void verify(struct zeapp *app, const struct opts *o, void *remote, void *local,
                   size_t offset, size_t len, uint64_t seed, int from, unsigned a,
                   unsigned iter)
{
    unsigned got, want;
    long bad;

    zeapp_copy(app, local, (char *)remote + offset, len);
    bad = zeapp_pattern_check(local, offset, len, seed, &got, &want);
    if (bad >= 0)
        zeapp_die(app,
                  "allocation %u of rank %d, iteration %u: byte %zu is 0x%02x, "
                  "expected 0x%02x",
                  a, from, iter, offset + (size_t)bad, got, want);
}

static void open_verify_close(struct zeapp *app, const struct opts *o,
                              const ze_ipc_mem_handle_t *h, void *local, size_t offset,
                              size_t len, uint64_t seed, int from, unsigned a, unsigned iter)
{
    void *remote = NULL;
    ze_result_t r;

    r = zeapp_ipc_open(app, h, &remote);
    if (r != ZE_RESULT_SUCCESS)
        zeapp_fail(app, zeapp_ipc_open_name(app), r);
    verify(app, o, remote, local, offset, len, seed, from, a, iter);
    r = zeapp_ipc_close(app, remote);
    if (r != ZE_RESULT_SUCCESS)
        zeapp_fail(app, "zeMemCloseIpcHandle", r);
}

static void run_exchange(struct zeapp *app, const struct opts *o, int rank, int nranks)
{
    int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
    size_t nh = o->allocs + (o->events ? 1 : 0);
    ze_ipc_mem_handle_t *out = calloc(nh, sizeof(*out)), *in = calloc(nh, sizeof(*in));
    void **bufs = calloc(o->allocs + 1, sizeof(*bufs)); /* --allocs 0: events only */
    void *stage = zeapp_alloc_host(app, o->size), *local = zeapp_alloc_host(app, o->size);
    char prev_name[32], next_name[32];
    struct zeapp_pool pool;
    ze_result_t r;

    if (out == NULL || in == NULL || bufs == NULL)
        zeapp_die(app, "out of memory");
    for (unsigned a = 0; a < o->allocs; a++)
        bufs[a] = alloc_buf(app, o);
    snprintf(prev_name, sizeof(prev_name), "rank %d", prev);
    snprintf(next_name, sizeof(next_name), "rank %d", next);
    if (o->events)
        zeapp_pool_create(app, &pool);
    for (unsigned iter = 0; iter < o->iters; iter++) {
        /* --realloc: new allocations, likely at the addresses just freed. */
        for (unsigned a = 0; o->realloc && iter > 0 && a < o->allocs; a++) {
            zeapp_free(app, bufs[a]);
            bufs[a] = alloc_buf(app, o);
        }
        for (unsigned a = 0; a < o->allocs; a++) {
            zeapp_pattern(stage, 0, o->size, zeapp_seed(rank, (int)a, (int)iter));
            zeapp_copy(app, bufs[a], stage, o->size);
            r = zeapp_ipc_get(app, bufs[a], &out[a]);
            if (r != ZE_RESULT_SUCCESS)
                zeapp_fail(app, zeapp_ipc_get_name(app), r);
        }
        if (o->events) {
            ze_ipc_event_pool_handle_t ph;

            zeapp_pool_export(app, &pool, &ph);
            memcpy(out[o->allocs].data, ph.data, sizeof(ph.data));
        }
        /* The handles travel as plain bytes, as any MPI payload. */
        MPI_Sendrecv(out, (int)(nh * sizeof(*out)), MPI_BYTE, next, TAG_HANDLES, in,
                     (int)(nh * sizeof(*in)), MPI_BYTE, prev, TAG_HANDLES, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
        for (unsigned a = 0; a < o->allocs; a++)
            open_verify_close(app, o, &in[a], local, 0, o->size,
                              zeapp_seed(prev, (int)a, (int)iter), prev, a, iter);
        if (o->events) {
            ze_ipc_event_pool_handle_t ph;

            memcpy(ph.data, in[o->allocs].data, sizeof(ph.data));
            zeapp_pool_import(app, &ph, -1, prev_name);
        }
        /* Nobody refills a buffer before its reader is done with it. */
        MPI_Barrier(MPI_COMM_WORLD);
        if (o->events)
            zeapp_pool_check(app, &pool, next_name);
    }
    if (o->events)
        zeapp_pool_destroy(app, &pool);
    for (unsigned a = 0; a < o->allocs; a++)
        zeapp_free(app, bufs[a]);
    zeapp_free(app, stage);
    zeapp_free(app, local);
    free(bufs);
    free(in);
    free(out);
    printf("%s: OK %u allocations x %u iterations verified (route %s, %d ranks%s%s%s)\n",
           app->who, o->allocs, o->iters, zeapp_route_name(o->route), nranks,
           o->events ? ", events" : "", o->realloc ? ", realloc" : "",
           o->host ? ", host memory" : "");
}

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Open fds of this process: the reopen loop reports them so tests can
 * check that an importer does not accumulate descriptors. */
static int count_fds(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    while (readdir(d))
        n++;
    closedir(d);
    return n - 3; /* ".", ".." and the directory's own fd */
}

static void run_reopen(struct zeapp *app, const struct opts *o, int rank, int nranks)
{
    ze_ipc_mem_handle_t *h = calloc(o->allocs, sizeof(*h));
    void **bufs = calloc(o->allocs, sizeof(*bufs));
    size_t len = o->size < SAMPLE_BYTES ? o->size : SAMPLE_BYTES;
    ze_result_t r;

    if (h == NULL || bufs == NULL)
        zeapp_die(app, "out of memory");
    if (nranks < 2)
        zeapp_die(app, "--reopen needs at least 2 ranks");
    if (rank == 0) {
        void *stage = zeapp_alloc_host(app, o->size);

        for (unsigned a = 0; a < o->allocs; a++) {
            bufs[a] = alloc_buf(app, o);
            zeapp_pattern(stage, 0, o->size, zeapp_seed(0, (int)a, 0));
            zeapp_copy(app, bufs[a], stage, o->size);
            r = zeapp_ipc_get(app, bufs[a], &h[a]);
            if (r != ZE_RESULT_SUCCESS)
                zeapp_fail(app, zeapp_ipc_get_name(app), r);
        }
        zeapp_free(app, stage);
        MPI_Send(h, (int)(o->allocs * sizeof(*h)), MPI_BYTE, 1, TAG_HANDLES, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD); /* rank 1 is done with them */
        for (unsigned a = 0; a < o->allocs; a++)
            zeapp_free(app, bufs[a]);
        printf("%s: OK exported %u allocations once (route %s)\n", app->who, o->allocs,
               zeapp_route_name(o->route));
    } else if (rank == 1) {
        void *local = zeapp_alloc_host(app, len);
        double t0, dt;

        MPI_Recv(h, (int)(o->allocs * sizeof(*h)), MPI_BYTE, 0, TAG_HANDLES, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
        int fds_before = count_fds();
        t0 = now_s();
        for (unsigned i = 0; i < o->iters; i++) {
            unsigned a = i % o->allocs;
            /* Walk the sample through the buffer, 8-byte aligned. */
            size_t off = o->size > len ? ((size_t)i * 4104u) % (o->size - len) / 8 * 8 : 0;

            open_verify_close(app, o, &h[a], local, off, len, zeapp_seed(0, (int)a, 0), 0, a,
                              i);
        }
        dt = now_s() - t0;
        int fds_after = count_fds();
        zeapp_free(app, local);
        MPI_Barrier(MPI_COMM_WORLD);
        printf("%s: OK %u opens of %u allocations verified (route %s), %.2f us per "
               "open+copy+close; open fds before %d after %d\n",
               app->who, o->iters, o->allocs, zeapp_route_name(o->route),
               dt * 1e6 / o->iters, fds_before, fds_after);
    } else {
        MPI_Barrier(MPI_COMM_WORLD);
    }
    free(bufs);
    free(h);
}

static void usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s [--route symbol|dlsym|ddi|zex] [--allocs N] [--size BYTES]\n"
            "          [--iters K] [--events] [--realloc] [--host] [--reopen]\n",
            argv0);
    exit(2);
}

static void parse(int argc, char **argv, struct opts *o)
{
    static const struct option longopts[] = {
        {"route", required_argument, NULL, 'r'}, {"allocs", required_argument, NULL, 'a'},
        {"size", required_argument, NULL, 's'},  {"iters", required_argument, NULL, 'i'},
        {"events", no_argument, NULL, 'e'},      {"reopen", no_argument, NULL, 'o'},
        {"realloc", no_argument, NULL, 'l'},     {"host", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    long allocs = -1, iters = -1;
    int c, route;

    *o = (struct opts){.route = ZEAPP_DEFAULT_ROUTE, .size = 1 << 20};
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case 'r':
            route = zeapp_route_parse(optarg);
            if (route < 0)
                usage(argv[0]);
            o->route = (enum zeapp_route)route;
            break;
        case 'a': allocs = (long)zeapp_parse_ulong("--allocs", optarg); break;
        case 's': o->size = zeapp_parse_ulong("--size", optarg); break;
        case 'i': iters = (long)zeapp_parse_ulong("--iters", optarg); break;
        case 'e': o->events = true; break;
        case 'o': o->reopen = true; break;
        case 'l': o->realloc = true; break;
        case 'h': o->host = true; break;
        default: usage(argv[0]);
        }
    }
    o->allocs = (unsigned)(allocs >= 0 ? allocs : o->reopen ? 16 : 4);
    o->iters = (unsigned)(iters >= 0 ? iters : o->reopen ? 10000 : 2);
    if (optind != argc || (o->allocs == 0 && !o->events) || o->iters == 0 || o->size == 0 ||
        (o->reopen && (o->events || o->realloc)))
        usage(argv[0]);
}

int main(int argc, char **argv)
{
    struct zeapp app;
    struct opts o;
    int rank, nranks;
    char who[32];

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    parse(argc, argv, &o);
    snprintf(who, sizeof(who), "rank %d", rank);
    zeapp_init(&app, o.route, who, die_abort);
    if (o.reopen)
        run_reopen(&app, &o, rank, nranks);
    else
        run_exchange(&app, &o, rank, nranks);
    zeapp_fini(&app);
    MPI_Finalize();
    return 0;
}
