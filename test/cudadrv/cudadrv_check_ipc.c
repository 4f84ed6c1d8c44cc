/* SPDX-License-Identifier: MIT */
/* cudadrv_check_ipc.c - IPC across processes on the double: legacy
 * handles by value, the VMM fd reached with pidfd_getfd, the importer's
 * primary-context reset, and the churn of the lifetime issue
 * (cudadrv_check.h). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test/cudadrv/cudadrv_check.h"
#include "test/devmem/devmem.h"

/* The importer resets its primary context while a mapping is open: the
 * mapping is gone (driver 580: NOT_FOUND, close INVALID_VALUE), the handle
 * value stays, and after a retain the same handle opens afresh. */
static void check_import_reset(const CUipcMemHandle *h, CUcontext ctx)
{
    CUdeviceptr p = 0, q = 0, base;
    CUcontext again = NULL, cur = NULL;
    size_t size;
    unsigned flags;
    int active = -1;
    char c = 0;

    CHECK(cuIpcOpenMemHandle(&p, *h, 0) == CUDA_SUCCESS);
    CHECK(cuDevicePrimaryCtxReset(0) == CUDA_SUCCESS);
    CHECK(cuDevicePrimaryCtxGetState(0, &flags, &active) == CUDA_SUCCESS && active == 0);
    CHECK(cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == ctx);
    CHECK(cuMemcpyDtoH(&c, p, 1) == CUDA_ERROR_CONTEXT_IS_DESTROYED);
    CHECK(cuDevicePrimaryCtxRetain(&again, 0) == CUDA_SUCCESS && again == ctx);
    CHECK(cuMemGetAddressRange(&base, &size, p) == CUDA_ERROR_NOT_FOUND);
    CHECK(cuIpcCloseMemHandle(p) == CUDA_ERROR_INVALID_VALUE);
    CHECK(cuMemcpyDtoH(&c, p, 1) == CUDA_ERROR_ILLEGAL_ADDRESS);
    CHECK(cuMemcpy((CUdeviceptr)(uintptr_t)&c, p, 1) == CUDA_ERROR_ILLEGAL_ADDRESS);
    CHECK(cuIpcOpenMemHandle(&q, *h, 0) == CUDA_SUCCESS && q != p);
    CHECK(cuMemcpyDtoH(&c, q + 4999, 1) == CUDA_SUCCESS && c == 'L');
    CHECK(cuIpcCloseMemHandle(q) == CUDA_SUCCESS);
    /* The reset kept the retain count: the extra retain goes again. */
    CHECK(cuDevicePrimaryCtxRelease(0) == CUDA_SUCCESS);
}

/* What the exporting child of check_cross_process sends. */
struct xmsg {
    CUipcMemHandle live, freed;
    int pid, vmm_fd;
    char live_byte, vmm_byte;
};

