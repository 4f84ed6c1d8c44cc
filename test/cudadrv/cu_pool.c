/* SPDX-License-Identifier: MIT */
/*
 * cu_pool: a pool as PyTorch's expandable segments keep one, shared with a
 * fork()ed importer through cuIpcGetMemHandle / cuIpcOpenMemHandle (the
 * driver double, or a real libcuda). The exporter reserves a range far
 * larger than it maps, maps granularity-sized pages at its end as the pool
 * grows (one cuMemSetAccess per growth) and places "tensors" side by side
 * in it, across pages; a handle is asked for a tensor's pointer and the
 * importer adds the offset from the exporter's cuMemGetAddressRange base,
 * as CuPy and PyTorch do. Per --case:
 *   grow        export tensor A, then grow the pool and place B; the
 *               importer opens A --opens times (default 50), reading and
 *               checking all of A each time, and closes it;
 *   interleave  export A, grow, place and export B, grow, place and export
 *               C (a tensor over three pages); the importer holds all three
 *               open at once, then re-opens each --opens times;
 *   shrink      A and B in pages of their own, both exported, opened,
 *               checked and closed by the importer; the exporter unmaps and
 *               releases B's pages (empty_cache), waits until the memory is
 *               back (the double's ledger: nothing freed is held), then the
 *               importer opens A again (still valid) and B (refused);
 *   prune       A exported over two pages, then B over two more; the
 *               importer opens both, closes B and keeps A open; the
 *               exporter unmaps and releases B's pages: their memory must
 *               come back while A stays open (no open needs them), and A
 *               still reads right;
 *   reuse       A exported, opened and closed; every page unmapped and
 *               released page by page (empty_cache), the freed memory back;
 *               the pool grows again over the same addresses, B is placed
 *               where A was and exported: the importer reads B's bytes;
 *   big         --pages N (default 4100) pages: A exported before the pool
 *               grows to N pages, then a handle of the reservation's first
 *               page (vLLM's RANGE_START_ADDR base) and of the last
 *               tensor; the importer checks A, both ends of the pool
 *               through the first page's handle, and the last tensor.
 * shrink, prune and reuse read the double's ledger of device memory, which
 * must be shared between the two processes (CUDADRV_LEDGER=FILE).
 * The importer prints how many distinct reservations its opens returned
 * (cuPointerGetAttribute RANGE_START_ADDR): one per exporter pool. Knows
 * nothing about ipcbyval. Prints "OK cu_pool ..." or "FAILED ..."; exit 0
 * or 1 (2: usage).
 */
#include <cuda.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test/devmem/devmem.h"

CUresult cudadrvMemStats(int device, struct devmem_stats *st); /* the double's */

#define CU_TRY_PROG "cu_pool"
#include "cu_try.h"

static const char *who = "exporter";

/* A tensor: where it is, and what its exporter wrote there. */
struct tensor {
    CUipcMemHandle h;
    uint64_t off, len; /* from its handle's base (cuMemGetAddressRange) */
    uint32_t id;
    int32_t status;
};

static struct {
    CUdeviceptr base;
    size_t size, gran, mapped;
    CUmemGenericAllocationHandle *h;
    size_t npages;
    CUmemAllocationProp prop;
} pool;

static uint8_t byte_of(uint32_t id, uint64_t i)
{
    return (uint8_t)(id * 131u + i * 7u + (i >> 12));
}

