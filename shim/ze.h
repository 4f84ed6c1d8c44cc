/* SPDX-License-Identifier: MIT */
/*
 * ze.h - internal interface of the Level Zero part of the shim: routes
 * (ze_entry.c), the memory export and fd conversions (ze_export.c), the
 * event-pool export (ze_event.c), the import backends (ze_import.c) and
 * what a handle's bytes say (ze_handle.c).
 */
#ifndef BYVAL_SHIM_ZE_H
#define BYVAL_SHIM_ZE_H

#include <level_zero/ze_api.h>
#include <level_zero/ze_ddi.h>
#include <stdint.h>

#include "handles/wire.h"

/* Spec 1.6+ entry points, absent from the 1.8.12 headers we build with. */
typedef ze_result_t (*byval_ze_mem_put_fn)(ze_context_handle_t, ze_ipc_mem_handle_t);
typedef ze_result_t (*byval_ze_pool_put_fn)(ze_context_handle_t, ze_ipc_event_pool_handle_t);

/* The 1.6 layouts of the two tables that gained a Put entry. */
typedef struct byval_ze_mem_ddi_1_6 {
    ze_mem_dditable_t base;
    byval_ze_mem_put_fn pfnPutIpcHandle;
} byval_ze_mem_ddi_1_6_t;

typedef struct byval_ze_pool_ddi_1_6 {
    ze_event_pool_dditable_t base;
    byval_ze_pool_put_fn pfnPutIpcHandle;
} byval_ze_pool_ddi_1_6_t;

#define BYVAL_ZE_API_1_6 ZE_MAKE_VERSION(1, 6)
#define BYVAL_ZE_API_1_15 ZE_MAKE_VERSION(1, 15)

/* Spec 1.6 (MemExp) and 1.15 entry points, absent from the 1.8.12 headers. */
typedef ze_result_t (*byval_ze_get_props_fn)(ze_context_handle_t, const void *, void *,
                                             ze_ipc_mem_handle_t *);
typedef ze_result_t (*byval_ze_fd_from_ipc_fn)(ze_context_handle_t, ze_ipc_mem_handle_t,
                                               uint64_t *);
typedef ze_result_t (*byval_ze_ipc_from_fd_fn)(ze_context_handle_t, uint64_t,
                                               ze_ipc_mem_handle_t *);

/* The 1.15 Mem table: 1.6, pfnGetPitchFor2dImage (1.9), then
 * pfnGetIpcHandleWithProperties. */
typedef struct byval_ze_mem_ddi_1_15 {
    byval_ze_mem_ddi_1_6_t v1_6;
    void *pfnGetPitchFor2dImage;
    byval_ze_get_props_fn pfnGetIpcHandleWithProperties;
} byval_ze_mem_ddi_1_15_t;

/* The MemExp table (1.6; the atomics entries came with 1.7). */
typedef struct byval_ze_mem_exp_ddi {
    byval_ze_ipc_from_fd_fn pfnGetIpcHandleFromFileDescriptorExp;
    byval_ze_fd_from_ipc_fn pfnGetFileDescriptorFromIpcHandleExp;
    void *pfnSetAtomicAccessAttributeExp;
    void *pfnGetAtomicAccessAttributeExp;
} byval_ze_mem_exp_ddi_t;

/* Intel extension entry points (compute-runtime ze_api_ext / zex). */
typedef ze_result_t (*byval_zex_get_handles_fn)(ze_context_handle_t, void *, uint32_t *,
                                                ze_ipc_mem_handle_t *);
typedef ze_result_t (*byval_zex_open_handles_fn)(ze_context_handle_t, ze_device_handle_t, uint32_t,
                                                 ze_ipc_mem_handle_t *, ze_ipc_memory_flags_t,
                                                 void **);

/* The loader's exported function `name`, found without linking to it
 * (RTLD_NEXT, else the already-loaded libze_loader.so.1). NULL if absent. */
void *byval_ze_sym(const char *name);

/* Byte offset of the ipcbyval record in a classic-layout handle. */
#define BYVAL_ZE_RECORD_OFF 17

