/* SPDX-License-Identifier: MIT */
/*
 * fault_stale_cu.c - the bystander of fault_stale.c against a CUDA VMM
 * exporter (the driver double), run under ipcbyval:
 *
 *   fault_stale_cu unmap|release
 *
 * A forked exporter maps two chunks into one reservation and exports it
 * (cuIpcGetMemHandle: a by-value handle naming a manifest memfd, whose
 * number and chunks ipcbyval offers to its broker). Once the export ends
 * (cuMemUnmap, or cuMemRelease of its first chunk's handle while mapped), the
 * manifest's number is the exporter's own socket: the bystander's
 * requests for it are refused, and the exporter's exit statistics show
 * nothing held. Exit 1 on any failure.
 */
#include "test/cudadrv/cu_pair.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "handles/wire.h"
#include "shim/cu.h"
#include "test/faults/stale_peer.h"

static int exporter(const char *path, int sock)
{
    struct opts o = {.mem = MEM_VMM_MULTI, .route = ROUTE_CUDART, .iters = 1,
                     .version = CUDA_VERSION, .lib = "libcuda.so.1"};
    CUmemAllocationProp prop;
    CUmemAccessDesc acc;
    CUmemGenericAllocationHandle h[2];
    CUipcMemHandle ih;
    CUdeviceptr base;
    size_t gran;
    role = "exporter";
    if (setup(&o, 0))
        return 1;
    memset(&prop, 0, sizeof(prop));
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    CU(MemGetAllocationGranularity, &gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    CU(MemAddressReserve, &base, 2 * gran, 0, 0, 0);
    for (int i = 0; i < 2; i++) {
        CU(MemCreate, &h[i], gran, &prop, 0);
        CU(MemMap, base + (size_t)i * gran, gran, 0, h[i], 0);
        memset(&acc, 0, sizeof(acc));
        acc.location = prop.location;
        acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        CU(MemSetAccess, base + (size_t)i * gran, gran, &acc, 1);
    }
    CU(IpcGetMemHandle, &ih, base);
    byval_record_t rec;
    if (byval_wire_decode((const uint8_t *)ih.reserved + BYVAL_CU_RECORD_OFF,
                          sizeof(ih.reserved) - BYVAL_CU_RECORD_OFF, &rec) != BYVAL_WIRE_OK) {
        fprintf(stderr, "exporter: not a by-value handle\n");
        return 1;
    }
    printf("exporter pid %d fd %u\n", (int)getpid(), rec.fd);
    fflush(stdout);
    char go;
    if (write(sock, &rec.fd, sizeof(rec.fd)) != sizeof(rec.fd) || read(sock, &go, 1) != 1)
        return 1;
    if (!strcmp(path, "unmap")) {
        CU(MemUnmap, base, 2 * gran);
    } else {
        /* The chunk the handle's pointer is in, still mapped: the driver
         * keeps it, the export (which begins in it) ends. */
        CU(MemRelease, h[0]);
    }
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
        return 1;
    int placed = fcntl((int)rec.fd, F_GETFD) < 0; /* closed with the export: ours now */
    if (placed && sv[0] != (int)rec.fd) {
        dup2(sv[0], (int)rec.fd);
        close(sv[0]);
    }
    char said = (char)placed;
    if (write(sock, &said, 1) != 1 || read(sock, &go, 1) != 1)
        return 1;
    return 0;
}

int main(int argc, char **argv)
{
    const char *path = argc > 1 ? argv[1] : "";
    if (strcmp(path, "unmap") && strcmp(path, "release")) {
        fprintf(stderr, "usage: fault_stale_cu unmap|release\n");
        return 2;
    }
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
        return 2;
    fflush(stdout);
    pid_t pid = fork(); /* before any CUDA call */
    if (pid == 0) {
        close(sv[0]);
        exit(exporter(path, sv[1])); /* exit: the exit statistics */
    }
    close(sv[1]);
    uint32_t fd;
    char go = 1, placed = 0;
    int got;
    if (pid < 0 || read(sv[0], &fd, sizeof(fd)) != sizeof(fd))
        return 2;
    uint32_t old_ino = stale_proc_ino(pid, fd);
    int st = stale_ask(pid, STALE_MAGIC, fd, old_ino, &got);
    stale_check(st == 0 && got >= 0, "while exported, the broker serves the manifest", "not served");
    if (got >= 0)
        close(got);
    if (write(sv[0], &go, 1) != 1 || read(sv[0], &placed, 1) != 1)
        return 2;
    stale_after_end(pid, fd, old_ino, placed, path);
    (void)!write(sv[0], &go, 1);
    int ws;
    waitpid(pid, &ws, 0);
    stale_check(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "the exporter exits cleanly", "it did not");
    return stale_failures ? 1 : 0;
}
