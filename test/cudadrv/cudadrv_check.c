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
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test/cudadrv/cudadrv_check.h"

int check_passed, check_failed;

static void *lib;

void *sym(const char *name)
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
    printf("cudadrv_check: %d passed, %d failed\n", check_passed, check_failed);
    return check_failed ? 1 : 0;
}
