/* SPDX-License-Identifier: MIT */
/*
 * zedrv: a Level Zero test driver that the real loader loads with
 * ZE_ENABLE_ALT_DRIVERS. Memory is memfd + mmap(MAP_SHARED); IPC handles
 * are byte-identical to Intel's classic (or, on request, opaque) layout.
 * This header is private to test/zedrv/.
 */
#ifndef ZEDRV_H
#define ZEDRV_H

#include <level_zero/ze_api.h>
#include <level_zero/ze_ddi.h>
#include <level_zero/zes_ddi.h>
#include <level_zero/zet_ddi.h>

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#include "test/devmem/devmem.h"

#define ZEDRV_EXPORT __attribute__((visibility("default")))

/* memfd names: the importer recognises a zedrv buffer by them. */
#define ZEDRV_MEMFD_ALLOC "zedrv-alloc"
#define ZEDRV_MEMFD_EVENT_POOL "zedrv-event-pool"

/* InternalIpcMemoryType (shared/source/unified_memory/unified_memory.h). */
#define ZEDRV_IPC_TYPE_DEVICE 0u
#define ZEDRV_IPC_TYPE_HOST 1u
/* IpcHandleType::fdHandle (level_zero/core/source/helpers/api_handle_helper.h). */
#define ZEDRV_IPC_HANDLE_FD 0u

/* Packets per event, checked on pool import like the real driver does. */
#define ZEDRV_EVENT_MAX_PACKETS 1u
/* One cache line of shared state per event. */
#define ZEDRV_EVENT_STRIDE 64u

enum zedrv_layout {
    ZEDRV_LAYOUT_CLASSIC = 0, /* IpcMemoryData, IpcEventPoolData */
    ZEDRV_LAYOUT_OPAQUE = 1,  /* IpcOpaqueMemoryData, IpcOpaqueEventPoolData */
};

enum zedrv_ctx_destroy {
    ZEDRV_CTX_DESTROY_IPC = 0, /* release the context's IPC mappings (default) */
    ZEDRV_CTX_DESTROY_ALL = 1, /* and free its allocations (the spec allows it) */
    ZEDRV_CTX_DESTROY_KEEP = 2, /* release nothing, as compute-runtime */
};

/* Settings read once from the environment (see README.md). */
struct zedrv_config {
    enum zedrv_layout layout; /* ZEDRV_IPC_LAYOUT=classic|opaque */
    bool debug;               /* ZEDRV_DEBUG=1 */
    bool fd_spread;           /* ZEDRV_FD_SPREAD=0 turns it off */
    bool id_address;          /* ZEDRV_ALLOC_ID=address: ids from addresses */
    enum zedrv_ctx_destroy ctx_destroy; /* ZEDRV_CONTEXT_DESTROY=ipc|all|keep */
    bool pool_device; /* EnableDeviceUsmAllocationPool=0 turns USM pooling off */
    bool pool_host;   /* EnableHostUsmAllocationPool=0 */
};

/* Device memory without ZEDRV_TOTAL_MEM (a Data Center GPU Max 1550's). */
#define ZEDRV_DEFAULT_TOTAL ((uint64_t)128 << 30)

/* Parse the environment on first use; safe from any thread. */
const struct zedrv_config *zedrv_config(void);

void zedrv_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
#define ZEDRV_LOG(...)                                                         \
    do {                                                                       \
        if (zedrv_config()->debug)                                             \
            zedrv_log(__VA_ARGS__);                                            \
    } while (0)

/* One lock for every registry: the driver is a test fixture, not fast. */
extern pthread_mutex_t zedrv_lock;

/* The loader passes these around as opaque pointers; the types are ours. */
#define ZEDRV_MAGIC_DRIVER 0x7a647276u  /* "zdrv" */
#define ZEDRV_MAGIC_DEVICE 0x7a646576u  /* "zdev" */
#define ZEDRV_MAGIC_CONTEXT 0x7a637478u /* "zctx" */
#define ZEDRV_MAGIC_POOL 0x7a706f6fu    /* "zpoo" */
#define ZEDRV_MAGIC_EVENT 0x7a65766eu   /* "zevn" */
#define ZEDRV_MAGIC_CMDLIST 0x7a636d6cu /* "zcml" */
#define ZEDRV_MAGIC_QUEUE 0x7a717565u   /* "zque" */

