/* SPDX-License-Identifier: MIT */
/*
 * zeapp: the Level Zero plumbing the test programs share: how the program
 * reaches the loader (--route), init, driver/device/context, an immediate
 * command list, IPC get/open/close by route, result names and data
 * patterns. Nothing here knows about ipcbyval: these are the "unmodified
 * applications" ipcbyval is tested against.
 */
#ifndef ZEAPP_H
#define ZEAPP_H

#include <level_zero/ze_api.h>
#include <level_zero/ze_ddi.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * How the program calls the loader:
 *  symbol  direct calls (the binary links -lze_loader)
 *  dlsym   dlopen("libze_loader.so.1", RTLD_LOCAL|RTLD_NOW) + dlsym, the
 *          oneCCL/libfabric way
 *  ddi     dlsym as above, then the IPC calls through the tables that
 *          zeGetMemProcAddrTable / zeGetEventPoolProcAddrTable return
 *  zex     dlsym as above; get/open through zexMemGetIpcHandles /
 *          zexMemOpenIpcHandles from zeDriverGetExtensionFunctionAddress
 */
enum zeapp_route { ZEAPP_ROUTE_SYMBOL, ZEAPP_ROUTE_DLSYM, ZEAPP_ROUTE_DDI, ZEAPP_ROUTE_ZEX };
/* symbol where the binary links the loader, dlsym where it cannot */
#define ZEAPP_DEFAULT_ROUTE                                                              \
    (zeapp_route_available(ZEAPP_ROUTE_SYMBOL) ? ZEAPP_ROUTE_SYMBOL : ZEAPP_ROUTE_DLSYM)

/* Every entry point the programs use, as <suffix>: zeInit is Init. */
#define ZEAPP_FUNCS(X)                                                                   \
    X(Init)                                                                              \
    X(DriverGet)                                                                         \
    X(DriverGetExtensionFunctionAddress)                                                 \
    X(DeviceGet)                                                                         \
    X(ContextCreate)                                                                     \
    X(ContextDestroy)                                                                    \
    X(MemAllocDevice)                                                                    \
    X(MemAllocHost)                                                                      \
    X(MemFree)                                                                           \
    X(MemGetAllocProperties)                                                             \
    X(MemGetIpcHandle)                                                                   \
    X(MemOpenIpcHandle)                                                                  \
    X(MemCloseIpcHandle)                                                                 \
    X(CommandListCreateImmediate)                                                        \
    X(CommandListAppendMemoryCopy)                                                       \
    X(CommandListDestroy)                                                                \
    X(EventPoolCreate)                                                                   \
    X(EventPoolDestroy)                                                                  \
    X(EventPoolGetIpcHandle)                                                             \
    X(EventPoolOpenIpcHandle)                                                            \
    X(EventPoolCloseIpcHandle)                                                           \
    X(EventCreate)                                                                       \
    X(EventDestroy)                                                                      \
    X(EventHostSignal)                                                                   \
    X(EventHostSynchronize)                                                              \
    X(EventQueryStatus)                                                                  \
    X(EventHostReset)

/* compute-runtime include/level_zero/driver_experimental/zex_memory.h */
typedef ze_result_t(ZE_APICALL *zeapp_pfn_zex_get_t)(ze_context_handle_t hContext,
                                                     const void *ptr, uint32_t *numIpcHandles,
                                                     ze_ipc_mem_handle_t *pIpcHandles);
typedef ze_result_t(ZE_APICALL *zeapp_pfn_zex_open_t)(ze_context_handle_t hContext,
                                                      ze_device_handle_t hDevice,
                                                      uint32_t numIpcHandles,
                                                      ze_ipc_mem_handle_t *pIpcHandles,
                                                      ze_ipc_memory_flags_t flags, void **pptr);

struct zeapp {
    char who[32];          /* message prefix: "rank 1", "importer" */
    void (*die)(int code); /* exit, or MPI_Abort for the MPI programs */
    enum zeapp_route route;
    void *loader; /* dlopen handle, NULL on the symbol route */
#define ZEAPP_PFN(n) ze_pfn##n##_t n;
    ZEAPP_FUNCS(ZEAPP_PFN)
#undef ZEAPP_PFN
    zeapp_pfn_zex_get_t zex_get;
    zeapp_pfn_zex_open_t zex_open;
    ze_driver_handle_t driver;
    ze_device_handle_t device;
    ze_context_handle_t context;
    ze_command_list_handle_t list; /* immediate, synchronous */
};