static void xchild(int wfd, int rfd)
{
    CUmemAllocationProp prop = vmm_prop(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    CUmemGenericAllocationHandle h;
    CUdeviceptr a, b;
    CUcontext ctx;
    struct xmsg m;
    char c;

    memset(&m, 0, sizeof(m));
    if (cuInit(0) || cuDevicePrimaryCtxRetain(&ctx, 0) || cuCtxSetCurrent(ctx) ||
        cuMemAlloc(&a, 5000) || cuMemAlloc(&b, 5000) || cuMemsetD8(a, 'L', 5000) ||
        cuIpcGetMemHandle(&m.live, a) || cuIpcGetMemHandle(&m.freed, b) || cuMemFree(b) ||
        cuMemCreate(&h, 2u << 20, &prop, 0) ||
        cuMemExportToShareableHandle(&m.vmm_fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0))
        _exit(1);
    m.pid = (int)getpid();
    if (write(wfd, &m, sizeof(m)) != (ssize_t)sizeof(m) || read(rfd, &c, 1) < 0)
        _exit(1);
    _exit(0);
}

/* Legacy handles by value across processes, and the VMM fd reached with
 * pidfd_getfd the way ipcbyval does. Runs before this process's cuInit. */
void check_cross_process(void)
{
    CUmemGenericAllocationHandle h;
    CUipcMemHandle none;
    CUdeviceptr p, q;
    CUcontext ctx;
    struct xmsg m;
    int to_parent[2], to_child[2], status = 0, pidfd, fd;
    char c = 0;
    pid_t pid;

    CHECK(pipe(to_parent) == 0 && pipe(to_child) == 0);
    pid = fork();
    if (pid == 0)
        xchild(to_parent[1], to_child[0]);
    CHECK(read(to_parent[0], &m, sizeof(m)) == (ssize_t)sizeof(m));
    CHECK(cuInit(0) == CUDA_SUCCESS);
    CHECK(cuIpcOpenMemHandle(&p, m.live, 0) == CUDA_ERROR_INVALID_CONTEXT);
    CHECK(cuIpcGetMemHandle(&none, 0) == CUDA_ERROR_INVALID_CONTEXT);
    CHECK(cuDevicePrimaryCtxRetain(&ctx, 0) == CUDA_SUCCESS && cuCtxSetCurrent(ctx) == 0);
    CHECK(cuIpcOpenMemHandle(&p, m.live, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) == CUDA_SUCCESS);
    CHECK(cuIpcOpenMemHandle(&q, m.live, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) == CUDA_SUCCESS &&
          q == p);
    CHECK(cuMemcpyDtoH(&c, p + 4999, 1) == CUDA_SUCCESS && c == 'L');
    CHECK(cuIpcCloseMemHandle(p + 1) == CUDA_ERROR_INVALID_VALUE);
    CHECK(cuIpcCloseMemHandle(q) == CUDA_SUCCESS && cuIpcCloseMemHandle(p) == CUDA_SUCCESS);
    CHECK(cuIpcCloseMemHandle(p) == CUDA_ERROR_INVALID_VALUE);
    CHECK(cuIpcOpenMemHandle(&p, m.freed, 0) == CUDA_ERROR_INVALID_VALUE);
    check_import_reset(&m.live, ctx);
    pidfd = (int)syscall(SYS_pidfd_open, m.pid, 0);
    fd = pidfd < 0 ? -1 : (int)syscall(SYS_pidfd_getfd, pidfd, m.vmm_fd, 0);
    if (fd < 0) {
        printf("cudadrv_check: pidfd_getfd unavailable here, VMM fd import not checked\n");
    } else {
        CHECK(cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd,
                                             CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) == 0);
        CHECK(cuMemRelease(h) == CUDA_SUCCESS);
        close(fd);
    }
    if (pidfd >= 0)
        close(pidfd);
    CHECK(cuCtxSetCurrent(NULL) == CUDA_SUCCESS);
    CHECK(write(to_child[1], "x", 1) == 1);
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    close(to_parent[0]);
    close(to_parent[1]);
    close(to_child[0]);
    close(to_child[1]);
}

/*
 * The churn the lifetime issue is about, with exporter and importer in two
 * children: the exporter allocates 24 MiB of 64, shares it, the importer
 * opens it and (hold = 0) closes it, the exporter frees it; 6 rounds. When
 * the importer closes, every round fits. When it holds its mappings (as a
 * cache that keeps closed mappings would), the exporter's freed memory
 * stays allocated: visible as freed_held from this third process, and the
 * third round's cuMemAlloc fails with CUDA_ERROR_OUT_OF_MEMORY. The memory
 * comes back when the importer exits without closing. Runs before this
 * process's cuInit (the children initialise their own).
 */
#define CHURN_ROUNDS 6
#define CHURN_SIZE (24 * MiB)

struct churn_msg {
    CUresult rc; /* the exporter's cuMemAlloc */
    CUipcMemHandle handle;
    size_t free_after; /* exporter's cuMemGetInfo after its free */
};

static void churn_exporter(int wfd, int rfd)
{
    CUcontext ctx;
    CUdeviceptr p;
    struct churn_msg m;
    size_t tot;
    char c;

    if (cuInit(0) || cuDevicePrimaryCtxRetain(&ctx, 0) || cuCtxSetCurrent(ctx))
        _exit(1);
    for (int i = 0; i < CHURN_ROUNDS; i++) {
        memset(&m, 0, sizeof(m));
        m.rc = cuMemAlloc(&p, CHURN_SIZE);
        if (m.rc == CUDA_SUCCESS && (cuMemsetD8(p, (unsigned char)('a' + i), CHURN_SIZE) ||
                                     cuIpcGetMemHandle(&m.handle, p)))
            _exit(1);
        if (write(wfd, &m, sizeof(m)) != (ssize_t)sizeof(m))
            _exit(1);
        if (m.rc != CUDA_SUCCESS)
            _exit(0);
        if (read(rfd, &c, 1) != 1 || cuMemFree(p) || cuMemGetInfo(&m.free_after, &tot))
            _exit(1);
        if (write(wfd, &m.free_after, sizeof(m.free_after)) != (ssize_t)sizeof(m.free_after))
            _exit(1);
    }
    _exit(0);
}