/* Memory IPC, called by every route with the next function on that route. */
ze_result_t byval_ze_get_ipc(ze_pfnMemGetIpcHandle_t next, ze_context_handle_t ctx, const void *ptr,
                             ze_ipc_mem_handle_t *handle);
/* zeMemGetIpcHandleWithProperties: the same export as zeMemGetIpcHandle
 * for the default handle type; other requests (fabric) pass through. */
ze_result_t byval_ze_get_ipc_props(byval_ze_get_props_fn next, ze_context_handle_t ctx,
                                   const void *ptr, void *pNext, ze_ipc_mem_handle_t *handle);
ze_result_t byval_ze_put_ipc(byval_ze_mem_put_fn next, ze_context_handle_t ctx,
                             ze_ipc_mem_handle_t handle);
ze_result_t byval_ze_free(ze_pfnMemFree_t next, ze_context_handle_t ctx, void *ptr);
ze_result_t byval_ze_free_ext(ze_pfnMemFreeExt_t next, ze_context_handle_t ctx,
                              const ze_memory_free_ext_desc_t *desc, void *ptr);
ze_result_t byval_ze_open_ipc(ze_pfnMemOpenIpcHandle_t next, ze_context_handle_t ctx,
                              ze_device_handle_t dev, ze_ipc_mem_handle_t handle,
                              ze_ipc_memory_flags_t flags, void **pptr);
ze_result_t byval_ze_close_ipc(ze_pfnMemCloseIpcHandle_t next, ze_context_handle_t ctx,
                               const void *ptr);
/* zeContextDestroy: release ctx's mappings first, then next. */
ze_result_t byval_ze_context_destroy(ze_pfnContextDestroy_t next, ze_context_handle_t ctx);
ze_result_t byval_zex_get_ipcs(byval_zex_get_handles_fn next, ze_context_handle_t ctx, void *ptr,
                               uint32_t *count, ze_ipc_mem_handle_t *handles);
ze_result_t byval_zex_open_ipcs(byval_zex_open_handles_fn next, ze_context_handle_t ctx,
                                ze_device_handle_t dev, uint32_t count,
                                ze_ipc_mem_handle_t *handles, ze_ipc_memory_flags_t flags,
                                void **pptr);

/* Handle layouts (ze_handle.c). The classic one: the driver's fd in bytes
 * 0-7 (a uint64); a handle is ours when bytes 17..63 decode as a record
 * of that fd (an application that replaced bytes 0-3 with its own
 * SCM_RIGHTS fd gets the driver's behaviour). pattern: fill bytes off..63
 * with it, or (fill 0) 1 when the driver left it: the classic layout.
 * layout: after the driver's get, 0 classic, 1 opaque and describable by
 * a short record, -1 neither (passed through: byval_ze_pass). pass:
 * counted, and an opaque handle's fd registered for other libraries'
 * pidfd_getfd. */
int byval_ze_pattern(uint8_t *handle64, size_t off, int fill);
int byval_ze_layout(uint8_t *handle64, int pool);
void byval_ze_pass(const uint8_t *handle64, int pool);
/* zeContextDestroy: every export of ctx ends first (a driver may close
 * the context's exported fds with it). */
void byval_ze_exports_ctx_gone(ze_context_handle_t ctx);
/* 1 when the handle carries a record of its fd @0 in *rec_p; checked:
 * with its checksum (byval_wire_decode), else parsed only, for a cache
 * lookup whose hit compares the whole record with a checked one. */
int byval_ze_read(const void *handle64, byval_record_t *rec_p, int checked);
/* 1 when the handle is another process's by-value memory handle (*rec_p). */
int byval_ze_foreign(const void *handle64, byval_record_t *rec_p);
uint64_t byval_ze_handle_fd(const void *handle64);

/* ---- fd <-> IPC handle (ze_export.c) ---------------------------------- */

/* zeMemGetFileDescriptorFromIpcHandleExp: for another process's by-value
 * handle, a local duplicate (the caller's to close; the same one while it
 * stays open), never the exporter's fd number. */
ze_result_t byval_ze_fd_from_ipc(byval_ze_fd_from_ipc_fn next, ze_context_handle_t ctx,
                                 ze_ipc_mem_handle_t handle, uint64_t *fd_p);