/* Parse "symbol|dlsym|ddi|zex"; returns -1 for anything else, and for
 * the symbol route in a binary not linked with the loader (the _dl ones). */
int zeapp_route_parse(const char *name);
bool zeapp_route_available(enum zeapp_route route);
const char *zeapp_route_name(enum zeapp_route route);
const char *zeapp_result_name(ze_result_t r);

/* Print "<who>: <what> failed: 0x78000004 (ZE_RESULT_ERROR_...)" and die(1). */
void zeapp_fail(struct zeapp *app, const char *what, ze_result_t r);
/* Print "<who>: <formatted message>" and die(1). */
void zeapp_die(struct zeapp *app, const char *fmt, ...)
    __attribute__((format(printf, 2, 3), noreturn));

/* Resolve the entry points for `route`, zeInit, first driver and device, a
 * context and an immediate synchronous command list. Dies on failure. */
void zeapp_init(struct zeapp *app, enum zeapp_route route, const char *who,
                void (*die)(int code));
void zeapp_fini(struct zeapp *app);

/* Allocations, dying on failure. */
void *zeapp_alloc_device(struct zeapp *app, size_t size);
void *zeapp_alloc_host(struct zeapp *app, size_t size);
void zeapp_free(struct zeapp *app, void *ptr);
void zeapp_copy(struct zeapp *app, void *dst, const void *src, size_t size);

/* IPC through the route: returns the driver's result, does not die. */
ze_result_t zeapp_ipc_get(struct zeapp *app, void *ptr, ze_ipc_mem_handle_t *handle);
ze_result_t zeapp_ipc_open(struct zeapp *app, const ze_ipc_mem_handle_t *handle, void **ptr);
ze_result_t zeapp_ipc_close(struct zeapp *app, void *ptr);
/* The API name a route's get/open reports failures under. */
const char *zeapp_ipc_get_name(const struct zeapp *app);
const char *zeapp_ipc_open_name(const struct zeapp *app);

/*
 * An IPC event pool of two events (zeapp_events.c). The exporter resets
 * event 0 and signals event 1 before it hands out the pool handle; the
 * importer must read event 1 signalled (an import does not reset events)
 * and signals event 0, which the exporter then waits for. Each dies on
 * failure, naming `peer` ("rank 0", "the exporter").
 */
struct zeapp_pool {
    ze_event_pool_handle_t pool;
    ze_event_handle_t ev[2];
};
void zeapp_pool_create(struct zeapp *app, struct zeapp_pool *p);
void zeapp_pool_export(struct zeapp *app, struct zeapp_pool *p, ze_ipc_event_pool_handle_t *h);
/* Open the peer's pool (closing close_fd, if >= 0, once opened), check
 * event 1, signal event 0, close. */
void zeapp_pool_import(struct zeapp *app, const ze_ipc_event_pool_handle_t *h, int close_fd,
                       const char *peer);
void zeapp_pool_check(struct zeapp *app, struct zeapp_pool *p, const char *peer);
void zeapp_pool_destroy(struct zeapp *app, struct zeapp_pool *p);

/* Deterministic test data: byte j of (seed) is a hash of (seed, j / 8). */
uint64_t zeapp_seed(int rank, int alloc, int iter);
void zeapp_pattern(void *buf, size_t offset, size_t len, uint64_t seed);
/* Compare buf[0..len) with the pattern at offset; returns the index of the
 * first wrong byte or -1. *got_p and *want_p receive the bytes there. */
long zeapp_pattern_check(const void *buf, size_t offset, size_t len, uint64_t seed,
                         unsigned *got_p, unsigned *want_p);

/* CLOCK_MONOTONIC in ms. */
double zeapp_now_ms(void);

/* zeapp_init's die callback for programs that just exit. */
void zeapp_exit(int code);

/* One message of len bytes on a Unix socket, with fd attached by
 * SCM_RIGHTS when fd >= 0. 0, or -1 (the peer is gone: its status tells
 * the story). */
int zeapp_send_fd(int sock, const void *msg, size_t len, int fd);

/* Receive one message of exactly len bytes; *fd_p is the fd attached by
 * SCM_RIGHTS (O_CLOEXEC) or -1. 0, or -1 at the end of the stream. */
int zeapp_recv_fd(int sock, void *msg, size_t len, int *fd_p);

/* Strict unsigned parse of an option value; exits 2 on garbage. */
unsigned long zeapp_parse_ulong(const char *opt, const char *val);

#endif /* ZEAPP_H */