struct _ze_driver_handle_t {
    uint32_t magic;
};

struct _ze_device_handle_t {
    uint32_t magic;
    struct _ze_driver_handle_t *driver;
};

/* Contexts live in a fixed pool (driver.c): a destroyed handle is never
 * freed memory, and handle values are reused, the last destroyed first. */
struct _ze_context_handle_t {
    uint32_t magic;
    uint32_t gen; /* destroys of this slot: tells its incarnations apart */
    struct _ze_driver_handle_t *driver;
};

struct _ze_event_pool_handle_t {
    uint32_t magic;
    struct _ze_event_pool_handle_t *next; /* every live pool, under zedrv_lock */
    ze_context_handle_t context;
    uint32_t count;
    ze_event_pool_flags_t flags;
    bool imported;
    int memfd;     /* owner only; -1 for an imported pool */
    int export_fd; /* fd written into IPC handles; -1 until the first get */
    void *base;
    size_t map_size;
};

struct _ze_event_handle_t {
    uint32_t magic;
    ze_event_pool_handle_t pool;
    uint32_t index;
    uint64_t *state; /* in the pool's shared mapping */
};

/* The objects the DDI tables point at: one driver with one device. */
extern struct _ze_driver_handle_t zedrv_driver;
extern struct _ze_device_handle_t zedrv_device;

bool zedrv_context_ok(ze_context_handle_t context);
bool zedrv_device_ok(ze_device_handle_t device);

/*
 * fd helpers (ipc.c). An exported fd is a dup of the memfd, placed at a
 * pid-dependent number so that one rank's fd number does not happen to name
 * a live export in its peer (real dma-buf numbers are low and would
 * collide, and the import would silently map the peer's own buffer).
 */
int zedrv_fd_export(int memfd);
/* True if fd is an open memfd named `name` that is not one of ours that
 * the driver keeps internally (the real driver keeps GEM handles, not fds). */
bool zedrv_fd_importable(int fd, const char *name);
/* pidfd_open(pid) + pidfd_getfd(fd): the opaque layout's import. */
int zedrv_fd_from_pid(pid_t pid, int fd);
/* A memfd of `size` bytes mapped MAP_SHARED; the memfd is returned in *fd_p. */
void *zedrv_shm_create(const char *name, size_t size, int *fd_p, size_t *map_size_p);
/* Map an imported memfd whole; its size comes from fstat. */
void *zedrv_shm_map(int fd, size_t *map_size_p);

/* A pooled allocation: a chunk of a USM pool's buffer (usm_pool.c). */
struct zedrv_chunk {
    struct zedrv_chunk *next; /* by offset */
    size_t offset;            /* from the pool's base */
    size_t size;              /* requested (zeMemGetAddressRange) */
    size_t span;              /* taken from the pool */
    ze_context_handle_t context;
};

/* Allocation registry (mem.c). Callers hold zedrv_lock. */
struct zedrv_alloc {
    struct zedrv_alloc *next;
    char *base;
    size_t size;     /* requested size (zeMemGetAddressRange) */
    size_t map_size; /* mmap length */
    uint64_t id;     /* zeMemGetAllocProperties().id, never reused */
    ze_memory_type_t type;
    ze_context_handle_t context;
    ze_device_handle_t device;
    bool imported;    /* mapping made by zeMemOpenIpcHandle */
    uint32_t ctx_gen; /* import: its context's incarnation (context->gen) */
    int memfd;        /* owner: backing memfd; import: -1 */
    int export_fd;    /* fd in handed-out IPC handles; -1 if none */
    uint32_t export_refs; /* gets not yet matched by a put */
    struct devmem_ref mem; /* device memory held (test/devmem) */
    /* A USM pool's buffer: never handed out itself, its chunks are. */
    bool pool;
    unsigned bucket;             /* which size class it serves */
    struct zedrv_chunk *chunks;  /* live chunks, by offset */
    uint64_t export_offset;      /* poolOffset of the get that opened export_fd */
};

