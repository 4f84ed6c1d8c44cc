/* SPDX-License-Identifier: MIT */
/*
 * cu_chunks: VMM manifests at their limits, two processes under ipcbyval.
 *
 *   cu_chunks --chunks N    the exporter maps N chunks (the allocation
 *                           granularity each) into one reservation, writes
 *                           each chunk's index at its start and sends the
 *                           handle; the importer opens it and reads every
 *                           index back. 1024 is the manifest's limit.
 *   cu_chunks --forge short the exporter sends a by-value handle naming a
 *                           sealed memfd of 64 bytes whose header claims
 *                           150 chunks; the importer's open must fail.
 *
 * The driver (the test double) is reached like cu_pair does (--route,
 * default cudart). Exit 0 with an "OK ..." line, 1 on a failure, 2 on bad
 * usage.
 */
#include "cu_pair.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "handles/resolve.h"
#include "shim/cu.h"
#include "handles/manifest.h"
#include "test/io_all.h"

struct msg {
    CUipcMemHandle handle;
    uint64_t chunk;
    int32_t status;
};

static int export_chunks(int n, struct msg *m, CUdeviceptr *base_p, size_t *len_p,
                         CUmemGenericAllocationHandle *h)
{
    CUmemAllocationProp prop = vmm_prop(0);
    size_t gran;
    CUdeviceptr base;
    CU(MemGetAllocationGranularity, &gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    CU(MemAddressReserve, &base, gran * (size_t)n, 0, 0, 0);
    for (int i = 0; i < n; i++) {
        uint64_t mark = 0xc0de000000000000ull | (uint64_t)i;
        CU(MemCreate, &h[i], gran, &prop, 0);
        CU(MemMap, base + (size_t)i * gran, gran, 0, h[i], 0);
        if (vmm_access(base + (size_t)i * gran, gran, 0))
            return 1;
        CU(MemcpyHtoD, base + (size_t)i * gran, &mark, sizeof(mark));
    }
    CU(IpcGetMemHandle, &m->handle, base);
    m->chunk = gran;
    *base_p = base;
    *len_p = gran * (size_t)n;
    return 0;
}

/* A by-value handle naming a sealed memfd of 64 bytes: the manifest header
 * and one chunk, with nchunks saying 150. */
static int export_forged(struct msg *m, int *keep_p)
{
    uint8_t bytes[sizeof(byval_manifest_t) + sizeof(byval_manifest_chunk_t)];
    byval_manifest_t hdr = {.magic = BYVAL_MANIFEST_MAGIC, .version = BYVAL_MANIFEST_VERSION,
                            .nchunks = 150, .reserve_size = (uint64_t)150 << 21};
    byval_manifest_chunk_t c0 = {.size = 2u << 20, .id = 1};
    memcpy(bytes, &hdr, sizeof(hdr));
    memcpy(bytes + sizeof(hdr), &c0, sizeof(c0));
    int fd = memfd_create("ipcbyval-manifest", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0 || test_write_all(fd, bytes, sizeof(bytes)) != 0 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL) != 0) {
        fprintf(stderr, "cu_chunks: exporter: forged manifest: %s\n", strerror(errno));
        return 1;
    }
    byval_self_t self;
    byval_record_t rec = {0};
    if (byval_self_get(&self) != 0)
        return 1;
    byval_record_set_exporter(&rec, &self);
    rec.kind = BYVAL_KIND_CU_VMM_MANIFEST;
    rec.fd = (uint32_t)fd;
    rec.fd_ino = (uint32_t)byval_fd_inode(fd);
    rec.alloc_id = 77;
    rec.size = 4096;
    memset(&m->handle, 0, sizeof(m->handle));
    if (byval_wire_encode(&rec, (uint8_t *)m->handle.reserved + BYVAL_CU_RECORD_OFF) !=
        BYVAL_WIRE_OK)
        return 1;
    *keep_p = fd;
    return 0;
}

