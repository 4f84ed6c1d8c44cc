/* SPDX-License-Identifier: MIT */
/*
 * vmm_cold: the first open of a VMM reservation of N chunks of 2 MiB, in
 * a fresh importer (a fork child's exporter makes it; the importer, the
 * parent, has met nobody before).
 *
 *   vmm_cold --chunks N --mode byval
 *       the exporter sends cuIpcGetMemHandle of the reservation (under
 *       ipcbyval a by-value handle naming its manifest); the importer
 *       times cuIpcOpenMemHandle (IPCBYVAL_STATS splits it into fetch,
 *       import and map): "open_us T".
 *   vmm_cold --chunks N --mode byval --exporters 2
 *       the same, then the first open of a second exporter's reservation
 *       in the now warm importer: "open2_us T" (what first contact costs
 *       per exporter, without what it costs once per process: the
 *       library's first steps, its watcher thread, the first faults).
 *       Each open's minor page faults: "open_faults F" / "open2_faults F".
 *   vmm_cold --chunks N --mode driver
 *       what the driver alone needs for the same memory: the exporter
 *       sends one POSIX fd per chunk (cuMemExportToShareableHandle,
 *       SCM_RIGHTS, untimed); the importer times cuMemImportFromShareable-
 *       Handle per chunk, cuMemMap per chunk (into one reservation) and
 *       one cuMemSetAccess over the contiguous range:
 *       "driver_us IMPORT MAP ACCESS SUM".
 *
 * Driver API only (libcuda), so the CUDA double runs it too. Exit 0, or 1
 * with a line naming the failing call.
 */
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define GPU_PROG "vmm_cold"
#include "gpu_c.h"

#define CHUNK (2u << 20)
#define MAX_CHUNKS 1024
#define FDS_PER_MSG 250 /* SCM_MAX_FD is 253 */

static CUmemAllocationProp prop;
static CUmemAccessDesc acc;

static int init(void)
{
    CUcontext ctx;
    CUdevice dev;
    size_t gran;
    CU(cuInit(0));
    CU(cuDeviceGet(&dev, 0));
    CU(cuDevicePrimaryCtxRetain(&ctx, dev));
    CU(cuCtxSetCurrent(ctx));
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    acc.location = prop.location;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CU(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    if (CHUNK % gran) {
        fprintf(stderr, "vmm_cold: granularity %zu does not divide 2 MiB\n", gran);
        return 1;
    }
    return 0;
}

static int send_fds(int sock, const int *fds, int n)
{
    char ctl[CMSG_SPACE(sizeof(int) * FDS_PER_MSG)];
    char b = 'f';
    struct iovec iov = {&b, 1};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl};
    m.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)n);
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)n);
    memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)n);
    return sendmsg(sock, &m, 0) == 1 ? 0 : -1;
}

static int recv_fds(int sock, int *fds, int n)
{
    char ctl[CMSG_SPACE(sizeof(int) * FDS_PER_MSG)];
    char b;
    struct iovec iov = {&b, 1};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl,
                       .msg_controllen = sizeof(ctl)};
    if (recvmsg(sock, &m, MSG_CMSG_CLOEXEC) != 1)
        return -1;
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    if (!c || c->cmsg_len != CMSG_LEN(sizeof(int) * (size_t)n))
        return -1;
    memcpy(fds, CMSG_DATA(c), sizeof(int) * (size_t)n);
    return 0;
}

static int exporter(int sock, int n, int byval)
{
    static CUmemGenericAllocationHandle h[MAX_CHUNKS];
    static int fds[MAX_CHUNKS];
    CUdeviceptr base;
    char c;
    if (init())
        return 1;
    CU(cuMemAddressReserve(&base, (size_t)n * CHUNK, 0, 0, 0));
    for (int i = 0; i < n; i++) {
        CU(cuMemCreate(&h[i], CHUNK, &prop, 0));
        CU(cuMemMap(base + (size_t)i * CHUNK, CHUNK, 0, h[i], 0));
    }
    CU(cuMemSetAccess(base, (size_t)n * CHUNK, &acc, 1));
    if (byval) {
        CUipcMemHandle ih;
        CU(cuIpcGetMemHandle(&ih, base));
        if (write(sock, &ih, sizeof(ih)) != (ssize_t)sizeof(ih))
            return 1;
    } else {
        for (int i = 0; i < n; i++)
            CU(cuMemExportToShareableHandle(&fds[i], h[i], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                            0));
        for (int i = 0; i < n; i += FDS_PER_MSG)
            if (send_fds(sock, fds + i, n - i < FDS_PER_MSG ? n - i : FDS_PER_MSG) != 0)
                return 1;
    }
    return read(sock, &c, 1) < 0; /* until the importer is done */
}