struct zedrv_alloc *zedrv_alloc_find(const void *ptr);
/* A new allocation backed by its own memfd (device memory accounted),
 * registered; a USM pool's buffer of size class pool_class when >= 0.
 * Takes zedrv_lock itself. NULL with *r set on failure. */
struct zedrv_alloc *zedrv_alloc_new(ze_context_handle_t context, ze_device_handle_t device,
                                    size_t size, size_t align, ze_memory_type_t type,
                                    int pool_class, ze_result_t *r);
/* Consume one allocation id, as a pooled allocation does. */
void zedrv_alloc_take_id(void);
/* The allocations, for the pool registry's scans. */
struct zedrv_alloc *zedrv_alloc_first(void);
/* IPC mappings held now (takes zedrv_lock). */
uint64_t zedrv_alloc_count_imports(void);
struct zedrv_alloc *zedrv_alloc_find_export(int fd);
bool zedrv_fd_is_internal(int fd);
/* Register a mapping made by an IPC open of memfd fd; returns NULL on
 * ENOMEM. The mapping holds the device memory the fd's ledger tag names. */
struct zedrv_alloc *zedrv_alloc_add_import(ze_context_handle_t context,
                                           ze_device_handle_t device, void *base,
                                           size_t map_size, ze_memory_type_t type, int fd);
/* Unlink and release one allocation: unmap, close its fds. */
void zedrv_alloc_release(struct zedrv_alloc *alloc);
/* zeMemFree and zeMemCloseIpcHandle, which are one call in compute-runtime
 * (Context::closeIpcMemHandle is freeMem): releases the allocation or IPC
 * mapping that contains ptr, ZE_RESULT_ERROR_INVALID_ARGUMENT if none. */
ze_result_t zedrv_free_any(const void *ptr, const char *what);
/* zeContextDestroy: what the context takes with it (ZEDRV_CONTEXT_DESTROY). */
void zedrv_alloc_context_destroyed(ze_context_handle_t context);
/* Device memory accounting of this library (first use sets it up). */
void zedrv_devmem_setup(void);

/* USM pools (usm_pool.c), modelled on compute-runtime's
 * UsmMemAllocPoolsManager. zedrv_pool_alloc: false when the allocation
 * is not one a pool serves (the caller allocates it alone), else *r is
 * the result and *ptr the chunk. Takes zedrv_lock. */
bool zedrv_pool_alloc(ze_context_handle_t context, ze_device_handle_t device, size_t size,
                      size_t alignment, ze_memory_type_t type, uint32_t flags, const void *pnext,
                      void **ptr, ze_result_t *r);
/* The live chunk of pool a that contains ptr, or NULL. Caller holds zedrv_lock. */
struct zedrv_chunk *zedrv_pool_chunk(const struct zedrv_alloc *a, const void *ptr);
/* zeMemFree of ptr in pool a (Context::freeMem): the pool's IPC export
 * loses one reference, the chunk goes back, and an empty pool beyond
 * one per size class is released. Caller holds zedrv_lock. */
ze_result_t zedrv_pool_free(struct zedrv_alloc *a, const void *ptr);
/* ZEDRV_CONTEXT_DESTROY=all: free the chunks context allocated; true
 * when it freed any (a may be gone). Caller holds zedrv_lock. */
bool zedrv_pool_context_destroyed(struct zedrv_alloc *a, ze_context_handle_t context);

/* Event pool registry (events.c). Callers of the first two hold zedrv_lock. */
bool zedrv_pool_fd_is_internal(int fd);
ze_event_pool_handle_t zedrv_pool_add(ze_context_handle_t context, ze_event_pool_flags_t flags,
                                      uint32_t count, void *base, size_t map_size, int memfd,
                                      bool imported);
/* Unlink, unmap and free a pool; takes zedrv_lock itself. */
void zedrv_pool_release(ze_event_pool_handle_t pool);
/* zeContextDestroy: under ZEDRV_CONTEXT_DESTROY=all, release the
 * context's own pools (handles poisoned, not freed); takes zedrv_lock. */
