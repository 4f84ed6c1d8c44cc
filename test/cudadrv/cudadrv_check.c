/* SPDX-License-Identifier: MIT */
/*
 * cudadrv_check: checks that the CUDA driver test double behaves like the
 * real driver in the respects the ipcbyval tests rely on (entry-point
 * versions, handle copy-by-value semantics, VMM export/import, pointer
 * attributes, context and memory lifetimes as measured on driver 580,
 * device-memory accounting across processes). One process plus forked
 * children. Links the double (run with LD_LIBRARY_PATH=build/test/cudadrv).
 * Sets CUDADRV_TOTAL_MEM=64M and a private CUDADRV_LEDGER for itself and its
 * children. Ends with "cudadrv_check: N passed, N failed"; exit 0 when none
 * failed.
 */
#include <cuda.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test/devmem/devmem.h"

#undef cuDevicePrimaryCtxReset
CUresult CUDAAPI cuDevicePrimaryCtxReset(CUdevice dev);

#define MiB ((size_t)1 << 20)
#define TOTAL_MEM (64 * MiB)

static int passed, failed;

#define CHECK(cond)                                                           \
    do {                                                                      \
        if (cond) {                                                           \
            passed++;                                                         \
        } else {                                                              \
            failed++;                                                         \
            fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);   \
        }                                                                     \
    } while (0)

static void *lib;

static void *sym(const char *name)
{
    return dlsym(lib, name);
}

static void *proc(const char *name, int version, cuuint64_t flags,
                  CUdriverProcAddressQueryResult *st, CUresult *rc)
{
    void *p = (void *)1;

    *rc = cuGetProcAddress(name, &p, version, flags, st);
    return p;
}