static int exporter(const struct opts *o, int nchunks, int forge, int wfd, int ackfd)
{
    struct msg m;
    CUdeviceptr base = 0;
    size_t len = 0;
    int keep = -1;
    char ack;
    CUmemGenericAllocationHandle *h = calloc((size_t)nchunks + 1, sizeof(*h));
    role = "exporter";
    memset(&m, 0, sizeof(m));
    if (!h || setup(o, 0))
        return 1;
    m.status = forge ? export_forged(&m, &keep) : export_chunks(nchunks, &m, &base, &len, h);
    if (test_write_all(wfd, &m, sizeof(m)) != 0 || m.status)
        return 1;
    if (read(ackfd, &ack, 1) < 0)
        ack = 0;
    if (!forge) {
        CU(MemUnmap, base, len);
        for (int i = 0; i < nchunks; i++)
            CU(MemRelease, h[i]);
        CU(MemAddressFree, base, len);
    }
    free(h);
    return 0;
}

static int import_chunks(const struct msg *m, int nchunks)
{
    CUdeviceptr p;
    CU(IpcOpenMemHandle, &p, m->handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    for (int i = 0; i < nchunks; i++) {
        uint64_t mark = 0;
        CU(MemcpyDtoH, &mark, p + (size_t)i * m->chunk, sizeof(mark));
        if (mark != (0xc0de000000000000ull | (uint64_t)i)) {
            fprintf(stderr, "cu_chunks: importer: chunk %d reads 0x%llx\n", i,
                    (unsigned long long)mark);
            return 1;
        }
    }
    CU(IpcCloseMemHandle, p);
    printf("OK cu_chunks: %d chunks opened by value, every chunk's mark read back\n", nchunks);
    return 0;
}

static int import_forged(const struct msg *m)
{
    CUdeviceptr p = 0;
    const char *name = NULL;
    CUresult rc = d.IpcOpenMemHandle(&p, m->handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    if (rc == CUDA_SUCCESS) {
        fprintf(stderr, "cu_chunks: importer: a 64-byte manifest claiming 150 chunks opened\n");
        d.IpcCloseMemHandle(p);
        return 1;
    }
    d.GetErrorName(rc, &name);
    printf("OK cu_chunks: forged manifest refused: %s\n", name ? name : "?");
    return 0;
}

int main(int argc, char **argv)
{
    struct opts o = {.mem = MEM_VMM_MULTI, .route = ROUTE_CUDART, .iters = 1, .version = CUDA_VERSION,
                     .lib = "libcuda.so.1"};
    int nchunks = 0, forge = 0, to_imp[2], to_exp[2], status = 0;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--chunks") && v && (nchunks = atoi(v)) > 0)
            i++;
        else if (!strcmp(argv[i], "--forge") && v && !strcmp(v, "short"))
            forge = 1, i++;
        else {
            fprintf(stderr, "usage: cu_chunks --chunks N | --forge short\n");
            return 2;
        }
    }
    if (!nchunks == !forge) {
        fprintf(stderr, "usage: cu_chunks --chunks N | --forge short\n");
        return 2;
    }
    /* Each chunk is an fd in the exporter (and, for a moment, in the
     * importer): 1024 chunks need more than the usual 1024 fds. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    if (pipe(to_imp) < 0 || pipe(to_exp) < 0)
        return 1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        return 1;
    if (pid == 0) {
        close(to_imp[0]);
        close(to_exp[1]);
        _exit(exporter(&o, nchunks, forge, to_imp[1], to_exp[0]));
    }
    close(to_imp[1]);
    close(to_exp[0]);
    struct msg m;
    int rc = 1;
    role = "importer";
    if (setup(&o, 0) == 0 && test_read_all(to_imp[0], &m, sizeof(m)) == 0 && m.status == 0)
        rc = forge ? import_forged(&m) : import_chunks(&m, nchunks);
    close(to_exp[1]);
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "cu_chunks: exporter failed (status 0x%x)\n", status);
        rc = 1;
    }
    return rc;
}