void zedrv_pools_context_destroyed(ze_context_handle_t context);

/* --- entry points, each with the exact ze_pfn*_t type of its slot --- */

/* driver.c */
ze_result_t zedrv_init(ze_init_flags_t flags);
ze_result_t zedrv_driver_get(uint32_t *count, ze_driver_handle_t *drivers);
ze_result_t zedrv_driver_get_api_version(ze_driver_handle_t, ze_api_version_t *);
ze_result_t zedrv_driver_get_properties(ze_driver_handle_t, ze_driver_properties_t *);
ze_result_t zedrv_driver_get_ipc_properties(ze_driver_handle_t,
                                            ze_driver_ipc_properties_t *);
ze_result_t zedrv_driver_get_extension_properties(ze_driver_handle_t, uint32_t *,
                                                  ze_driver_extension_properties_t *);
ze_result_t zedrv_driver_get_extension_function_address(ze_driver_handle_t,
                                                        const char *, void **);
ze_result_t zedrv_device_get(ze_driver_handle_t, uint32_t *, ze_device_handle_t *);
ze_result_t zedrv_device_get_properties(ze_device_handle_t, ze_device_properties_t *);
ze_result_t zedrv_device_get_queue_groups(ze_device_handle_t, uint32_t *,
                                          ze_command_queue_group_properties_t *);
ze_result_t zedrv_device_get_memory_properties(ze_device_handle_t, uint32_t *,
                                               ze_device_memory_properties_t *);
ze_result_t zedrv_context_create(ze_driver_handle_t, const ze_context_desc_t *,
                                 ze_context_handle_t *);
ze_result_t zedrv_context_destroy(ze_context_handle_t);
ze_result_t zedrv_context_get_status(ze_context_handle_t);

/* mem.c */
ze_result_t zedrv_mem_alloc_device(ze_context_handle_t, const ze_device_mem_alloc_desc_t *,
                                   size_t, size_t, ze_device_handle_t, void **);
ze_result_t zedrv_mem_alloc_host(ze_context_handle_t, const ze_host_mem_alloc_desc_t *,
                                 size_t, size_t, void **);
ze_result_t zedrv_mem_alloc_shared(ze_context_handle_t, const ze_device_mem_alloc_desc_t *,
                                   const ze_host_mem_alloc_desc_t *, size_t, size_t,
                                   ze_device_handle_t, void **);
ze_result_t zedrv_mem_free(ze_context_handle_t, void *);
ze_result_t zedrv_mem_get_alloc_properties(ze_context_handle_t, const void *,
                                           ze_memory_allocation_properties_t *,
                                           ze_device_handle_t *);
ze_result_t zedrv_mem_get_address_range(ze_context_handle_t, const void *, void **,
                                        size_t *);

/* ipc.c */
/* The IPC handle of alloc a (export_fd set), in the configured layout;
 * pool_offset is where the pointer lies in a pool's buffer (else 0). */
void zedrv_handle_write(ze_ipc_mem_handle_t *h, const struct zedrv_alloc *a,
                        uint64_t pool_offset);
ze_result_t zedrv_mem_get_ipc_handle(ze_context_handle_t, const void *,
                                     ze_ipc_mem_handle_t *);
ze_result_t zedrv_mem_open_ipc_handle(ze_context_handle_t, ze_device_handle_t,
                                      ze_ipc_mem_handle_t, ze_ipc_memory_flags_t, void **);
ze_result_t zedrv_mem_close_ipc_handle(ze_context_handle_t, const void *);
ze_result_t zedrv_mem_put_ipc_handle(ze_context_handle_t, ze_ipc_mem_handle_t);
ze_result_t zedrv_zex_get_ipc_handles(ze_context_handle_t, const void *, uint32_t *,
                                      ze_ipc_mem_handle_t *);
ze_result_t zedrv_zex_open_ipc_handles(ze_context_handle_t, ze_device_handle_t, uint32_t,
                                       ze_ipc_mem_handle_t *, ze_ipc_memory_flags_t,
                                       void **);

/* ipc_exp.c: entry points newer than the loader's 1.4 headers (declared
 * there: their types are not in those headers). */
