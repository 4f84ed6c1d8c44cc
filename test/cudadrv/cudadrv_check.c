/* SPDX-License-Identifier: MIT */
/*
 * cudadrv_check: checks that the CUDA driver test double behaves like the
 * real driver in the respects the ipcbyval tests rely on (entry-point
 * versions, handle copy-by-value semantics, VMM export/import, pointer
 * attributes). One process plus two forked children. Links the double
 * (run with LD_LIBRARY_PATH=build/test/cudadrv). Ends with
 * "cudadrv_check: N passed, N failed"; exit 0 when none failed.
 */
#include <cuda.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

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

    lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    CHECK(lib != NULL);
    CHECK(cuDeviceGetCount(&count) == CUDA_ERROR_NOT_INITIALIZED);
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
    check_fork();
    CHECK(cuDevicePrimaryCtxRelease(0) == CUDA_SUCCESS);
    printf("cudadrv_check: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
