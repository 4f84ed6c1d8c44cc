/* SPDX-License-Identifier: MIT */
/*
 * exports.h - the lifecycle of exports, whatever the GPU API: the mirror of
 * imports.h for the exporting side.
 *
 * An export hands other processes numbers that name this process's files.
 * Three shared objects name them, and the core owns all three:
 *  - the registry entry (handles/registry.h): importers duplicate only what
 *    it lists live, and release their closed mappings when it goes;
 *  - the broker offer (handles/broker.h): the socket route serves the
 *    object offered under that number, to same-uid peers;
 *  - the rescue registration (handles/registry_fds.c): other libraries'
 *    refused pidfd_getfd of that number is served by the broker.
 * One record per export (byval_export_t, embedded first in the API's own
 * struct) lists its items (fd, inode, registry key); the core takes them
 * published -> offered -> registered when the export starts, and withdraws
 * them all, in one place, when it ends: the application frees the memory,
 * puts the handle, destroys the context or the event pool, or the table
 * needs room. Only then, outside every lock of the core, does the API's
 * end callback run: the driver's own put/free/close of the exported fds.
 * So nothing another process can ask for names a number after the number
 * can be closed and reused (the broker also proves, at each request, that
 * the number still is the object offered: handles/fdproof.h).
 *
 * Items may be shared: two records of one allocation (two contexts, or two
 * threads racing a first get) name the same fd. The core counts each
 * (registry key, inode), (fd, inode) offer and registration, and withdraws
 * one when its last record ends.
 *
 * The mechanisms (registry, broker, rescue) are handed in once by the shim
 * (byval_exports_set_sink) with its transport policy: the core knows no
 * GPU API and no configuration.
 */
#ifndef BYVAL_CACHE_EXPORTS_H
#define BYVAL_CACHE_EXPORTS_H

#include <stddef.h>
#include <stdint.h>

#include "cache/lru.h"

/* What an item asks for, besides its registry entry (key != 0). */
#define BYVAL_EXPORT_OFFER 1u  /* the broker serves fd (the socket route) */
#define BYVAL_EXPORT_RESCUE 2u /* and other libraries' refused pidfd_getfd */
#define BYVAL_EXPORT_OPEN \
    4u /* offered to the directory's group without a tag
                                * (its handle has no room for one) */

typedef struct byval_export_item {
    uint64_t key;    /* registry key; 0: not published */
    int fd;          /* -1: none (a legacy CUDA handle names itself) */
    uint32_t ino;    /* fd's inode, low 32 bits, as records carry it */
    uint64_t size;   /* bytes exported, for the registry */
    unsigned flags;  /* BYVAL_EXPORT_OFFER | BYVAL_EXPORT_RESCUE | BYVAL_EXPORT_OPEN */
    uint64_t serial; /* the core's: the registry serial, 0 when not published */
    unsigned taken;  /* the core's: stages taken */
} byval_export_item_t;

typedef struct byval_exports byval_exports_t;

typedef struct byval_export {
    /* Filled by the API before byval_exports_start. */
    uintptr_t ctx; /* context it lives in (byval_exports_end_ctx); 0: none */
    uint32_t nitems;
    byval_export_item_t *items; /* the API's storage, nitems long */
    /* The core's. */
    byval_exports_t *home;
    struct byval_export *prev, *next; /* live exports of home */
    uint32_t started, withdrawn, listed;
} byval_export_t;

/* The mechanisms each stage uses (shim/transport.c). publish returns the
 * registry serial (0: not published); offer and enlist 0 or -1; offer's
 * open: BYVAL_EXPORT_OPEN. */
typedef struct byval_exports_sink {
    uint64_t (*publish)(uint64_t key, uint32_t ino, uint32_t fd, uint64_t size);
    void (*unpublish)(uint64_t key, uint32_t ino);
    int (*offer)(int fd, int open);
    void (*withdraw)(int fd);
    int (*enlist)(int fd);
    void (*delist)(int fd);
} byval_exports_sink_t;

