/* SPDX-License-Identifier: MIT */
/* cudadrv_check_mem.c - the double's memory as the real driver's: legacy
 * allocations and their handles, VMM allocations and their export,
 * pointer attributes, cuMemGetInfo accounting (cudadrv_check.h). */
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test/cudadrv/cudadrv_check.h"
#include "test/devmem/devmem.h"

void check_legacy(void)
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

CUmemAllocationProp vmm_prop(CUmemAllocationHandleType types)
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

void check_vmm(void)
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

void check_host_pointer(void)
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

/* cuMemGetInfo counts cuMemAlloc and cuMemCreate memory of the device, and
 * CUDADRV_TOTAL_MEM bounds it. */
void check_meminfo(void)
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
