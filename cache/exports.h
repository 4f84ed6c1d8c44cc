/* SPDX-License-Identifier: MIT */
/*
 * exports.h - the one export flow of every GPU API (the exporting side's
 * imports.h). An export hands other processes numbers that name this
 * process's files; its items (fd, inode, registry key) are published in
 * the registry, offered by the broker and registered for the pidfd_getfd
 * rescue while it lives, and withdrawn, in one place, when it ends: only
 * then does the backend's end (the driver's put or close) run, outside
 * every lock of the core. Items two exports share (one allocation, two
 * contexts) are counted and withdrawn with their last holder.
 * The mechanisms come from the shim (byval_exports_set_sink): the core
 * knows no GPU API and no configuration.
 */
#ifndef BYVAL_CACHE_EXPORTS_H
#define BYVAL_CACHE_EXPORTS_H

#include <stddef.h>
#include <stdint.h>

#include "cache/lru.h"

/* What an item asks for besides its registry entry (key != 0). */
#define BYVAL_EXPORT_OFFER 1u  /* the broker serves fd (the socket route) */
#define BYVAL_EXPORT_RESCUE 2u /* and other libraries' refused pidfd_getfd */
#define BYVAL_EXPORT_OPEN 4u   /* offered to the directory's group untagged */

typedef struct byval_export_item {
    uint64_t key;    /* registry key; 0: not published */
    int fd;          /* -1: none (a legacy CUDA handle names itself) */
    uint32_t ino;    /* fd's inode, low 32 bits */
    uint64_t size;   /* bytes exported, for the registry */
    unsigned flags;  /* BYVAL_EXPORT_* */
    uint64_t serial; /* the core's: the registry serial, 0 when not published */
    unsigned taken;  /* the core's: stages taken */
} byval_export_item_t;

typedef struct byval_exports byval_exports_t;

/* Embedded first in the backend's own export struct. */
typedef struct byval_export {
    uintptr_t ctx; /* the context it ends with (byval_exports_end_ctx); 0: none */
    uint32_t nitems;
    byval_export_item_t *items; /* the backend's storage */
    /* The core's. */
    byval_exports_t *home;
    struct byval_export *prev, *next; /* live exports of home */
    uint32_t started, withdrawn;
} byval_export_t;

/* The mechanisms of each stage (shim/transport.c). publish returns the
 * registry serial (0: not published); offer and enlist 0 or -1. */
typedef struct byval_exports_sink {
    uint64_t (*publish)(uint64_t key, uint32_t ino, uint32_t fd, uint64_t size);
    void (*unpublish)(uint64_t key, uint32_t ino);
    int (*offer)(int fd, int open);
    void (*withdraw)(int fd);
    int (*enlist)(int fd);
    void (*delist)(int fd);
} byval_exports_sink_t;

void byval_exports_set_sink(const byval_exports_sink_t *sink);

/* What a GPU API's export backend supplies to the core. Getting the
 * driver's handle, telling its layout, the allocation's identity and
 * writing the record are the backend's (shim/ze_export.c, ze_event.c,
 * cu_export.c, cu_legacy_export.c); so are its free and put events,
 * which end exports through byval_exports_end*. */
typedef struct byval_backend_export {
    const char *name; /* for statistics: "ze export" */
    size_t key_len;
    /* The export ended, every item withdrawn: give the driver its export
     * back and free e. Never under a lock of the core, never in a fork
     * child, once per export. */
    void (*end)(byval_export_t *e);
    /* Does kept e still stand for what arg describes (the allocation's
     * id, its fd)? One that does not is stale: ended. NULL: any does. */
    int (*same)(const byval_export_t *e, const void *arg);
} byval_backend_export_t;
typedef byval_backend_export_t byval_exports_ops_t;

/* capacity: exports kept. NULL on ENOMEM. */
byval_exports_t *byval_exports_create(const byval_backend_export_t *ops, size_t capacity);
byval_lru_t *byval_exports_lru(byval_exports_t *x);

/* The flow: the export kept under key that is same(arg), referenced (the
 * caller ungets *ref_p), a stale one ended first; NULL: none. */
byval_export_t *byval_exports_find(byval_exports_t *x, const void *key, const void *arg,
                                   byval_lru_ref_t *ref_p);
/* Start e (unless started) and keep it under key, a stale export there
 * ended. 0: e kept; 1: a racing get kept one same(arg) first, and e is
 * the caller's to discard; both: *kept_p is the kept one, referenced
 * (the caller ungets *ref_p). -1: not kept, e discarded. */
int byval_exports_keep(byval_exports_t *x, const void *key, byval_export_t *e, const void *arg,
                       byval_export_t **kept_p, byval_lru_ref_t *ref_p);

/* Publish, offer and register e's items; it belongs to x from now on. 0,
 * or -1 when item 0 got no registry entry (e is started all the same). */
int byval_exports_start(byval_exports_t *x, byval_export_t *e);
/* End an export that is not kept. */
void byval_exports_discard(byval_export_t *e);

byval_export_t *byval_exports_get(byval_exports_t *x, const void *key, byval_lru_ref_t *ref_p);
void byval_exports_unget(byval_exports_t *x, byval_lru_ref_t ref);

/* End the export kept under key (withdrawn now, ended at its last
 * reference). 1 when there was one. */
int byval_exports_end(byval_exports_t *x, const void *key);
/* The same for every export of x where pred (run under the core's lock:
 * it reads e, calls nothing) is true; how many. */
size_t byval_exports_end_if(byval_exports_t *x, int (*pred)(void *arg, const byval_export_t *e),
                            void *arg);
/* Every export of context ctx (it is being destroyed). */
size_t byval_exports_end_ctx(byval_exports_t *x, uintptr_t ctx);
/* For every export of x, keep(arg, e) says how many items stay: fewer
 * than e's are withdrawn (what they name goes before the export does),
 * none ends it. keep runs under the core's lock: it reads e or writes
 * the backend's fields, calls nothing. Returns how many were cut. */
size_t byval_exports_cut_if(byval_exports_t *x, uint32_t (*keep)(void *arg, byval_export_t *e),
                            void *arg);

/* visit(arg, e) for live exports under the core's lock until non-zero
 * (returned); visit reads or copies, calls nothing. */
int byval_exports_visit(byval_exports_t *x, int (*visit)(void *arg, const byval_export_t *e),
                        void *arg);
/* Does any export hold a registry entry of key? */
int byval_exports_key_held(uint64_t key);
/* Live exports of x (a relaxed hint). */
size_t byval_exports_live(byval_exports_t *x);
/* Registry entries, broker offers, rescue registrations held now. */
void byval_exports_counts(size_t *published_p, size_t *offered_p, size_t *registered_p);

#endif
