/* SPDX-License-Identifier: MIT */
/*
 * cu_life: CUDA IPC lifetimes that a cache must not change, against the
 * driver double (or a real libcuda). The exporter allocates (--mem legacy:
 * cuMemAlloc; vmm: cuMemCreate, shareable by value only under ipcbyval),
 * fills and shares a handle with a fork()ed importer, which opens, checks,
 * closes and then, per --case:
 *   double-close  closes again (CUDA_ERROR_INVALID_VALUE from the driver),
 *                 then opens again: the data must be right;
 *   context       does it in a context of its own, destroys it, creates a
 *                 new one (the driver hands out the same handle value) and
 *                 opens again;
 *   reset         resets the primary context (cudaDeviceReset), opens
 *                 with it current (inactive: the result is printed),
 *                 retains it again (the same handle value) and opens
 *                 again;
 *   three         three allocations, all open at once, then closed (with
 *                 IPCBYVAL_CACHE_SIZE=2 the third is handed out uncached);
 *   exporter-destroy, exporter-reset, exporter-release
 *                 the exporter's context ends while the importer holds one
 *                 mapping open and one closed (cuCtxDestroy of a context
 *                 of its own; cuDevicePrimaryCtxReset; the last
 *                 cuDevicePrimaryCtxRelease): the importer prints what its
 *                 close, a re-open (its data checked when it succeeds) and
 *                 (on the driver double) the driver's count of imports
 *                 held then returned, for the caller to compare natively
 *                 and under ipcbyval.
 * Knows nothing about ipcbyval. Prints "OK cu_life ..." or "FAILED ...".
 */
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#undef cuCtxCreate
#undef cuCtxDestroy
#undef cuDevicePrimaryCtxReset
#undef cuDevicePrimaryCtxRelease
/* CUDA 13's cuda.h declares only cuCtxCreate_v4; libcuda exports _v2. */
CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);

#define SIZE (2u << 20)
#define CU_TRY_PROG "cu_life"
#include "cu_try.h"

static const char *who = "exporter";
static unsigned char pattern[SIZE];

