/* SPDX-License-Identifier: MIT */
/*
 * cudadrv: a CPU test double of the CUDA driver, built as libcuda.so.1 for
 * tests only (LD_LIBRARY_PATH). "Device" memory is host memory backed by
 * memfds mapped MAP_SHARED, so IPC between processes is real: a legacy IPC
 * handle is copy-by-value (it names the exporter's memfd through /proc), a
 * VMM allocation is exported as a process-local fd, exactly the gap that
 * ipcbyval fills on the real driver.
 *
 * Internal symbols use the prefix cudadrv_; the version script exports
 * only cu[A-Z]*.
 *
 * Environment (read by the double only):
 *   CUDADRV_DEVICE_COUNT=N       emulated devices, 0..8 (default 2)
 *   CUDADRV_TRACE=1              one stderr line per IPC/VMM/lookup call,
 *                                so tests can count driver calls
 *   CUDADRV_PROCADDR_NOTFOUND=error  cuGetProcAddress misses return
 *                                CUDA_ERROR_NOT_FOUND (default: SUCCESS
 *                                with a NULL pointer, as cuda.h documents)
 *   CUDADRV_TOTAL_MEM=SIZE       device memory per device (default 81559M,
 *                                an H100's); cuMemAlloc and cuMemCreate fail
 *                                with CUDA_ERROR_OUT_OF_MEMORY beyond it
 *   CUDADRV_LEDGER=PATH          the file that cooperating processes share
 *                                to account device memory (test/devmem)
 *
 * Test-only entry point (not in the real driver; dlsym it):
 *   CUresult cudadrvMemStats(int device, struct devmem_stats *st)
 * fills total, used, freed_held (bytes the allocating process freed that
 * importers still map), allocs and shared for the device, from the ledger.
 * It needs no cuInit and no context: a third process can call it.
 */
#ifndef CUDADRV_H
#define CUDADRV_H

#include <cuda.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "test/devmem/devmem.h"

/* The header maps these names to their newest versions; the double also
 * exports the older entry points under their plain names, as libcuda does. */
#undef cuCtxCreate
#undef cuCtxDestroy
#undef cuCtxPushCurrent
#undef cuCtxPopCurrent
#undef cuDevicePrimaryCtxRelease
#undef cuIpcOpenMemHandle
#undef cuGetProcAddress
#undef cuDevicePrimaryCtxReset
#undef cuDevicePrimaryCtxSetFlags
#undef cuMemGetInfo

CUresult CUDAAPI cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev);
CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);
CUresult CUDAAPI cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *params,
                                int nparams, unsigned int flags, CUdevice dev);
CUresult CUDAAPI cuCtxDestroy(CUcontext ctx);
CUresult CUDAAPI cuCtxPushCurrent(CUcontext ctx);
CUresult CUDAAPI cuCtxPopCurrent(CUcontext *pctx);
CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev);
CUresult CUDAAPI cuDevicePrimaryCtxReset(CUdevice dev);
CUresult CUDAAPI cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags);
CUresult CUDAAPI cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle,
                                    unsigned int flags);
CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int version,
                                  cuuint64_t flags);
/* Per-thread-default-stream variants handed out by cuGetProcAddress. */
CUresult CUDAAPI cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n);
CUresult CUDAAPI cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void *src, size_t n);
CUresult CUDAAPI cuMemcpyDtoH_v2_ptds(void *dst, CUdeviceptr src, size_t n);
CUresult CUDAAPI cuMemcpyDtoD_v2_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n);
CUresult CUDAAPI cuMemsetD8_v2_ptds(CUdeviceptr dst, unsigned char uc, size_t n);

#define CUDADRV_DRIVER_VERSION 13000
#define CUDADRV_GRANULARITY    ((size_t)2 << 20)
#define CUDADRV_MAX_DEVICES    8
#define CUDADRV_LEGACY_NAME    "cudadrv-legacy-"
#define CUDADRV_VMM_NAME       "cudadrv-vmm:"
/* cuMemGetInfo's total without CUDADRV_TOTAL_MEM: an H100 80GB HBM3. */
#define CUDADRV_DEFAULT_TOTAL  ((uint64_t)81559 << 20)
/* Address ranges of destroyed contexts kept inaccessible (oldest go first). */
#define CUDADRV_DEAD_MAX       256

/** Test-only: device memory statistics from the ledger (see above). */
CUresult cudadrvMemStats(int device, struct devmem_stats *st);
/** Test-only: IPC imports held now, closes on a destroyed context so far. */
CUresult cudadrvIpcStats(uint64_t *live_p, uint64_t *dead_ctx_closes_p);

/* One lock for every table of the double: it is a test tool, not a
 * performance target, and one lock keeps TSan runs of the shim quiet. */
extern pthread_mutex_t cudadrv_lock;

/* drv_core.c */

/** CUDA_SUCCESS when cuInit ran in this process (not in a fork parent). */
CUresult cudadrv_check_init(void);
/** Number of emulated devices (CUDADRV_DEVICE_COUNT, default 2). */
int cudadrv_device_count(void);
/** The calling thread's current context, or NULL. */
CUcontext cudadrv_ctx_current(void);
/** Device of a live context, or -1 when ctx is not one. */
int cudadrv_ctx_device(CUcontext ctx);
/** Device of the current context; CUDA_ERROR_INVALID_CONTEXT if none,
 * CUDA_ERROR_CONTEXT_IS_DESTROYED if it was destroyed (or is an inactive
 * primary context). */