/* zeMemGetIpcHandleFromFileDescriptorExp: a by-value handle (ours for a
 * duplicate we handed out; the export's for the driver's own fd). */
ze_result_t byval_ze_ipc_from_fd(byval_ze_ipc_from_fd_fn next, ze_context_handle_t ctx, uint64_t fd,
                                 ze_ipc_mem_handle_t *handle);

/* ---- event pools ------------------------------------------------------- */

/*
 * The classic IpcEventPoolData is 40 bytes, written whole; bytes 40-63 are
 * left as the caller's buffer had them: the short record (handles/wire.h,
 * 24 bytes) goes there, its checksum over the driver's 40 bytes too.
 */
#define BYVAL_ZE_POOL_DRIVER_LEN 40
#define BYVAL_ZE_POOL_RECORD_OFF 40

/* 1 when the handle carries a short record bound to its driver bytes (a
 * classic one's @40), 2 an opaque one's (@30), else 0. */
int byval_ze_pool_decode(const void *handle64, byval_short_t *s_p);

/* zeEventPoolCreate: an IPC pool's context is remembered for its export. */
ze_result_t byval_ze_pool_create(ze_pfnEventPoolCreate_t next, ze_context_handle_t ctx,
                                 const ze_event_pool_desc_t *desc, uint32_t ndevices,
                                 ze_device_handle_t *devices, ze_event_pool_handle_t *pool_p);
ze_result_t byval_ze_pool_get_ipc(ze_pfnEventPoolGetIpcHandle_t next, ze_event_pool_handle_t pool,
                                  ze_ipc_event_pool_handle_t *handle);
ze_result_t byval_ze_pool_put_ipc(byval_ze_pool_put_fn next, ze_context_handle_t ctx,
                                  ze_ipc_event_pool_handle_t handle);
ze_result_t byval_ze_pool_open_ipc(ze_pfnEventPoolOpenIpcHandle_t next, ze_context_handle_t ctx,
                                   ze_ipc_event_pool_handle_t handle,
                                   ze_event_pool_handle_t *pool_p);
ze_result_t byval_ze_pool_close_ipc(ze_pfnEventPoolCloseIpcHandle_t next,
                                    ze_event_pool_handle_t pool);
/* zeEventPoolDestroy: of an imported pool it is a close (as the driver's
 * EventPool::destroy); of an exported one it withdraws the export first. */
ze_result_t byval_ze_pool_destroy(ze_pfnEventPoolDestroy_t next, ze_event_pool_handle_t pool);
/* Imported pool handed out by us: its close (1, result in *r_p), else 0. */
int byval_ze_pool_close_import(ze_event_pool_handle_t pool, ze_result_t *r_p);
/* zeContextDestroy: end the exports of ctx's event pools first. */
void byval_ze_pool_exports_ctx_gone(ze_context_handle_t ctx);

/* The short record of our export `serial` at handle64 + off, its checksum
 * over bytes 0..off: 0, or -1. The opaque layouts (across pid
 * namespaces) carry one in reservedHandleData @BYVAL_ZE_OPAQUE_OFF. decode: 1 when h carries one bound to its
 * driver bytes 0-29. whose: its exporter is us (0), another process of
 * our pid namespace (1) or in another host, boot or pid namespace (2).
 * strip: the reserved bytes zero again, as the driver wrote them. local:
 * the handle our driver imports fd from, as a plain fd (fd @0, copy -1). */
int byval_ze_short_write(void *handle64, size_t off, uint64_t serial);
#define BYVAL_ZE_OPAQUE_OFF 30 /* reservedHandleData[32] @30-61 */
int byval_ze_opaque_decode(const void *handle64, byval_short_t *s_p);
int byval_ze_opaque_whose(const byval_short_t *s);
void byval_ze_opaque_strip(void *handle64);
void byval_ze_opaque_local(void *handle64, int fd, int pool);
/* Resolve rec into a local fd (import path): 0 with *fd_p set, or a
 * ze_result_t error already logged under `api`. */
ze_result_t byval_ze_resolve_as(const char *api, const byval_record_t *rec, int *fd_p);

#endif
