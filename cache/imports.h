/* SPDX-License-Identifier: MIT */
/*
 * imports.h - imported mappings, whatever the GPU API: the lifecycle core
 * (imports.c), the backend interface each API fills
 * (byval_backend_import_t) and the one open and close flow that drives
 * every backend (imports_flow.c).
 *
 * A cached mapping lives no longer than the application and the exporter
 * allow natively: the application's opens are counted per pointer (a
 * double close is told from a pointer never handed out); a mapping
 * nobody has open stays for a cheap re-open until its exporter frees the
 * allocation or exits, its local context ends, or a budget needs room.
 */
#ifndef BYVAL_CACHE_IMPORTS_H
#define BYVAL_CACHE_IMPORTS_H

#include <stddef.h>
#include <stdint.h>

#include "cache/lru.h"

typedef struct byval_imports byval_imports_t;
struct byval_record;

/* The head of a backend's mapping struct. */
typedef struct byval_import {
    /* Filled by the backend before the insert. */
    uint64_t bytes;      /* memory the mapping holds (the byte budget) */
    uintptr_t ctx;       /* local context it dies with (purge); 0: none */
    uintptr_t addr;      /* where it is mapped (0: not memory); [addr, addr + span) */
    uint64_t span;       /* address space it holds; 0: bytes */
    uint32_t pidns, pid; /* exporter; all zero: not known */
    uint64_t identity;
    /* Alive while *live == serial; live NULL: untracked (budgets only). */
    const uint64_t *live;
    uint64_t serial;
    void *tracker;
    /* The core's. */
    byval_imports_t *home;
    struct byval_import *unext;
    uint32_t counted;
    uint64_t charged;
    uint32_t uncached; /* handed out uncached, not released yet */
    uint32_t dead;     /* its context is gone: release without driver calls */
    uint32_t inserting;
    struct byval_import *lnext, *lprev;
} byval_import_t;

/* Not ours: the caller hands the call to the driver unchanged. */
#define BYVAL_IMPORT_PASS (-1)

/* What a GPU API supplies for one kind of handle; req is the backend's
 * own description of an open. The flow's callbacks return 0, PASS or the
 * API's error code. */
typedef struct byval_backend_import {
    const char *name;      /* statistics: "ze import" */
    const char *api;       /* the open's entry point, in log lines */
    const char *close_api; /* the close's */
    const char *what;      /* log lines' prefix: "", "event pool " */
    const char *kept;      /* a close's outcome in log lines */
    size_t key_len;
    int nomem, invalid; /* the API's codes: out of memory, a refused handle */
    int driver_route;   /* nothing fetched: the driver opens it (log lines; no cache: PASS) */
    /* Optional: a miss's check before it counts (the record's checksum). */
    int (*check)(void *req);
    /* Optional: the pointer an open of req from m hands out, 0 when m does
     * not serve req (default: m->addr, whatever m is under the key). */
    uintptr_t (*serves)(const byval_import_t *m, const void *req);
    /* A miss: a new mapping for req in *m_p, or had (the cached mapping
     * of the key that does not serve req, NULL if none) grown to serve it. */
    int (*import)(void *req, byval_import_t *had, byval_import_t **m_p);
    /* Optional, after an open: 1 when m died meanwhile in a way that may
     * have taken what the open needs (it is closed and imported afresh). */
    int (*stale)(const byval_import_t *m);
    /* Give the mapping back to the driver (the core frees it). Never
     * under a cache lock, never in a fork child, once per mapping. */
    void (*release)(byval_import_t *m);
    /* Optional: 1 when cached mapping a serves an open of b's record. */
    int (*same)(const byval_import_t *a, const byval_import_t *b);
    /* Optional, at a mapping's first close: point m->live at the
     * exporter's registry (byval_import_track). */
    void (*track)(byval_import_t *m);
    /* The driver hands out the same pointer for a re-open while open,
     * counting opens (CUDA legacy): such a mapping stays cached while
     * open, whatever its exporter did. */
    int shared_ptr;
    /* Optional: m's exporter freed part of it while opens remain: give
     * back what no open needs. Under the release gate. */
    void (*closed_dead)(void *m);
    /* Optional (one backend): runs on the watcher thread, under the release
     * gate, after each event of an exporter's registry is applied. */
    void (*on_event)(void *unused);
    /* The flow's. */
    byval_imports_t *cache; /* made at the first open */
    int seen[16];           /* failures logged, by kind */
} byval_backend_import_t;

/* ---- the flow (imports_flow.c) ----------------------------------------- */

/* An open of req under key: *ptr_p the pointer handed out. */
int byval_import_open(byval_backend_import_t *b, const void *key, void *req, uintptr_t *ptr_p);

/* The application closes ptr (shown in log lines): 0, b->invalid for a
 * pointer open no more, or PASS. */