ze_result_t zedrv_mem_get_ipc_handle_with_properties(ze_context_handle_t, const void *, void *,
                                                     ze_ipc_mem_handle_t *);
ze_result_t zedrv_mem_get_fd_from_ipc_handle(ze_context_handle_t, ze_ipc_mem_handle_t,
                                             uint64_t *);
ze_result_t zedrv_mem_get_ipc_handle_from_fd(ze_context_handle_t, uint64_t,
                                             ze_ipc_mem_handle_t *);
/* The name of a newer entry point -> ours, for zeDriverGetExtensionFunctionAddress. */
void *zedrv_newer_entry_point(const char *name);

/* events.c */
ze_result_t zedrv_event_pool_create(ze_context_handle_t, const ze_event_pool_desc_t *,
                                    uint32_t, ze_device_handle_t *,
                                    ze_event_pool_handle_t *);
ze_result_t zedrv_event_pool_destroy(ze_event_pool_handle_t);
ze_result_t zedrv_event_create(ze_event_pool_handle_t, const ze_event_desc_t *,
                               ze_event_handle_t *);
ze_result_t zedrv_event_destroy(ze_event_handle_t);
ze_result_t zedrv_event_host_signal(ze_event_handle_t);
ze_result_t zedrv_event_host_synchronize(ze_event_handle_t, uint64_t);
ze_result_t zedrv_event_query_status(ze_event_handle_t);
ze_result_t zedrv_event_host_reset(ze_event_handle_t);

/* event_ipc.c */
ze_result_t zedrv_event_pool_get_ipc_handle(ze_event_pool_handle_t,
                                            ze_ipc_event_pool_handle_t *);
ze_result_t zedrv_event_pool_open_ipc_handle(ze_context_handle_t,
                                             ze_ipc_event_pool_handle_t,
                                             ze_event_pool_handle_t *);
ze_result_t zedrv_event_pool_close_ipc_handle(ze_event_pool_handle_t);
ze_result_t zedrv_event_pool_put_ipc_handle(ze_context_handle_t,
                                            ze_ipc_event_pool_handle_t);

/* cmdlist.c */
ze_result_t zedrv_queue_create(ze_context_handle_t, ze_device_handle_t,
                               const ze_command_queue_desc_t *,
                               ze_command_queue_handle_t *);
ze_result_t zedrv_queue_destroy(ze_command_queue_handle_t);
ze_result_t zedrv_queue_execute(ze_command_queue_handle_t, uint32_t,
                                ze_command_list_handle_t *, ze_fence_handle_t);
ze_result_t zedrv_queue_synchronize(ze_command_queue_handle_t, uint64_t);
ze_result_t zedrv_list_create(ze_context_handle_t, ze_device_handle_t,
                              const ze_command_list_desc_t *, ze_command_list_handle_t *);
ze_result_t zedrv_list_create_immediate(ze_context_handle_t, ze_device_handle_t,
                                        const ze_command_queue_desc_t *,
                                        ze_command_list_handle_t *);
ze_result_t zedrv_list_destroy(ze_command_list_handle_t);
ze_result_t zedrv_list_close(ze_command_list_handle_t);
ze_result_t zedrv_list_reset(ze_command_list_handle_t);
ze_result_t zedrv_list_append_barrier(ze_command_list_handle_t, ze_event_handle_t,
                                      uint32_t, ze_event_handle_t *);
ze_result_t zedrv_list_append_memory_copy(ze_command_list_handle_t, void *, const void *,
                                          size_t, ze_event_handle_t, uint32_t,
                                          ze_event_handle_t *);
ze_result_t zedrv_list_append_memory_fill(ze_command_list_handle_t, void *, const void *,
                                          size_t, size_t, ze_event_handle_t, uint32_t,
                                          ze_event_handle_t *);
ze_result_t zedrv_list_append_signal_event(ze_command_list_handle_t, ze_event_handle_t);
ze_result_t zedrv_list_append_wait_on_events(ze_command_list_handle_t, uint32_t,
                                             ze_event_handle_t *);

#endif /* ZEDRV_H */
