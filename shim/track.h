/* SPDX-License-Identifier: MIT */
/*
 * track.h - what ties imported mappings (cache/imports.h) to their
 * exporters: liveness from the exporter's registry (handles/registry*),
 * release at the exporter's exit, the byte budget from the configuration.
 * Every import family (ze_import.c, cu_import.c, cu_legacy.c) creates its
 * cache here and tracks its mappings through here.
 */
#ifndef BYVAL_SHIM_TRACK_H
#define BYVAL_SHIM_TRACK_H

#include "cache/imports.h"
#include "handles/wire.h"

/* An import cache with the shim's tracker hooks filled in (ops->track,
 * untrack: leave them NULL in ops), registered for statistics. */
byval_imports_t *byval_track_cache(byval_imports_ops_t *ops);

/* For ops->track: find m's export (key, ino) in the registry of the
 * exporter rec names. Not listed there: freed (m is released at its
 * close); no registry reachable: m stays untracked (budget only). */
void byval_track_record(byval_import_t *m, const byval_record_t *rec, uint64_t key, uint32_t ino);

/* The same through pidfd, the exporter's, which the caller holds (an
 * import that tracks before it has given its fetch's pidfd back). */
void byval_track_record_on(byval_import_t *m, const byval_record_t *rec, int pidfd, uint64_t key,
                           uint32_t ino);

/* For ops->track of a legacy CUDA mapping: the exporter named by its pid
 * (the driver's bytes 8-11) and the key of its 64 handle bytes. */
void byval_track_pid(byval_import_t *m, uint32_t pid, uint64_t key);

/* 1 when the registry of rec's exporter (pidfd: its, held by the caller)
 * lists (key, ino) live now. */
int byval_track_listed(const byval_record_t *rec, int pidfd, uint64_t key, uint32_t ino);

/* fn runs on the watcher thread after each event of an exporter's
 * registry has been applied to the import caches (one hook). */
void byval_track_on_event(void (*fn)(void));

/* Start the watcher for m, tracked (ops->watch; also for an import that
 * must hear of frees while it is open). */
void byval_track_watch(byval_import_t *m);

/* For ops->untrack. */
void byval_track_untrack(void *tracker);

#endif
