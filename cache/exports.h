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

#define BYVAL_EXPORT_ITEM(key, fd, ino, size, flags) \
    ((byval_export_item_t){(key), (fd), (ino), (size), (flags), 0, 0})

typedef struct byval_exports byval_exports_t;

/* Embedded first in the backend's own export struct. */
typedef struct byval_export {
    uintptr_t ctx; /* the context it ends with (byval_exports_end_ctx); 0: none */
    uint32_t nitems;
    byval_export_item_t *items; /* the backend's storage */
    /* The core's. */
    byval_exports_t *home;
    struct byval_export *prev, *next; /* live exports of home */
    uint32_t withdrawn, handed;
} byval_export_t;

/* The mechanisms of each stage (cache/transport.c). publish returns the
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

/* What a GPU API's export backend supplies to the core: the get flow's
 * steps (byval_exports_obtain) and its end. call is the backend's: the
 * get's arguments, the driver's handle, what the flow hands back. */
typedef struct byval_backend_export {
    const char *name; /* for statistics: "ze export" */
    size_t key_len;
    unsigned tries; /* makes when a made export is not kept (full, ended); 0: 1 */
    /* Does kept e still stand for the allocation call describes (its id,
     * its fd)? One that does not is stale: ended. NULL: any does. */
    int (*same)(const byval_export_t *e, const void *call);
    /* Ask the driver and describe the allocation: a new export, its
     * items filled (it may move the key). NULL: none. */
    byval_export_t *(*make)(void *call);
    /* Started e (serials known): write its record. 0, or -1. NULL: none. */
    int (*write)(byval_export_t *e, void *call);
    /* Copy out of kept e (referenced) what the get hands back. NULL: none. */
    void (*hand)(const byval_export_t *e, void *call);
    /* The export ended, every item withdrawn: give the driver what it gave
     * (e->handed: the get's reference is the export's) and free e. Never
     * under a lock of the core, never in a fork child, once per export.
     * NULL: free(e). */
    void (*end)(byval_export_t *e);
} byval_backend_export_t;

/* A backend's export of size bytes (byval_export_t first), zeroed, its
 * nitems items after it. NULL on ENOMEM. */
byval_export_t *byval_export_alloc(size_t size, uint32_t nitems);

/* capacity: exports kept. NULL on ENOMEM. */
byval_exports_t *byval_exports_create(const byval_backend_export_t *ops, size_t capacity);
byval_lru_t *byval_exports_lru(byval_exports_t *x);

/* The get: a hit (1) is the export kept under key that is same(call),
 * a stale one ended; else make's export is added. hand ran when >= 0. */
int byval_exports_obtain(byval_exports_t *x, const void *key, void *call);
int byval_exports_hit(byval_exports_t *x, const void *key, void *call);
/* Start e, write and keep it under key, a stale export there ended: 0;
 * 2: a racing get kept one same(call) first, handed instead and e
 * discarded; -1: e discarded (not started or written; x or e NULL: e
 * freed); -2: not kept (the table full, e ended meanwhile), discarded. */
int byval_exports_add(byval_exports_t *x, const void *key, byval_export_t *e, void *call);

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
/* Every export of context ctx (it is being destroyed). */
size_t byval_exports_end_ctx(byval_exports_t *x, uintptr_t ctx);
/* For every export of x, keep(arg, e) says how many items stay: fewer
 * than e's are withdrawn (what they name goes before the export does),
 * none ends it. keep runs under the core's lock: it reads e or writes
 * the backend's fields, calls nothing. Returns how many were cut. */
size_t byval_exports_cut_if(byval_exports_t *x, uint32_t (*keep)(void *arg, byval_export_t *e),
                            void *arg);

/* Does any export hold a registry entry of key? */
int byval_exports_key_held(uint64_t key);
/* Live exports of x (a relaxed hint). */
size_t byval_exports_live(byval_exports_t *x);
/* Registry entries, broker offers, rescue registrations held now. */
void byval_exports_counts(size_t *published_p, size_t *offered_p, size_t *registered_p);

#endif