int byval_import_close(const byval_backend_import_t *b, uintptr_t ptr, const void *shown);

/* rec's exporter's fd in *fd_p (b->seen logs a failure under api).
 * pidfd_p NULL: the exporter's pidfd is given back at once. */
int byval_import_fetch(byval_backend_import_t *b, const char *api, const struct byval_record *rec,
                       int *fd_p, int *pidfd_p);

/* Log a refused import once per kind st of failure; the API's code. */
int byval_import_refuse(byval_backend_import_t *b, const char *api, int st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* For b->track: m's export (key, ino) in the registry of rec's exporter
 * through pidfd (-1: none; KEPT: the exporters table's). Not listed:
 * freed; no registry: untracked. */
#define BYVAL_TRACK_KEPT (-2)
void byval_track_record(byval_import_t *m, const struct byval_record *rec, int pidfd, uint64_t key,
                        uint32_t ino);
/* The exporter named by its pid (CUDA legacy) and key. */
void byval_track_pid(byval_import_t *m, uint32_t pid, uint64_t key);
/* 1 when rec's exporter's registry (through pidfd) lists (key, ino). */
int byval_track_listed(const struct byval_record *rec, int pidfd, uint64_t key, uint32_t ino);
/* Start the watcher for m (the watch hook; an import that must hear of frees
 * while open). */
void byval_track_watch(byval_import_t *m);

/* ---- the core (imports.c) ---------------------------------------------- */

/* m lives while *word == serial; tracker goes to the untrack hook. */
void byval_import_track(byval_import_t *m, const uint64_t *word, uint64_t serial, void *tracker);
int byval_import_alive(const byval_import_t *m);

/* capacity: entries. NULL on ENOMEM. */
byval_imports_t *byval_imports_create(const byval_backend_import_t *ops, size_t capacity);
/* Release every mapping of c and c (no other thread may use c). */
void byval_imports_destroy(byval_imports_t *c);
/* The byte budget for mappings nobody has open (all caches). */
void byval_imports_set_budget(uint64_t bytes);
/* The tracker's hooks for every cache (the flow's, set once before any
 * cache is made): untrack drops what ops->track set, after the release;
 * watch makes a closed tracked mapping hear of frees while nobody calls. */
void byval_imports_set_tracking(void (*untrack)(void *tracker), void (*watch)(byval_import_t *m));

/* Hit: the cached mapping for key, referenced (*ref_p); NULL on a miss
 * (a freed one is taken out of the cache). Open it or unget it. */
byval_import_t *byval_imports_get(byval_imports_t *c, const void *key, byval_lru_ref_t *ref_p);
void byval_imports_unget(byval_imports_t *c, byval_lru_ref_t ref);

/* Miss: cache m (another record under key is replaced; the same record
 * from a racing thread is used instead and m released). *out_p, with
 * *ref_p (0: uncached, every cached mapping open). Returns 0. */
int byval_imports_insert(byval_imports_t *c, const void *key, byval_import_t *m,
                         byval_import_t **out_p, byval_lru_ref_t *ref_p);

/* m maps delta bytes more: 1 when byval_imports_shed must run (no lock). */
int byval_imports_grow(byval_import_t *m, uint64_t delta);
/* Evict closed mappings until the closed bytes fit the budget. */
void byval_imports_shed(void);

/* The application opened ptr from m (ref from get or insert): 0, or -1
 * on ENOMEM (the reference dropped). */
int byval_imports_open(byval_imports_t *c, byval_import_t *m, byval_lru_ref_t ref, uintptr_t ptr);

enum {
    BYVAL_IMPORTS_NOT_OURS = 0,  /* never handed out: the driver's */
    BYVAL_IMPORTS_CLOSED = 1,    /* one open closed */
    BYVAL_IMPORTS_NOT_OPEN = -1, /* ours, every open of it closed */
};

/* How many opens of ptr the application holds from m. */
int byval_imports_opens(const byval_import_t *m, uintptr_t ptr);
/* fn(arg) under the release gate (fork waits for it). */
void byval_imports_gated(void (*fn)(void *arg), void *arg);
/* The application closes ptr (any cache). */
int byval_imports_close(uintptr_t ptr);

/* Release every mapping of ctx now, open or not (ctx is being destroyed;
 * dead: gone already, releases skip the driver); returns when no release
 * of ctx runs on any thread. */
size_t byval_imports_purge(uintptr_t ctx, int dead);
/* Take out of the caches every mapping pred(ctx, m) holds for (open
 * ones are released at their last close). */
size_t byval_imports_remove_if(int (*pred)(void *ctx, const byval_import_t *m), void *ctx);

/* Bytes of closed cached mappings, now and at most. */
void byval_imports_bytes(uint64_t *held_p, uint64_t *peak_p);
byval_lru_t *byval_imports_lru(byval_imports_t *c);

#endif