static long minflt(void)
{
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_minflt : 0;
}

/* Open exporter i's handle (from socks[i]), timed, its faults counted. */
static int open_one(const int *socks, int i)
{
    CUipcMemHandle ih;
    CUdeviceptr p;
    if (read(socks[i], &ih, sizeof(ih)) != (ssize_t)sizeof(ih))
        return fprintf(stderr, "vmm_cold: no handle from exporter %d\n", i), 1;
    long f0 = minflt();
    double t0 = now_us();
    CU(cuIpcOpenMemHandle(&p, ih, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    double t = now_us() - t0;
    long f = minflt() - f0;
    printf("open%s_us %.1f\nopen%s_faults %ld\n", i ? "2" : "", t, i ? "2" : "", f);
    CU(cuIpcCloseMemHandle(p));
    return 0;
}

static int importer(const int *socks, int nx, int n, int byval)
{
    static CUmemGenericAllocationHandle h[MAX_CHUNKS];
    static int fds[MAX_CHUNKS];
    CUdeviceptr p;
    int sock = socks[0];
    if (init())
        return 1;
    if (byval) {
        for (int i = 0; i < nx; i++)
            if (open_one(socks, i))
                return 1;
        return 0;
    }
    for (int i = 0; i < n; i += FDS_PER_MSG)
        if (recv_fds(sock, fds + i, n - i < FDS_PER_MSG ? n - i : FDS_PER_MSG) != 0)
            return fprintf(stderr, "vmm_cold: no fds from the exporter\n"), 1;
    double t0 = now_us();
    for (int i = 0; i < n; i++)
        CU(cuMemImportFromShareableHandle(&h[i], (void *)(uintptr_t)fds[i],
                                          CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    double t1 = now_us();
    CU(cuMemAddressReserve(&p, (size_t)n * CHUNK, 0, 0, 0));
    for (int i = 0; i < n; i++)
        CU(cuMemMap(p + (size_t)i * CHUNK, CHUNK, 0, h[i], 0));
    double t2 = now_us();
    CU(cuMemSetAccess(p, (size_t)n * CHUNK, &acc, 1));
    double t3 = now_us();
    printf("driver_us %.1f %.1f %.1f %.1f\n", t1 - t0, t2 - t1, t3 - t2, t3 - t0);
    CU(cuMemUnmap(p, (size_t)n * CHUNK));
    for (int i = 0; i < n; i++) {
        CU(cuMemRelease(h[i]));
        close(fds[i]);
    }
    CU(cuMemAddressFree(p, (size_t)n * CHUNK));
    return 0;
}

int main(int argc, char **argv)
{
    int n = 0, byval = -1, nx = 1, sv[2][2], st = 0, rc = 0;
    pid_t pid[2];
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--chunks"))
            n = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--exporters"))
            nx = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--mode"))
            byval = !strcmp(argv[i + 1], "byval") ? 1 : !strcmp(argv[i + 1], "driver") ? 0 : -1;
    }
    if (n < 1 || n > MAX_CHUNKS || byval < 0 || nx < 1 || nx > 2 || (nx > 1 && !byval)) {
        fprintf(stderr, "usage: vmm_cold --chunks 1..%d --mode byval|driver "
                "[--exporters 1|2 (byval)]\n", MAX_CHUNKS);
        return 2;
    }
    int socks[2];
    for (int i = 0; i < nx; i++) {
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv[i]) != 0)
            return perror("vmm_cold: socketpair"), 1;
        fflush(NULL);
        pid[i] = fork(); /* before any CUDA call; the importer is the parent (Yama) */
        if (pid[i] == 0) {
            for (int j = 0; j <= i; j++) /* an earlier exporter's end too: it waits for EOF */
                close(sv[j][0]);
            _exit(exporter(sv[i][1], n, byval));
        }
        close(sv[i][1]);
        socks[i] = sv[i][0];
    }
    rc = importer(socks, nx, n, byval);
    for (int i = 0; i < nx; i++) {
        close(socks[i]);
        if (waitpid(pid[i], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "vmm_cold: exporter %d failed (status 0x%x)\n", i, st);
            rc = 1;
        }
    }
    return rc;
}
