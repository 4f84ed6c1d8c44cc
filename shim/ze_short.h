/* SPDX-License-Identifier: MIT */
/*
 * ze_short.h - the short record (handles/wire.h) in Level Zero handles,
 * both ends (ze_handle.c); the cached imports it finds share one head.
 */
#ifndef BYVAL_SHIM_ZE_SHORT_H
#define BYVAL_SHIM_ZE_SHORT_H

#include "cache/imports.h"
#include "handles/registry.h"
#include "handles/registry_view.h"
#include "handles/wire.h"
#include "shim/ze.h"

/* Ours for the export `serial`, at handle64 + off, its checksum over
 * bytes 0..off: 0, or -1. */
int byval_ze_short_write(void *handle64, size_t off, uint64_t serial);

/* Count and log (once per kind and API) a refused open: its ze_result_t. */
ze_result_t byval_ze_short_refuse(const char *api, byval_status_t st, const char *msg);
/* After the driver's import of a fetched fd (started at t0): timed, the
 * fd closed; a refusal logged and the view given back. Returns r. */
ze_result_t byval_ze_short_imported(const char *api, ze_result_t r, int fd,
                                    const byval_record_t *rec, byval_reg_view_t *v, uint64_t t0);

/* The exporter's live registry entry s names for the fd in bytes 0-7, of
 * kind (BYVAL_KIND_ZE_*): *v_p (a view reference), *w_p, *slot, and in
 * *rec the record to fetch it. Else the refusal's code, logged. */
ze_result_t byval_ze_short_entry(const char *api, const byval_short_t *s, const void *handle64,
                                 uint8_t kind, byval_record_t *rec, byval_reg_view_t **v_p,
                                 const uint64_t **w_p, byval_reg_slot_t *slot);

/* The head of an import a short record found (first in its struct). */
typedef struct byval_ze_short_import {
    byval_import_t base;                    /* the lifecycle core's part */
    uint8_t handle[ZE_MAX_IPC_HANDLE_SIZE]; /* as opened: a hit must equal it */
} byval_ze_short_import_t;

/* ops->same of such imports: the same handle bytes. */
int byval_ze_short_same(const byval_import_t *a, const byval_import_t *b);

/* The import cached under key for these very handle bytes, referenced
 * (*ref_p), or NULL (none, or another handle under the key: resolve it). */
byval_ze_short_import_t *byval_ze_short_get(byval_imports_t *c, const void *key,
                                            const void *handle64, byval_lru_ref_t *ref_p);

/* Fill m's head from the handle and its record, tied to the registry
 * entry (w, serial) of view v (whose reference goes with it). */
void byval_ze_short_fill(byval_ze_short_import_t *m, const void *handle64,
                         const byval_record_t *rec, const uint64_t *w, uint64_t serial, void *v);

#endif
