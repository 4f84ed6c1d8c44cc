/* SPDX-License-Identifier: MIT */
/* cudadrv: initialisation, devices, tracing. */
#include "cudadrv.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

pthread_mutex_t cudadrv_lock = PTHREAD_MUTEX_INITIALIZER;

/* pid that ran cuInit: a forked child inherits the state but, like with
 * the real driver, must not use it ("initialization error"). */
static pid_t init_pid;
/* init_pid == getpid(), without a syscall on every call (a real driver's
 * entry check costs nanoseconds; benchmarks run through this double):
 * set by cuInit, cleared in a fork child. */
static int init_here;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static int device_count = 2;
static pthread_once_t trace_once = PTHREAD_ONCE_INIT;
static int trace_on;

static void trace_init(void)
{
    const char *v = getenv("CUDADRV_TRACE");
    trace_on = v && *v && strcmp(v, "0") != 0;
}

void cudadrv_trace(const char *fmt, ...)
{
    char line[512];
    va_list ap;
    int n;

    pthread_once(&trace_once, trace_init);
    if (!trace_on)
        return;
    n = snprintf(line, sizeof(line), "cudadrv[%d]: ", (int)getpid());
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    strcat(line, "\n");
    /* One write per line so lines of concurrent processes do not mix. */
    if (write(STDERR_FILENO, line, strlen(line)) < 0)
        return;
}

static void forked_child(void)
{
    __atomic_store_n(&init_here, 0, __ATOMIC_RELAXED);
}

static void atfork_init(void)
{
    pthread_atfork(NULL, NULL, forked_child);
}

CUresult cudadrv_check_init(void)
{
    return __atomic_load_n(&init_here, __ATOMIC_ACQUIRE) ? CUDA_SUCCESS
                                                          : CUDA_ERROR_NOT_INITIALIZED;
}

int cudadrv_device_count(void)
{
    return device_count;
}

CUresult CUDAAPI cuInit(unsigned int flags)
{
    const char *v = getenv("CUDADRV_DEVICE_COUNT");
    CUresult rc = CUDA_SUCCESS;

    cudadrv_trace("cuInit(%u)", flags);
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&cudadrv_lock);
    if (init_pid != 0 && init_pid != getpid()) {
        rc = CUDA_ERROR_NOT_INITIALIZED;
    } else if (init_pid == 0) {
        if (v && *v) {
            int n = atoi(v);
            device_count = n < 0 ? 0 : n > CUDADRV_MAX_DEVICES ? CUDADRV_MAX_DEVICES : n;
        }
        init_pid = getpid();
        pthread_once(&atfork_once, atfork_init);
        cudadrv_devmem_setup();
        __atomic_store_n(&init_here, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&cudadrv_lock);
    if (rc == CUDA_SUCCESS && device_count == 0)
        rc = CUDA_ERROR_NO_DEVICE;
    return rc;
}

CUresult CUDAAPI cuDriverGetVersion(int *version)
{
    if (!version)
        return CUDA_ERROR_INVALID_VALUE;
    *version = CUDADRV_DRIVER_VERSION;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetCount(int *count)
{
    CUresult rc = cudadrv_check_init();

    if (rc != CUDA_SUCCESS)
        return rc;
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    *count = device_count;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal)
{
    CUresult rc = cudadrv_check_init();

    if (rc != CUDA_SUCCESS)
        return rc;
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    if (ordinal < 0 || ordinal >= device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

/* An H100-like device with VMM and POSIX-fd export. FABRIC is reported
 * supported but cuMemCreate refuses it, as measured on the H200 host
 * without an IMEX channel. */
static int device_attribute(CUdevice_attribute a, int dev)
{
    switch (a) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: return 1024;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: return 32;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: return 132;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: return 1;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: return 0x18 + dev;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: return 1;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: return 9;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: return 0;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS: return 1;
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES:
        return CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    case CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED: return 1;
    default: return 0;
    }
}

CUresult CUDAAPI cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    CUresult rc = cudadrv_check_init();

    if (rc != CUDA_SUCCESS)
        return rc;
    if (!pi || (int)attrib <= 0 || attrib >= CU_DEVICE_ATTRIBUTE_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    if (dev < 0 || dev >= device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    *pi = device_attribute(attrib, dev);
    return CUDA_SUCCESS;
}

void cudadrv_devmem_setup(void)
{
    devmem_setup("CUDADRV", CUDADRV_DEFAULT_TOTAL);
}

CUresult cudadrvMemStats(int device, struct devmem_stats *st)
{
    if (!st || device < 0 || device >= CUDADRV_MAX_DEVICES)
        return CUDA_ERROR_INVALID_VALUE;
    cudadrv_devmem_setup();
    devmem_stats(device, st);
    return CUDA_SUCCESS;
}