static int pool_init(size_t max_pages)
{
    memset(&pool.prop, 0, sizeof(pool.prop));
    pool.prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    pool.prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    pool.prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    TRY(cuMemGetAllocationGranularity(&pool.gran, &pool.prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    pool.size = (max_pages * 4 > 64 ? max_pages * 4 : 64) * pool.gran; /* far more than mapped */
    pool.h = calloc(max_pages, sizeof(*pool.h));
    if (!pool.h)
        return 1;
    TRY(cuMemAddressReserve(&pool.base, pool.size, 0, 0, 0));
    return 0;
}

/* Map n more pages at the pool's end, one access call for them all. */
static int pool_grow(size_t n)
{
    size_t from = pool.mapped;
    for (size_t i = 0; i < n; i++) {
        CUmemGenericAllocationHandle h;
        TRY(cuMemCreate(&h, pool.gran, &pool.prop, 0));
        TRY(cuMemMap(pool.base + pool.mapped, pool.gran, 0, h, 0));
        pool.h[pool.npages++] = h;
        pool.mapped += pool.gran;
    }
    CUmemAccessDesc acc;
    memset(&acc, 0, sizeof(acc));
    acc.location = pool.prop.location;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    TRY(cuMemSetAccess(pool.base + from, pool.mapped - from, &acc, 1));
    return 0;
}

/* Unmap and release pages [first, first + n) (PyTorch unmaps page by page). */
static int pool_drop(size_t first, size_t n)
{
    for (size_t i = first; i < first + n; i++) {
        TRY(cuMemUnmap(pool.base + i * pool.gran, pool.gran));
        TRY(cuMemRelease(pool.h[i]));
        pool.h[i] = 0;
    }
    return 0;
}

/* A tensor of len bytes at pool offset at: filled, and its handle. */
static int tensor_place(struct tensor *t, uint32_t id, uint64_t at, uint64_t len)
{
    uint8_t *buf = malloc(len);
    if (!buf)
        return 1;
    for (uint64_t i = 0; i < len; i++)
        buf[i] = byte_of(id, i);
    CUdeviceptr ptr = pool.base + at, base;
    size_t bsize;
    CUresult r = cuMemcpyHtoD(ptr, buf, len);
    free(buf);
    TRY(r);
    TRY(cuIpcGetMemHandle(&t->h, ptr));
    TRY(cuMemGetAddressRange(&base, &bsize, ptr));
    t->off = ptr - base;
    t->len = len;
    t->id = id;
    return 0;
}

/* ---- importer ------------------------------------------------------------ */

static CUdeviceptr bases[64];
static int nbases;

static void note_base(CUdeviceptr p)
{
    CUdeviceptr b = 0;
    if (cuPointerGetAttribute(&b, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, p) != CUDA_SUCCESS)
        return;
    for (int i = 0; i < nbases; i++)
        if (bases[i] == b)
            return;
    if (nbases < 64)
        bases[nbases++] = b;
}

/* Bytes [from, from + n) of t through its open pointer p: as written. */
static int check_at(const struct tensor *t, CUdeviceptr p, uint64_t from, uint64_t n)
{
    uint8_t *buf = malloc(n);
    if (!buf)
        return 1;
    CUresult r = cuMemcpyDtoH(buf, p + t->off + from, n);
    for (uint64_t i = 0; r == CUDA_SUCCESS && i < n; i++)
        if (buf[i] != byte_of(t->id, from + i)) {
            printf("FAILED cu_pool importer: tensor %u byte %llu reads 0x%02x, not 0x%02x\n",
                   t->id, (unsigned long long)(from + i), buf[i], byte_of(t->id, from + i));
            free(buf);
            return 1;
        }
    free(buf);
    TRY(r);
    return 0;
}

static int open_check(const struct tensor *t, CUdeviceptr *p_p)
{
    TRY(cuIpcOpenMemHandle(p_p, t->h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    note_base(*p_p);
    return check_at(t, *p_p, 0, t->len);
}

static int reopen(const struct tensor *t, int opens)
{
    for (int i = 0; i < opens; i++) {
        CUdeviceptr p;
        if (open_check(t, &p))
            return 1;
        TRY(cuIpcCloseMemHandle(p));
    }
    return 0;
}

/* ---- the cases -------------------------------------------------------------- */

struct link {
    int to_imp, from_imp; /* exporter's ends */
    int from_exp, to_exp; /* importer's ends */
};

static int send_all(int fd, const void *b, size_t n)
{
    return write(fd, b, n) == (ssize_t)n ? 0 : 1;
}

static int recv_all(int fd, void *b, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t k = read(fd, (char *)b + got, n - got);
        if (k <= 0)
            return 1;
        got += (size_t)k;
    }
    return 0;
}

/* The double's ledger: bytes freed by their allocator, held by importers. */
static int wait_freed_back(void)
{
    struct devmem_stats st;
    if (cudadrvMemStats(0, &st) != CUDA_SUCCESS || !st.shared) {
        printf("FAILED cu_pool exporter: the double's ledger is not shared between the two "
               "processes (set CUDADRV_LEDGER): what the importer holds cannot be seen\n");
        return 1;
    }
    for (int i = 0; i < 1000; i++) { /* 10 s: the importer's watcher runs on its own */
        if (cudadrvMemStats(0, &st) == CUDA_SUCCESS && st.freed_held == 0)
            return 0;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    printf("FAILED cu_pool exporter: %llu freed bytes still held by the importer after 10 s\n",
           (unsigned long long)st.freed_held);
    return 1;
}

static int exporter(const char *c, size_t pages, const struct link *l)
{
    struct tensor t[3];
    char go;
    size_t g = 0;
    memset(t, 0, sizeof(t));
    if (pool_init(pages + 8))
        return 1;
    g = pool.gran;
    if (!strcmp(c, "grow")) {
        /* A: 1.5 pages from half a page in; then the pool grows under it. */
        if (pool_grow(2) || tensor_place(&t[0], 1, g / 2, g + g / 2) || pool_grow(6) ||
            tensor_place(&t[1], 2, 2 * g, 3 * g))
            return 1;
        return send_all(l->to_imp, t, sizeof(t[0])) || recv_all(l->from_imp, &go, 1);
    }
    if (!strcmp(c, "interleave")) {
        if (pool_grow(2) || tensor_place(&t[0], 1, 0, g + g / 4) || pool_grow(2) ||
            tensor_place(&t[1], 2, g + g / 2, 2 * g) || pool_grow(3) ||
            tensor_place(&t[2], 3, 4 * g - g / 4, 2 * g + g / 2))
            return 1;
        return send_all(l->to_imp, t, 3 * sizeof(t[0])) || recv_all(l->from_imp, &go, 1);
    }
    if (!strcmp(c, "shrink")) {
        if (pool_grow(4) || tensor_place(&t[0], 1, 0, g + g / 2) ||
            tensor_place(&t[1], 2, 2 * g, 2 * g))
            return 1;
        if (send_all(l->to_imp, t, 2 * sizeof(t[0])) || recv_all(l->from_imp, &go, 1))
            return 1;
        if (pool_drop(2, 2) || wait_freed_back()) /* B's pages: importers release theirs */
            return 1;
        return send_all(l->to_imp, &go, 1) || recv_all(l->from_imp, &go, 1);
    }
    if (!strcmp(c, "prune")) {
        if (pool_grow(2) || tensor_place(&t[0], 1, 0, g + g / 2) || pool_grow(2) ||
            tensor_place(&t[1], 2, 2 * g, 2 * g))
            return 1;
        if (send_all(l->to_imp, t, 2 * sizeof(t[0])) || recv_all(l->from_imp, &go, 1))
            return 1;
        if (pool_drop(2, 2) || wait_freed_back())
            return 1;
        return send_all(l->to_imp, &go, 1) || recv_all(l->from_imp, &go, 1);
    }
    if (!strcmp(c, "reuse")) {
        if (pool_grow(4) || tensor_place(&t[0], 1, g / 2, 3 * g))
            return 1;
        if (send_all(l->to_imp, t, sizeof(t[0])) || recv_all(l->from_imp, &go, 1))
            return 1;
        if (pool_drop(0, 4) || wait_freed_back())
            return 1;
        pool.mapped = 0;
        if (pool_grow(4) || tensor_place(&t[1], 2, g / 2, 3 * g))
            return 1;
        return send_all(l->to_imp, &t[1], sizeof(t[1])) || recv_all(l->from_imp, &go, 1);
    }
    /* big: A exported while the pool is small, then growth to `pages`. */
    if (pool_grow(2) || tensor_place(&t[0], 1, 0, g + 5))
        return 1;
    for (size_t done = 2; done < pages; done += 512)
        if (pool_grow(pages - done < 512 ? pages - done : 512))
            return 1;
    /* The first page's handle (the reservation's start), then a tensor in
     * the last two pages; markers at both ends of the pool. */
    uint64_t last = (uint64_t)(pages - 2) * g;
    if (tensor_place(&t[2], 3, last, 2 * g))
        return 1;
    t[1] = t[0];
    TRY(cuIpcGetMemHandle(&t[1].h, pool.base));
    return send_all(l->to_imp, t, 3 * sizeof(t[0])) || recv_all(l->from_imp, &go, 1);
}

static int importer(const char *c, int opens, size_t pages, const struct link *l)
{
    struct tensor t[3];
    char go = 1;
    CUdeviceptr p[3];
    who = "importer";
    if (!strcmp(c, "grow")) {
        if (recv_all(l->from_exp, t, sizeof(t[0])) || reopen(&t[0], opens))
            return 1;
        printf("OK cu_pool grow: %d opens of a tensor exported before the pool grew, all read "
               "right; %d reservation(s)\n", opens, nbases);
    } else if (!strcmp(c, "interleave")) {
        if (recv_all(l->from_exp, t, 3 * sizeof(t[0])))
            return 1;
        for (int i = 0; i < 3; i++)
            if (open_check(&t[i], &p[i]))
                return 1;
        for (int i = 0; i < 3; i++)
            TRY(cuIpcCloseMemHandle(p[i]));
        for (int i = 0; i < 3; i++)
            if (reopen(&t[i], opens))
                return 1;
        printf("OK cu_pool interleave: 3 tensors exported between growths, open at once and "
               "re-opened %d times each, all read right; %d reservation(s)\n", opens, nbases);
    } else if (!strcmp(c, "shrink")) {
        if (recv_all(l->from_exp, t, 2 * sizeof(t[0])) || reopen(&t[0], 1) || reopen(&t[1], 1))
            return 1;
        if (send_all(l->to_exp, &go, 1) || recv_all(l->from_exp, &go, 1))
            return 1;
        if (reopen(&t[0], 1))
            return 1;
        CUdeviceptr q;
        CUresult r = cuIpcOpenMemHandle(&q, t[1].h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
        if (r == CUDA_SUCCESS) {
            printf("FAILED cu_pool importer: the handle of unmapped pages opened\n");
            return 1;
        }
        printf("OK cu_pool shrink: the unmapped pages' memory came back; the other tensor "
               "re-opens and reads right; the unmapped one is refused\n");
    } else if (!strcmp(c, "prune")) {
        if (recv_all(l->from_exp, t, 2 * sizeof(t[0])) || open_check(&t[0], &p[0]) ||
            open_check(&t[1], &p[1]))
            return 1;
        TRY(cuIpcCloseMemHandle(p[1]));
        if (send_all(l->to_exp, &go, 1) || recv_all(l->from_exp, &go, 1) ||
            check_at(&t[0], p[0], 0, t[0].len))
            return 1;
        TRY(cuIpcCloseMemHandle(p[0]));
        printf("OK cu_pool prune: pages unmapped by the exporter came back while another "
               "tensor of the pool stayed open, and it reads right; %d reservation(s)\n", nbases);
    } else if (!strcmp(c, "reuse")) {
        if (recv_all(l->from_exp, t, sizeof(t[0])) || reopen(&t[0], 1) ||
            send_all(l->to_exp, &go, 1) || recv_all(l->from_exp, &t[1], sizeof(t[1])) ||
            reopen(&t[1], opens))
            return 1;
        printf("OK cu_pool reuse: a pool emptied and grown again over the same addresses: the "
               "new tensor reads right %d times; %d reservation(s)\n", opens, nbases);
    } else {
        if (recv_all(l->from_exp, t, 3 * sizeof(t[0])) || reopen(&t[0], opens))
            return 1;
        /* The first page's handle reaches the last page too. */
        struct tensor whole = t[1];
        whole.id = 3;
        whole.off = t[2].off + (uint64_t)(pages - 2) * (t[2].len / 2);
        whole.len = t[2].len;
        if (open_check(&t[1], &p[0]) || check_at(&whole, p[0], 0, whole.len))
            return 1;
        TRY(cuIpcCloseMemHandle(p[0]));
        if (reopen(&t[2], opens))
            return 1;
        printf("OK cu_pool big: %zu pages; a tensor exported before the growth, the pool's "
               "first page through its last, and the last tensor read right; %d "
               "reservation(s)\n", pages, nbases);
    }
    return send_all(l->to_exp, &go, 1);
}

int main(int argc, char **argv)
{
    const char *c = NULL;
    int opens = 50;
    size_t pages = 4100;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--case"))
            c = argv[i + 1];
        else if (!strcmp(argv[i], "--opens"))
            opens = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--pages"))
            pages = (size_t)atol(argv[i + 1]);
    }
    setvbuf(stdout, NULL, _IOLBF, 0); /* the exporter leaves with _exit */
    if (!c || opens < 1 || pages < 4 ||
        (strcmp(c, "grow") && strcmp(c, "interleave") && strcmp(c, "shrink") &&
         strcmp(c, "prune") && strcmp(c, "reuse") && strcmp(c, "big"))) {
        fprintf(stderr, "usage: cu_pool --case grow|interleave|shrink|prune|reuse|big [--opens N] "
                        "[--pages N]\n");
        return 2;
    }
    /* Every page is an fd in the exporter, its export another, its import
     * one in the importer. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    int a[2], b[2];
    if (pipe(a) < 0 || pipe(b) < 0)
        return 1;
    fflush(NULL);
    pid_t pid = fork(); /* before any CUDA call */
    if (pid < 0)
        return 1;
    CUdevice dev;
    CUcontext ctx;
    struct link l = {a[1], b[0], a[0], b[1]};
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
        cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
        printf("FAILED cu_pool %s: no CUDA context\n", pid ? "importer" : "exporter");
        return 1;
    }
    if (pid == 0) {
        close(a[0]); /* each side holds only its ends: a peer that dies is an EOF */
        close(b[1]);
        _exit(exporter(c, pages, &l));
    }
    close(a[1]);
    close(b[0]);
    int rc = importer(c, opens, pages, &l), st = 0;
    close(a[0]);
    close(b[1]);
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        printf("FAILED cu_pool: the exporter failed (status 0x%x)\n", st);
        rc = 1;
    }
    return rc;
}