/* Set once, before the first export (later calls replace it). */
void byval_exports_set_sink(const byval_exports_sink_t *sink);

typedef struct byval_exports_ops {
    const char *name; /* for statistics: "ze export" */
    size_t key_len;
    /* The export ended and every item is withdrawn: give the driver its
     * export back (put, close the fds that are ours) and free e. Never
     * under a lock of the core or the cache, never in a fork child, once
     * per export. */
    void (*end)(byval_export_t *e);
} byval_exports_ops_t;

/* capacity: exports kept (IPCBYVAL_EXPORT_CACHE_SIZE). NULL on ENOMEM. */
byval_exports_t *byval_exports_create(const byval_exports_ops_t *ops, size_t capacity);

/* The cache behind x, for statistics. */
byval_lru_t *byval_exports_lru(byval_exports_t *x);

/* Publish, offer and register e's items (as their key and flags ask), in
 * that order; item serials are set. e belongs to x from now on: it ends
 * through x (byval_exports_insert, or byval_exports_discard). Returns 0,
 * or -1 when item 0 asked for a registry entry and did not get one (e is
 * started all the same: discard it, or keep it). */
int byval_exports_start(byval_exports_t *x, byval_export_t *e);

/* Keep started e under key. 0: kept, referenced (*ref_p; the caller drops
 * it with byval_exports_unget). BYVAL_LRU_EXISTS: another export holds
 * the key: *existing_p is it, referenced (*ref_p), and e was NOT kept (the
 * caller uses the existing one or removes it, and discards e). Anything
 * else: e was not kept and is discarded (withdrawn and ended). */
int byval_exports_insert(byval_exports_t *x, const void *key, byval_export_t *e,
                         byval_export_t **existing_p, byval_lru_ref_t *ref_p);

/* End an export that is not kept: withdraw its items, then its end. */
void byval_exports_discard(byval_export_t *e);

/* Hit: the export kept under key, referenced, or NULL. */
byval_export_t *byval_exports_get(byval_exports_t *x, const void *key, byval_lru_ref_t *ref_p);
void byval_exports_unget(byval_exports_t *x, byval_lru_ref_t ref);

/* End the export kept under key (withdrawn now; ended now, or at its last
 * reference's unget). 1 when there was one. */
int byval_exports_end(byval_exports_t *x, const void *key);

/* The same for every export of x for which pred(arg, e) is true. pred
 * runs under the core's lock: it reads e, calls nothing. Returns how
 * many. */
size_t byval_exports_end_if(byval_exports_t *x, int (*pred)(void *arg, const byval_export_t *e),
                            void *arg);

/* Withdraw e's items from nitems on (what they name goes before the
 * export does: an allocation that keeps only its first part); e stays
 * live with the others. */
void byval_exports_trim(byval_export_t *e, uint32_t nitems);

/* Every export of x that lives in context ctx (it is being destroyed: a
 * driver may close the context's exported fds with it). */
size_t byval_exports_end_ctx(byval_exports_t *x, uintptr_t ctx);

/* Call visit(arg, e) for live exports of x under the core's lock until it
 * returns non-zero (then returns that). visit reads or copies, calls
 * nothing. */
int byval_exports_visit(byval_exports_t *x, int (*visit)(void *arg, const byval_export_t *e),
                        void *arg);

/* Does any export hold a registry entry of key (whatever its inode)? */
int byval_exports_key_held(uint64_t key);

/* Live exports of x (a relaxed read: a hint, to skip work). */
size_t byval_exports_live(byval_exports_t *x);

/* Shared objects the core holds now, all tables together: registry
 * entries, broker offers, rescue registrations (tests, statistics). */
void byval_exports_counts(size_t *published_p, size_t *offered_p, size_t *registered_p);

/* fork(): the child starts with no exports (its registry, broker and
 * rescue registry are its own and empty); nothing is ended there. */

#endif