CUresult cudadrv_current_device(int *dev_p);
/** cuInit ran and the current context is live (errors as above). */
CUresult cudadrv_need_ctx(void);
/** One stderr line per call when CUDADRV_TRACE=1 (lets tests count calls). */
void cudadrv_trace(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* drv_mem.c: the address-range registry shared by all memory kinds. */

enum cudadrv_kind {
    CUDADRV_LEGACY  = 1 << 0, /* cuMemAlloc */
    CUDADRV_IPC     = 1 << 1, /* cuIpcOpenMemHandle of a legacy handle */
    CUDADRV_RESERVE = 1 << 2, /* cuMemAddressReserve */
    CUDADRV_MAP     = 1 << 3, /* cuMemMap inside a reservation */
    CUDADRV_DEAD    = 1 << 4, /* memory of a destroyed context: a fault */
};
#define CUDADRV_ANY (CUDADRV_LEGACY | CUDADRV_IPC | CUDADRV_RESERVE | CUDADRV_MAP)

struct cudadrv_alloc;

struct cudadrv_region {
    enum cudadrv_kind kind;
    uintptr_t base;
    size_t size;          /* what the driver reports */
    size_t map_len;       /* what is mmap'd (page rounded) */
    int device;
    CUcontext ctx;        /* LEGACY/IPC: owning context (dies with it); else NULL */
    uint64_t buffer_id;   /* CU_POINTER_ATTRIBUTE_BUFFER_ID */
    uint64_t block_id;    /* CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID */
    int fd;               /* LEGACY: the backing memfd, kept for IPC */
    unsigned refs;        /* IPC: opens minus closes */
    pid_t peer_pid;       /* IPC: exporter identity, the refcount key */
    uint64_t peer_ino;
    uint64_t peer_serial;
    struct cudadrv_alloc *alloc; /* MAP: physical allocation */
    size_t offset;               /* MAP: offset into it */
    struct cudadrv_region *reserve; /* MAP: enclosing reservation */
    unsigned access[CUDADRV_MAX_DEVICES]; /* MAP: CU_MEM_ACCESS_FLAGS_* */
    struct devmem_ref mem;       /* LEGACY/IPC: device memory held */
    uint64_t dead_seq;           /* DEAD: age, the oldest is unmapped first */
};

struct cudadrv_region *cudadrv_region_new(enum cudadrv_kind kind);
void cudadrv_region_del(struct cudadrv_region *r);
/** Region of one of the kinds in mask that contains addr, or NULL. */
struct cudadrv_region *cudadrv_region_find(uintptr_t addr, unsigned mask);
size_t cudadrv_region_count(void);
struct cudadrv_region *cudadrv_region_get(size_t i);
/** Per-process counters, never reused (like the real BUFFER_ID). */
uint64_t cudadrv_next_buffer_id(void);
uint64_t cudadrv_next_block_id(void);
/** Access a mapping grants the CPU emulation: the union over devices. */
unsigned cudadrv_map_access(const struct cudadrv_region *r);
/** 1 when every byte of [p, p+n) is device memory the caller may access. */
int cudadrv_dev_range_ok(uintptr_t p, size_t n, int write);
/** CUDA_ERROR_ILLEGAL_ADDRESS when [p, p+n) touches a destroyed range
 * (cudadrv_lock held). */
CUresult cudadrv_dead_check(uintptr_t p, size_t n);
/** Caller holds cudadrv_lock: frees the context's cuMemAlloc memory and
 * closes its legacy IPC mappings (VMM memory is no context's). */
void cudadrv_ctx_release_state(CUcontext ctx);
/** Caller holds cudadrv_lock: makes r's range inaccessible and keeps it
 * reserved as a DEAD region (r itself is reused for that). */
void cudadrv_region_kill(struct cudadrv_region *r);
/** Device memory accounting of this library (first use sets it up). */
void cudadrv_devmem_setup(void);

/* drv_vmm.c: physical allocations (CUmemGenericAllocationHandle). */

struct cudadrv_alloc {
    CUmemGenericAllocationHandle handle;
    int fd;
    size_t size;
    CUmemAllocationProp prop;
    unsigned refs;   /* create/import/retain minus release */
    unsigned maps;   /* live cuMemMap mappings */
    uint64_t block_id;
    int created;     /* cuMemCreate (the allocating side), not an import */
    struct devmem_ref mem;
};
/** drv_vmm_ctl.c, under cudadrv_lock: an export fd of allocation a (a new
 * open file naming its memfd; CUDADRV_VMM_EXPORT=memfd: the memfd itself),
 * or -1. */
int cudadrv_vmm_ctl_export(const struct cudadrv_alloc *a);
/** The allocation memfd an export fd of any process names, opened anew
 * (O_CLOEXEC), or -1 when it is no export or its allocation is gone. */
int cudadrv_vmm_ctl_import(int fd);

/** Live allocation for a handle (refs > 0), or NULL. */
struct cudadrv_alloc *cudadrv_alloc_lookup(CUmemGenericAllocationHandle h);
/** Imported (not created) allocations alive; caller holds cudadrv_lock. */
size_t cudadrv_alloc_imports(void);
/** A mapping of a was removed; frees a once nothing refers to it. */
void cudadrv_alloc_unmapped(struct cudadrv_alloc *a);

#endif