static void churn_importer(int hold, int rfd, int wfd)
{
    CUcontext ctx;
    CUdeviceptr p;
    struct churn_msg m;
    char c;

    if (cuInit(0) || cuDevicePrimaryCtxRetain(&ctx, 0) || cuCtxSetCurrent(ctx))
        _exit(1);
    for (int i = 0; i < CHURN_ROUNDS; i++) {
        if (read(rfd, &m, sizeof(m)) != (ssize_t)sizeof(m))
            _exit(1);
        if (m.rc != CUDA_SUCCESS)
            break;
        if (cuIpcOpenMemHandle(&p, m.handle, 0) || cuMemcpyDtoH(&c, p + CHURN_SIZE - 1, 1) ||
            c != 'a' + i || (!hold && cuIpcCloseMemHandle(p)))
            _exit(1);
        if (write(wfd, "k", 1) != 1)
            _exit(1);
    }
    /* Waits to be told to exit: the parent looks at the ledger first. */
    read(rfd, &c, 1);
    _exit(0);
}

void check_churn(int hold)
{
    CUresult (*stats)(int, struct devmem_stats *);
    int e2p[2], p2e[2], i2p[2], p2i[2], rounds = 0, st_e = 0, st_i = 0, ok = 1;
    struct devmem_stats st;
    struct churn_msg m;
    CUresult last = CUDA_SUCCESS;
    size_t free_after;
    pid_t ex, im;
    char c;

    *(void **)&stats = sym("cudadrvMemStats");
    CHECK(stats != NULL && pipe(e2p) == 0 && pipe(p2e) == 0 && pipe(i2p) == 0 && pipe(p2i) == 0);
    if (!stats)
        return;
    if ((ex = fork()) == 0)
        churn_exporter(e2p[1], p2e[0]);
    if ((im = fork()) == 0)
        churn_importer(hold, p2i[0], i2p[1]);
    for (int i = 0; i < CHURN_ROUNDS; i++) {
        if (read(e2p[0], &m, sizeof(m)) != (ssize_t)sizeof(m)) {
            ok = 0;
            break;
        }
        last = m.rc;
        if (write(p2i[1], &m, sizeof(m)) != (ssize_t)sizeof(m)) /* relayed */
            ok = 0;
        if (m.rc != CUDA_SUCCESS)
            break;
        if (read(i2p[0], &c, 1) != 1 || write(p2e[1], "k", 1) != 1 ||
            read(e2p[0], &free_after, sizeof(free_after)) != (ssize_t)sizeof(free_after)) {
            ok = 0;
            break;
        }
        rounds++;
        /* Natively the exporter's free gives the memory back at once. */
        if (!hold && free_after != TOTAL_MEM)
            ok = 0;
        if (hold && free_after != TOTAL_MEM - (size_t)rounds * CHURN_SIZE)
            ok = 0;
    }
    CHECK(ok);
    CHECK(stats(0, &st) == CUDA_SUCCESS);
    if (hold) {
        CHECK(rounds == 2 && last == CUDA_ERROR_OUT_OF_MEMORY);
        CHECK(st.freed_held == 2 * CHURN_SIZE && st.used == 2 * CHURN_SIZE);
    } else {
        CHECK(rounds == CHURN_ROUNDS && last == CUDA_SUCCESS);
        CHECK(st.used == 0 && st.freed_held == 0);
    }
    CHECK(write(p2i[1], "x", 1) == 1);
    CHECK(waitpid(ex, &st_e, 0) == ex && WIFEXITED(st_e) && WEXITSTATUS(st_e) == 0);
    CHECK(waitpid(im, &st_i, 0) == im && WIFEXITED(st_i) && WEXITSTATUS(st_i) == 0);
    /* The importer exited holding its mappings: the kernel released them. */
    CHECK(stats(0, &st) == CUDA_SUCCESS && st.used == 0 && st.freed_held == 0 && st.allocs == 0);
    for (int i = 0; i < 2; i++) {
        close(e2p[i]);
        close(p2e[i]);
        close(i2p[i]);
        close(p2i[i]);
    }
}