static int open_check(const CUipcMemHandle *h, CUdeviceptr *p)
{
    static unsigned char got[SIZE];
    TRY(cuIpcOpenMemHandle_v2(p, *h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    TRY(cuMemcpyDtoH_v2(got, *p, SIZE));
    if (memcmp(got, pattern, SIZE) != 0) {
        printf("cu_life: importer: wrong data\n");
        return 1;
    }
    return 0;
}

static const char *err_name(CUresult r)
{
    const char *n = NULL;
    cuGetErrorName(r, &n);
    return n ? n : "?";
}

/* The driver double's count of IPC imports this process holds (its
 * test-only entry), after up to 5 s for it to reach 0; -1 elsewhere. */
static long imports_held(void)
{
    CUresult (*stats)(uint64_t *, uint64_t *);
    *(void **)&stats = dlsym(RTLD_DEFAULT, "cudadrvIpcStats");
    uint64_t live = 0;
    for (int i = 0; stats && i < 500; i++) {
        if (stats(&live, NULL) != CUDA_SUCCESS)
            return -1;
        if (!live)
            break;
        usleep(10000);
    }
    return stats ? (long)live : -1;
}

/* The exporter's context ends while this importer holds one mapping of
 * its memory open and one closed (cached under ipcbyval): what the close,
 * a re-open and the driver's count of imports say then. */
static int exporter_gone(int rfd, int wfd, const CUipcMemHandle *h)
{
    CUdeviceptr p;
    char go = 1;
    if (open_check(h, &p))
        return 1;
    TRY(cuIpcCloseMemHandle(p));
    if (open_check(h, &p))
        return 1;
    if (write(wfd, &go, 1) != 1 || read(rfd, &go, 1) != 1) /* its context ends */
        return 1;
    CUresult closed = cuIpcCloseMemHandle(p);
    CUresult reopened = cuIpcOpenMemHandle_v2(&p, *h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    int wrong = 0;
    if (reopened == CUDA_SUCCESS) { /* the memory lives on: its data too */
        static unsigned char got[SIZE];
        wrong = cuMemcpyDtoH_v2(got, p, SIZE) != CUDA_SUCCESS || memcmp(got, pattern, SIZE) != 0;
        TRY(cuIpcCloseMemHandle(p));
    }
    printf("cu_life: after the exporter's context ended: close %s, re-open %s%s, imports held %ld\n",
           err_name(closed), err_name(reopened), wrong ? " with wrong data" : "", imports_held());
    return wrong;
}

static int importer(int rfd, int wfd, const char *kase)
{
    CUipcMemHandle h;
    CUdevice dev;
    CUcontext ctx, again;
    CUdeviceptr p;
    who = "importer";
    if (read(rfd, &h, sizeof(h)) != sizeof(h))
        return 1;
    TRY(cuInit(0));
    TRY(cuDeviceGet(&dev, 0));
    if (!strcmp(kase, "three")) { /* all open at once (IPCBYVAL_CACHE_SIZE=2) */
        CUipcMemHandle hs[3] = {h};
        CUdeviceptr ps[3];
        TRY(cuDevicePrimaryCtxRetain(&ctx, dev));
        TRY(cuCtxSetCurrent(ctx));
        for (int i = 1; i < 3; i++)
            if (read(rfd, &hs[i], sizeof(hs[i])) != sizeof(hs[i]))
                return 1;
        for (int i = 0; i < 3; i++)
            if (open_check(&hs[i], &ps[i]))
                return 1;
        for (int i = 0; i < 3; i++)
            TRY(cuIpcCloseMemHandle(ps[i]));
        printf("cu_life: three handles open at once and closed\n");
        return 0;
    }
    if (!strncmp(kase, "exporter-", 9)) {
        TRY(cuDevicePrimaryCtxRetain(&ctx, dev));
        TRY(cuCtxSetCurrent(ctx));
        return exporter_gone(rfd, wfd, &h);
    }
    if (!strcmp(kase, "context")) {
        TRY(cuCtxCreate_v2(&ctx, 0, dev));
    } else {
        TRY(cuDevicePrimaryCtxRetain(&ctx, dev));
        TRY(cuCtxSetCurrent(ctx));
    }
    if (open_check(&h, &p))
        return 1;
    TRY(cuIpcCloseMemHandle(p));
    if (!strcmp(kase, "double-close")) {
        CUresult r = cuIpcCloseMemHandle(p);
        const char *n = NULL;
        cuGetErrorName(r, &n);
        printf("cu_life: second close: %s\n", n ? n : "?");
        if (r != CUDA_ERROR_INVALID_VALUE)
            return 1;
        again = ctx;
    } else if (!strcmp(kase, "context")) {
        TRY(cuCtxDestroy_v2(ctx));
        TRY(cuCtxCreate_v2(&again, 0, dev));
    } else {
        TRY(cuDevicePrimaryCtxReset_v2(dev));
        /* Still current, inactive: what an open with it says. */
        CUresult dead = cuIpcOpenMemHandle_v2(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
        printf("cu_life: open with the reset context current: %s\n", err_name(dead));
        if (dead == CUDA_SUCCESS)
            cuIpcCloseMemHandle(p);
        TRY(cuDevicePrimaryCtxRetain(&again, dev));
        TRY(cuCtxSetCurrent(again));
    }
    printf("cu_life: context %s the old handle value\n", again == ctx ? "has" : "does not have");
    if (open_check(&h, &p))
        return 1;
    TRY(cuIpcCloseMemHandle(p));
    return 0;
}

/* "three" shares three allocations, kept open at once by the importer. */
static int nhandles(const char *kase)
{
    return strcmp(kase, "three") ? 1 : 3;
}

/* A new allocation with the pattern, and its handle. */
static int share(int vmm, CUipcMemHandle *h)
{
    CUdeviceptr p = 0;
    size_t len = SIZE;
    if (vmm) {
        CUmemGenericAllocationHandle gh;
        CUmemAllocationProp prop;
        CUmemAccessDesc acc;
        memset(&prop, 0, sizeof(prop));
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        TRY(cuMemAddressReserve(&p, len, 0, 0, 0));
        TRY(cuMemCreate(&gh, len, &prop, 0));
        TRY(cuMemMap(p, len, 0, gh, 0));
        memset(&acc, 0, sizeof(acc));
        acc.location = prop.location;
        acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        TRY(cuMemSetAccess(p, len, &acc, 1));
    } else {
        TRY(cuMemAlloc_v2(&p, len));
    }
    TRY(cuMemcpyHtoD_v2(p, pattern, SIZE));
    TRY(cuIpcGetMemHandle(h, p));
    return 0;
}

/* The exporter's context, made current: its own for exporter-destroy. */
static int exporter_ctx(const char *kase, CUdevice dev, CUcontext *ctx)
{
    if (!strcmp(kase, "exporter-destroy")) {
        TRY(cuCtxCreate_v2(ctx, 0, dev));
        return 0;
    }
    TRY(cuDevicePrimaryCtxRetain(ctx, dev));
    TRY(cuCtxSetCurrent(*ctx));
    return 0;
}

/* End the exporter's context once the importer is ready (exporter-*). */
static int exporter_end(const char *kase, CUdevice dev, CUcontext ctx, int rfd, int wfd)
{
    char go = 1;
    if (strncmp(kase, "exporter-", 9))
        return 0;
    if (read(rfd, &go, 1) != 1)
        return 1;
    if (!strcmp(kase, "exporter-destroy"))
        TRY(cuCtxDestroy_v2(ctx));
    else if (!strcmp(kase, "exporter-reset"))
        TRY(cuDevicePrimaryCtxReset_v2(dev));
    else
        TRY(cuDevicePrimaryCtxRelease_v2(dev)); /* the only retain: the last */
    return write(wfd, &go, 1) == 1 ? 0 : 1;
}

int main(int argc, char **argv)
{
    const char *kase = argc > 2 && !strcmp(argv[1], "--case") ? argv[2] : "double-close";
    int vmm = argc > 4 && !strcmp(argv[3], "--mem") && !strcmp(argv[4], "vmm");
    for (size_t i = 0; i < SIZE; i++)
        pattern[i] = (unsigned char)(i * 7 + (i >> 12));
    int pfd[2], done[2], back[2];
    if (pipe(pfd) != 0 || pipe(done) != 0 || pipe(back) != 0)
        return 2;
    pid_t child = fork(); /* before cuInit */
    if (child == 0) {
        close(pfd[1]); /* an exporter that fails before sending: EOF here */
        close(done[0]);
        close(back[0]);
        int rc = importer(pfd[0], back[1], kase);
        fflush(stdout); /* _exit flushes nothing */
        (void)!write(done[1], &rc, sizeof(rc));
        _exit(rc);
    }
    close(pfd[0]);
    close(done[1]);
    close(back[1]);
    CUdevice dev;
    CUcontext ctx;
    TRY(cuInit(0));
    TRY(cuDeviceGet(&dev, 0));
    if (exporter_ctx(kase, dev, &ctx))
        return 1;
    for (int i = 0; i < nhandles(kase); i++) {
        CUipcMemHandle h;
        if (share(vmm, &h) || write(pfd[1], &h, sizeof(h)) != sizeof(h))
            return 1;
    }
    if (exporter_end(kase, dev, ctx, back[0], pfd[1]))
        return 1;
    int rc = 1, st = 0;
    if (read(done[0], &rc, sizeof(rc)) != sizeof(rc))
        rc = 1;
    waitpid(child, &st, 0);
    if (rc || !WIFEXITED(st) || WEXITSTATUS(st)) {
        printf("FAILED cu_life %s %s\n", kase, vmm ? "vmm" : "legacy");
        return 1;
    }
    printf("OK cu_life %s %s\n", kase, vmm ? "vmm" : "legacy");
    return 0;
}