static void check_procaddress(void)
{
    CUdriverProcAddressQueryResult st;
    CUresult rc;

    CHECK(proc("cuIpcOpenMemHandle", 4010, 0, &st, &rc) == sym("cuIpcOpenMemHandle"));
    CHECK(proc("cuIpcOpenMemHandle", 11000, 0, &st, &rc) == sym("cuIpcOpenMemHandle_v2"));
    CHECK(proc("cuIpcOpenMemHandle", 13000, 0, &st, &rc) == sym("cuIpcOpenMemHandle_v2"));
    CHECK(proc("cuGetProcAddress", 11030, 0, &st, &rc) == sym("cuGetProcAddress"));
    CHECK(proc("cuGetProcAddress", 12000, 0, &st, &rc) == sym("cuGetProcAddress_v2"));
    CHECK(proc("cuMemFree", 13000, 0, &st, &rc) == sym("cuMemFree_v2"));
    CHECK(proc("cuCtxGetDevice", 12080, 0, &st, &rc) == sym("cuCtxGetDevice"));
    CHECK(proc("cuCtxGetDevice", 13000, 0, &st, &rc) == sym("cuCtxGetDevice_v2"));
    CHECK(proc("cuCtxCreate", 13000, 0, &st, &rc) == sym("cuCtxCreate_v4"));
    CHECK(proc("cuMemcpyHtoD", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st,
               &rc) == sym("cuMemcpyHtoD_v2_ptds"));
    CHECK(proc("cuMemcpyHtoD", 13000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &st, &rc) ==
          sym("cuMemcpyHtoD_v2"));
    CHECK(proc("cuMemCreate", 10000, 0, &st, &rc) == NULL && rc == CUDA_SUCCESS &&
          st == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    CHECK(proc("cuNoSuchCall", 13000, 0, &st, &rc) == NULL && rc == CUDA_SUCCESS &&
          st == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    proc("cuInit", 13010, 0, &st, &rc);
    CHECK(rc == CUDA_ERROR_INVALID_VALUE);
    /* Context lifetime calls: every name and version, symbol and procaddr. */
    static const char *const syms[] = {
        "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRelease", "cuDevicePrimaryCtxRelease_v2",
        "cuDevicePrimaryCtxReset", "cuDevicePrimaryCtxReset_v2", "cuDevicePrimaryCtxGetState",
        "cuCtxDestroy", "cuCtxDestroy_v2", "cuMemGetInfo_v2", "cudadrvMemStats",
    };
    for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++)
        CHECK(sym(syms[i]) != NULL);
    CHECK(proc("cuDevicePrimaryCtxRetain", 13000, 0, &st, &rc) == sym("cuDevicePrimaryCtxRetain"));
    CHECK(proc("cuDevicePrimaryCtxRelease", 10020, 0, &st, &rc) ==
          sym("cuDevicePrimaryCtxRelease"));
    CHECK(proc("cuDevicePrimaryCtxRelease", 13000, 0, &st, &rc) ==
          sym("cuDevicePrimaryCtxRelease_v2"));
    CHECK(proc("cuDevicePrimaryCtxReset", 7000, 0, &st, &rc) == sym("cuDevicePrimaryCtxReset"));
    CHECK(proc("cuDevicePrimaryCtxReset", 12000, 0, &st, &rc) ==
          sym("cuDevicePrimaryCtxReset_v2"));
    CHECK(proc("cuDevicePrimaryCtxGetState", 13000, 0, &st, &rc) ==
          sym("cuDevicePrimaryCtxGetState"));
    CHECK(proc("cuCtxDestroy", 3020, 0, &st, &rc) == sym("cuCtxDestroy"));
    CHECK(proc("cuCtxDestroy", 13000, 0, &st, &rc) == sym("cuCtxDestroy_v2"));
    CHECK(proc("cuMemGetInfo", 13000, 0, &st, &rc) == sym("cuMemGetInfo_v2"));
}

static void check_errors(void)
{
    const char *s = NULL;

    CHECK(cuGetErrorName(CUDA_ERROR_INVALID_VALUE, &s) == CUDA_SUCCESS &&
          strcmp(s, "CUDA_ERROR_INVALID_VALUE") == 0);
    CHECK(cuGetErrorString(CUDA_ERROR_INVALID_VALUE, &s) == CUDA_SUCCESS &&
          strcmp(s, "invalid argument") == 0);
    CHECK(cuGetErrorName((CUresult)12345, &s) == CUDA_ERROR_INVALID_VALUE && s == NULL);
}

static void check_legacy(void)
{
    CUipcMemHandle h1, h2;
    CUdeviceptr p, q, base, opened;
    unsigned long long id1 = 0, id2 = 0;
    unsigned legacy = 0;
    size_t size = 0;

    CHECK(cuMemAlloc(&p, 100000) == CUDA_SUCCESS);
    CHECK(cuMemGetAddressRange(&base, &size, p + 777) == CUDA_SUCCESS && base == p &&
          size == 100000);
    CHECK(cuIpcGetMemHandle(&h1, p) == CUDA_SUCCESS);
    CHECK(cuIpcGetMemHandle(&h2, p + 4096) == CUDA_SUCCESS);
    CHECK(memcmp(&h1, &h2, sizeof(h1)) == 0);
    /* Driver 580: the exporter's pid, little endian, at bytes 8-11. */
    {
        const unsigned char *b = (const unsigned char *)h1.reserved;
        uint32_t pid = (uint32_t)b[8] | (uint32_t)b[9] << 8 | (uint32_t)b[10] << 16 |
                       (uint32_t)b[11] << 24;

        CHECK(pid == (uint32_t)getpid());
    }
    /* Another allocation, other bytes (same pid and per-process value). */
    CHECK(cuMemAlloc(&q, 4096) == CUDA_SUCCESS && cuIpcGetMemHandle(&h2, q) == CUDA_SUCCESS);
    CHECK(memcmp(&h1, &h2, sizeof(h1)) != 0 && memcmp(&h1, &h2, 12) == 0);
    /* Closing what is no IPC mapping (own memory) is refused, harmlessly. */
    CHECK(cuMemsetD8(q, 'q', 4096) == CUDA_SUCCESS);
    CHECK(cuIpcCloseMemHandle(q) == CUDA_ERROR_INVALID_VALUE);
    {
        char c = 0;

        CHECK(cuMemcpyDtoH(&c, q + 4095, 1) == CUDA_SUCCESS && c == 'q');
    }
    CHECK(cuMemFree(q) == CUDA_SUCCESS);
    CHECK(cuPointerGetAttribute(&legacy, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
                                p) == CUDA_SUCCESS && legacy == 1);
    CHECK(cuPointerGetAttribute(&id1, CU_POINTER_ATTRIBUTE_BUFFER_ID, p) == CUDA_SUCCESS);
    /* Opening in the exporting process is refused, as by the real driver. */
    CHECK(cuIpcOpenMemHandle(&opened, h1, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) ==
          CUDA_ERROR_INVALID_CONTEXT);
    CHECK(cuMemFree(p + 1) == CUDA_ERROR_INVALID_VALUE);
    CHECK(cuMemFree(p) == CUDA_SUCCESS);
    CHECK(cuMemAlloc(&q, 100000) == CUDA_SUCCESS);
    CHECK(cuPointerGetAttribute(&id2, CU_POINTER_ATTRIBUTE_BUFFER_ID, q) == CUDA_SUCCESS &&
          id2 != id1);
    CHECK(cuMemFree(q) == CUDA_SUCCESS);
    CHECK(cuMemGetAddressRange(&base, &size, (CUdeviceptr)(uintptr_t)&size) ==
          CUDA_ERROR_NOT_FOUND);
}

static CUmemAllocationProp vmm_prop(CUmemAllocationHandleType types)
{
    CUmemAllocationProp prop;

    memset(&prop, 0, sizeof(prop));
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.requestedHandleTypes = types;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    return prop;
}

static void check_vmm_attrs(CUdeviceptr va, size_t chunk)
{
    CUpointer_attribute attrs[4] = { CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                      CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                                      CU_POINTER_ATTRIBUTE_MAPPED,
                                      CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE };
    CUdeviceptr start = 0, base = 0;
    size_t size = 0;
    unsigned mapped = 0, legacy = 7, types = 0;
    void *data[4] = { &start, &size, &mapped, &legacy };

    CHECK(cuPointerGetAttributes(4, attrs, data, va + chunk + 5) == CUDA_SUCCESS);
    CHECK(start == va && size == 3 * chunk && mapped == 1 && legacy == 0);
    CHECK(cuMemGetAddressRange(&base, &size, va + chunk + 5) == CUDA_SUCCESS &&
          base == va + chunk && size == chunk);
    CHECK(cuPointerGetAttribute(&types, CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, va) ==
          CUDA_SUCCESS && types == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    /* Third chunk is reserved but unmapped: only RANGE_* and MAPPED. */
    CHECK(cuPointerGetAttributes(4, attrs, data, va + 2 * chunk) == CUDA_SUCCESS);
    CHECK(start == va && mapped == 0);
    CHECK(cuPointerGetAttribute(&base, CU_POINTER_ATTRIBUTE_BUFFER_ID, va + 2 * chunk) ==
          CUDA_ERROR_INVALID_VALUE);
}

static void check_vmm(void)
{
    CUmemAllocationProp prop = vmm_prop(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR), got;
    CUmemAllocationProp none = vmm_prop(CU_MEM_HANDLE_TYPE_NONE);
    CUmemAccessDesc acc = { prop.location, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    CUmemGenericAllocationHandle h[2], hn, hi, hr;
    CUdeviceptr va, va2;
    CUipcMemHandle ipc;
    size_t chunk = 0;
    int fd1 = -1, fd2 = -1, pfd[2];
    char byte = 'x', back = 0;

    CHECK(cuMemGetAllocationGranularity(&chunk, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) ==
          CUDA_SUCCESS && chunk == (2u << 20));
    CHECK(cuMemAddressReserve(&va, 3 * chunk, 0, 0, 0) == CUDA_SUCCESS);
    for (int i = 0; i < 2; i++) {
        CHECK(cuMemCreate(&h[i], chunk, &prop, 0) == CUDA_SUCCESS);
        CHECK(cuMemMap(va + (size_t)i * chunk, chunk, 0, h[i], 0) == CUDA_SUCCESS);
    }
    CHECK(cuMemMap(va, chunk, 0, h[1], 0) == CUDA_ERROR_INVALID_VALUE);
    /* Mapped but no access yet: the device cannot touch it. */
    CHECK(cuMemcpyHtoD(va, &byte, 1) == CUDA_ERROR_INVALID_VALUE);
    CHECK(cuMemSetAccess(va, 2 * chunk, &acc, 1) == CUDA_SUCCESS);
    CHECK(cuMemcpyHtoD(va + chunk - 1, "ab", 2) == CUDA_SUCCESS);
    check_vmm_attrs(va, chunk);
    CHECK(cuIpcGetMemHandle(&ipc, va) == CUDA_ERROR_INVALID_VALUE);
    CHECK(cuMemRetainAllocationHandle(&hr, (void *)(uintptr_t)(va + chunk + 9)) ==
          CUDA_SUCCESS && hr == h[1]);
    CHECK(cuMemRelease(hr) == CUDA_SUCCESS);
    /* Every export is a new fd; both import the same memory. */
    CHECK(cuMemExportToShareableHandle(&fd1, h[1], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                       0) == CUDA_SUCCESS);
    CHECK(cuMemExportToShareableHandle(&fd2, h[1], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                       0) == CUDA_SUCCESS);
    CHECK(fd1 >= 0 && fd2 >= 0 && fd1 != fd2);
    {
        /* As on the real driver (/dev/nvidiactl): every export of every
         * allocation is a new open file of ONE inode, so an inode cannot
         * tell a freed export's reused number from a live export. */
        int fd0 = -1;
        struct stat s0, s1, s2;
        CHECK(cuMemExportToShareableHandle(&fd0, h[0], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                           0) == CUDA_SUCCESS);
        CHECK(fstat(fd0, &s0) == 0 && fstat(fd1, &s1) == 0 && fstat(fd2, &s2) == 0 &&
              s0.st_ino == s1.st_ino && s1.st_ino == s2.st_ino && s0.st_dev == s1.st_dev);
        CHECK(cuMemImportFromShareableHandle(&hi, (void *)(intptr_t)fd0,
                                             CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) ==
                  CUDA_SUCCESS &&
              cuMemRelease(hi) == CUDA_SUCCESS);
        close(fd0);
    }
    CHECK(cuMemImportFromShareableHandle(&hi, (void *)(intptr_t)fd2,
                                         CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) ==
          CUDA_SUCCESS && hi != h[1]);
    close(fd1);
    close(fd2);
    CHECK(cuMemGetAllocationPropertiesFromHandle(&got, hi) == CUDA_SUCCESS &&
          got.requestedHandleTypes == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR &&
          got.location.id == 0);
    CHECK(cuMemAddressReserve(&va2, chunk, 0, 0, 0) == CUDA_SUCCESS);
    CHECK(cuMemMap(va2, chunk, 0, hi, 0) == CUDA_SUCCESS);
    CHECK(cuMemRelease(hi) == CUDA_SUCCESS);
    CHECK(cuMemSetAccess(va2, chunk, &acc, 1) == CUDA_SUCCESS);
    CHECK(cuMemcpyDtoH(&back, va2, 1) == CUDA_SUCCESS && back == 'b');
    CHECK(cuMemUnmap(va2, chunk) == CUDA_SUCCESS && cuMemAddressFree(va2, chunk) == CUDA_SUCCESS);
    /* Refusals: non-driver fd, export type not requested, FABRIC. */
    CHECK(pipe(pfd) == 0);
    CHECK(cuMemImportFromShareableHandle(&hi, (void *)(intptr_t)pfd[0],
                                         CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) ==
          CUDA_ERROR_INVALID_VALUE);
    close(pfd[0]);
    close(pfd[1]);
    CHECK(cuMemCreate(&hn, chunk, &none, 0) == CUDA_SUCCESS);
    CHECK(cuMemExportToShareableHandle(&fd1, hn, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                       0) == CUDA_ERROR_INVALID_VALUE);
    CHECK(cuMemRelease(hn) == CUDA_SUCCESS);
    none.requestedHandleTypes = CU_MEM_HANDLE_TYPE_FABRIC;
    CHECK(cuMemCreate(&hn, chunk, &none, 0) == CUDA_ERROR_NOT_PERMITTED);
    /* Teardown: partial unmap and freeing a mapped reservation refused. */
    CHECK(cuMemUnmap(va, chunk / 2) == CUDA_ERROR_INVALID_VALUE);
    CHECK(cuMemAddressFree(va, 3 * chunk) == CUDA_ERROR_INVALID_VALUE);
    CHECK(cuMemRelease(h[0]) == CUDA_SUCCESS && cuMemRelease(h[1]) == CUDA_SUCCESS);
    CHECK(cuMemRelease(h[1]) == CUDA_ERROR_INVALID_VALUE);
    CHECK(cuMemcpyDtoH(&back, va, 1) == CUDA_SUCCESS);   /* mappings keep memory */
    CHECK(cuMemUnmap(va, 2 * chunk) == CUDA_SUCCESS);
    CHECK(cuMemAddressFree(va, 3 * chunk) == CUDA_SUCCESS);
}

static void check_host_pointer(void)
{
    CUpointer_attribute attrs[2] = { CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                     CU_POINTER_ATTRIBUTE_BUFFER_ID };
    unsigned type = 9;
    unsigned long long id = 9;
    void *data[2] = { &type, &id };
    int local;

    CHECK(cuPointerGetAttributes(2, attrs, data, (CUdeviceptr)(uintptr_t)&local) ==
          CUDA_SUCCESS && type == 0 && id == 0);
    CHECK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                (CUdeviceptr)(uintptr_t)&local) == CUDA_ERROR_INVALID_VALUE);
}

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
static void check_cross_process(void)
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

struct current_arg {
    CUcontext ctx;
    int ready, go;
    CUresult rc;
};

/* Makes arg->ctx current, waits until the main thread destroyed it. */
static void *hold_current(void *p)
{
    struct current_arg *a = p;

    cuCtxSetCurrent(a->ctx);
    __atomic_store_n(&a->ready, 1, __ATOMIC_RELEASE);
    while (!__atomic_load_n(&a->go, __ATOMIC_ACQUIRE))
        usleep(1000);
    a->rc = cuCtxSynchronize();
    return NULL;
}

/* cuCtxCreate reuses the most recently destroyed handle value; destroying
 * a context frees its cuMemAlloc memory (stale pointers fail), pops it
 * from this thread and leaves it destroyed in others. Runs with the
 * primary context of device 0 current. */
static void check_contexts(CUcontext primary)
{
    CUcontext a, b, c, e, f, cur;
    CUdeviceptr x, base;
    struct current_arg arg = { 0 };
    pthread_t th;
    size_t size;
    char byte = 0;

    CHECK(cuCtxCreate(&a, NULL, 0, 0) == CUDA_SUCCESS && cuCtxDestroy(a) == CUDA_SUCCESS);
    CHECK(cuCtxCreate(&b, NULL, 0, 0) == CUDA_SUCCESS && b == a);
    CHECK(cuCtxCreate(&c, NULL, 0, 1) == CUDA_SUCCESS && c != b);
    CHECK(cuCtxDestroy(b) == CUDA_SUCCESS && cuCtxDestroy(c) == CUDA_SUCCESS);
    CHECK(cuCtxCreate(&e, NULL, 0, 0) == CUDA_SUCCESS && e == c);
    CHECK(cuCtxCreate(&f, NULL, 0, 0) == CUDA_SUCCESS && f == b);
    CHECK(cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == f);
    CHECK(cuMemAlloc(&x, 8192) == CUDA_SUCCESS && cuMemsetD8(x, 'x', 8192) == CUDA_SUCCESS);
    CHECK(cuCtxDestroy(f) == CUDA_SUCCESS);
    CHECK(cuCtxDestroy(f) == CUDA_ERROR_INVALID_CONTEXT);
    CHECK(cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == e);
    CHECK(cuMemGetAddressRange(&base, &size, x) == CUDA_ERROR_NOT_FOUND);
    CHECK(cuMemFree(x) == CUDA_ERROR_INVALID_VALUE);
    CHECK(cuMemcpyDtoH(&byte, x, 1) == CUDA_ERROR_ILLEGAL_ADDRESS);
    CHECK(cuMemcpy((CUdeviceptr)(uintptr_t)&byte, x + 100, 1) == CUDA_ERROR_ILLEGAL_ADDRESS);
    /* A context current to another thread, destroyed here. */
    arg.ctx = e;
    CHECK(pthread_create(&th, NULL, hold_current, &arg) == 0);
    while (!__atomic_load_n(&arg.ready, __ATOMIC_ACQUIRE))
        usleep(1000);
    CHECK(cuCtxDestroy(e) == CUDA_SUCCESS);
    __atomic_store_n(&arg.go, 1, __ATOMIC_RELEASE);
    pthread_join(th, NULL);
    CHECK(arg.rc == CUDA_ERROR_CONTEXT_IS_DESTROYED);
    CHECK(cuCtxSetCurrent(e) == CUDA_ERROR_INVALID_CONTEXT);
    CHECK(cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == primary);
    CHECK(cuCtxDestroy(primary) == CUDA_ERROR_INVALID_CONTEXT);
}

/* Primary context of device 1: reset destroys its state but keeps the
 * handle and the retain count; the last release destroys it too; VMM
 * memory survives both (measured on driver 580). */
static void check_primary_lifetime(CUcontext primary0)
{
    CUmemAllocationProp prop;
    CUmemAccessDesc acc;
    CUmemGenericAllocationHandle h;
    CUcontext p, q, cur;
    CUdeviceptr x, va, base;
    size_t chunk = 2 * MiB, size, fr, tot;
    unsigned flags;
    int active = -1;
    char c = 0;

    memset(&prop, 0, sizeof(prop));
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 1;
    acc.location = prop.location;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CHECK(cuDevicePrimaryCtxGetState(1, &flags, &active) == CUDA_SUCCESS && active == 0);
    CHECK(cuDevicePrimaryCtxRetain(&p, 1) == CUDA_SUCCESS && cuCtxSetCurrent(p) == 0);
    CHECK(cuDevicePrimaryCtxGetState(1, &flags, &active) == CUDA_SUCCESS && active == 1);
    CHECK(cuMemAlloc(&x, 4096) == CUDA_SUCCESS);
    CHECK(cuMemCreate(&h, chunk, &prop, 0) == CUDA_SUCCESS);
    CHECK(cuMemAddressReserve(&va, chunk, 0, 0, 0) == CUDA_SUCCESS);
    CHECK(cuMemMap(va, chunk, 0, h, 0) == CUDA_SUCCESS);
    CHECK(cuMemSetAccess(va, chunk, &acc, 1) == CUDA_SUCCESS);
    CHECK(cuMemcpyHtoD(va, "V", 1) == CUDA_SUCCESS);
    /* Reset: inactive, still current, the same handle on the next retain. */
    CHECK(cuDevicePrimaryCtxReset(1) == CUDA_SUCCESS);
    CHECK(cuDevicePrimaryCtxGetState(1, &flags, &active) == CUDA_SUCCESS && active == 0);
    CHECK(cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == p);
    CHECK(cuMemAlloc(&base, 4096) == CUDA_ERROR_CONTEXT_IS_DESTROYED);
    CHECK(cuMemGetInfo(&fr, &tot) == CUDA_ERROR_CONTEXT_IS_DESTROYED);
    CHECK(cuDevicePrimaryCtxRetain(&q, 1) == CUDA_SUCCESS && q == p);
    CHECK(cuMemGetAddressRange(&base, &size, x) == CUDA_ERROR_NOT_FOUND);
    CHECK(cuMemFree(x) == CUDA_ERROR_INVALID_VALUE);
    CHECK(cuMemcpyDtoH(&c, va, 1) == CUDA_SUCCESS && c == 'V');
    /* Two retains, two releases: the reset released nothing. */
    CHECK(cuDevicePrimaryCtxRelease(1) == CUDA_SUCCESS);
    CHECK(cuDevicePrimaryCtxGetState(1, &flags, &active) == CUDA_SUCCESS && active == 1);
    CHECK(cuMemAlloc(&x, 4096) == CUDA_SUCCESS);
    CHECK(cuDevicePrimaryCtxRelease(1) == CUDA_SUCCESS);
    CHECK(cuDevicePrimaryCtxGetState(1, &flags, &active) == CUDA_SUCCESS && active == 0);
    CHECK(cuDevicePrimaryCtxRelease(1) == CUDA_ERROR_INVALID_CONTEXT);
    CHECK(cuMemAlloc(&base, 4096) == CUDA_ERROR_CONTEXT_IS_DESTROYED);
    CHECK(cuDevicePrimaryCtxRetain(&q, 1) == CUDA_SUCCESS && q == p);
    CHECK(cuMemGetAddressRange(&base, &size, x) == CUDA_ERROR_NOT_FOUND);
    CHECK(cuMemcpyDtoH(&c, va, 1) == CUDA_SUCCESS && c == 'V');
    CHECK(cuMemUnmap(va, chunk) == CUDA_SUCCESS && cuMemAddressFree(va, chunk) == CUDA_SUCCESS);
    CHECK(cuMemRelease(h) == CUDA_SUCCESS);
    CHECK(cuDevicePrimaryCtxRelease_v2(1) == CUDA_SUCCESS);
    CHECK(cuCtxSetCurrent(primary0) == CUDA_SUCCESS);
}

/* cuMemGetInfo counts cuMemAlloc and cuMemCreate memory of the device, and
 * CUDADRV_TOTAL_MEM bounds it. */
static void check_meminfo(void)
{
    CUmemAllocationProp prop;
    CUmemGenericAllocationHandle h;
    CUresult (*stats)(int, struct devmem_stats *);
    struct devmem_stats st;
    size_t fr0 = 0, fr = 0, tot = 0;
    CUdeviceptr x, y;

    memset(&prop, 0, sizeof(prop));
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    CHECK(cuMemGetInfo(&fr0, &tot) == CUDA_SUCCESS && tot == TOTAL_MEM && fr0 <= tot);
    CHECK(cuMemAlloc(&x, 8 * MiB) == CUDA_SUCCESS);
    CHECK(cuMemGetInfo(&fr, &tot) == CUDA_SUCCESS && fr == fr0 - 8 * MiB);
    CHECK(cuMemCreate(&h, 16 * MiB, &prop, 0) == CUDA_SUCCESS);
    CHECK(cuMemGetInfo(&fr, &tot) == CUDA_SUCCESS && fr == fr0 - 24 * MiB);
    CHECK(cuMemAlloc(&y, fr + 1) == CUDA_ERROR_OUT_OF_MEMORY);
    CHECK(cuMemAlloc(&y, fr) == CUDA_SUCCESS && cuMemFree(y) == CUDA_SUCCESS);
    CHECK(cuMemCreate(&h, 64 * MiB, &prop, 0) == CUDA_ERROR_OUT_OF_MEMORY);
    *(void **)&stats = sym("cudadrvMemStats");
    CHECK(stats && stats(0, &st) == CUDA_SUCCESS && st.shared == 1 && st.freed_held == 0 &&
          st.used == TOTAL_MEM - fr);
    CHECK(cuMemFree(x) == CUDA_SUCCESS && cuMemRelease(h) == CUDA_SUCCESS);
    CHECK(cuMemGetInfo(&fr, &tot) == CUDA_SUCCESS && fr == fr0);
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

static void check_churn(int hold)
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

/* A forked child must not use the parent's CUDA state. */
static void check_fork(void)
{
    int status = 0;
    pid_t pid = fork();

    if (pid == 0) {
        int n = 0;

        _exit(cuInit(0) == CUDA_ERROR_NOT_INITIALIZED &&
              cuDeviceGetCount(&n) == CUDA_ERROR_NOT_INITIALIZED ? 0 : 1);
    }
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
          WEXITSTATUS(status) == 0);
}

int main(void)
{
    CUcontext ctx = NULL, cur = NULL;
    CUdevice dev = -1;
    int count = 0;
    char ledger[64];

    /* A ledger of our own, bounded: children inherit both. */
    snprintf(ledger, sizeof(ledger), "/tmp/cudadrv_check.%d.ledger", (int)getpid());
    unlink(ledger);
    setenv("CUDADRV_LEDGER", ledger, 1);
    setenv("CUDADRV_TOTAL_MEM", "64M", 1);
    lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    CHECK(lib != NULL);
    CHECK(cuDeviceGetCount(&count) == CUDA_ERROR_NOT_INITIALIZED);
    check_churn(0);
    check_churn(1);
    check_cross_process();
    CHECK(cuInit(0) == CUDA_SUCCESS);
    CHECK(cuDeviceGetCount(&count) == CUDA_SUCCESS && count >= 1);
    CHECK(cuCtxGetDevice(&dev) == CUDA_ERROR_INVALID_CONTEXT);
    CHECK(cuDevicePrimaryCtxRetain(&ctx, 0) == CUDA_SUCCESS);
    CHECK(cuDevicePrimaryCtxRelease(0) == CUDA_SUCCESS);
    CHECK(cuCtxSetCurrent(ctx) == CUDA_SUCCESS);
    CHECK(cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == ctx);
    CHECK(cuCtxGetDevice(&dev) == CUDA_SUCCESS && dev == 0);
    check_procaddress();
    check_errors();
    check_legacy();
    check_vmm();
    check_host_pointer();
    check_contexts(ctx);
    check_primary_lifetime(ctx);
    check_meminfo();
    check_fork();
    CHECK(cuDevicePrimaryCtxRelease(0) == CUDA_SUCCESS);
    unlink(ledger);
    printf("cudadrv_check: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
