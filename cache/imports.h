/* SPDX-License-Identifier: MIT */
/*
 * imports.h - the lifecycle of imported mappings, whatever the GPU API.
 *
 * Level Zero, CUDA VMM and CUDA legacy imports all follow one rule: a
 * cached mapping lives no longer than what the application and the
 * exporter allow natively. What keeps a mapping, in one place:
 *  - the application's opens: counted per pointer; a pointer closed as
 *    often as it was opened is kept (count 0) while its mapping is cached,
 *    so a double close is told from a pointer never handed out;
 *  - the cache: a mapping nobody has open stays for a cheap re-open until
 *    the exporter frees the allocation (a liveness word that the shim
 *    points at the exporter's registry; checked on every hit, and the
 *    watcher's events release at once), the exporter exits or execs, the
 *    local context is destroyed (purge), or the entry count or the byte
 *    budget needs room;
 *  - the API's release callback, which gives the mapping to the driver.
 * The API code embeds byval_import_t first in its own mapping struct.
 */
#ifndef BYVAL_CACHE_IMPORTS_H
#define BYVAL_CACHE_IMPORTS_H

#include <stddef.h>
#include <stdint.h>

#include "cache/lru.h"

typedef struct byval_imports byval_imports_t;

typedef struct byval_import {
    /* Filled by the API before byval_imports_insert. */
    uint64_t bytes;      /* memory the mapping holds (the byte budget) */
    uintptr_t ctx;       /* local context it lives in (byval_imports_purge_ctx) */
    uintptr_t addr;      /* where it is mapped (0: not memory); [addr, addr + span) */
    uint64_t span;       /* address space it holds; 0: bytes */
    uint32_t pidns, pid; /* exporter; all zero: not known */
    uint64_t identity;
    /* Liveness: while *live == serial the exporter's allocation lives;
     * NULL: not tracked (kept only within the budgets). Set by the
     * tracker (byval_imports_ops_t.track), which owns `tracker`. */
    const uint64_t *live;
    uint64_t serial;
    void *tracker;
    /* The core's. */
    byval_imports_t *home;
    struct byval_import *unext; /* uncached mappings' list */
    uint32_t counted;           /* its bytes count as closed (first close on; 2: charged) */
    uint64_t charged;           /* bytes counted as closed (under the lists' lock) */
    uint32_t uncached;
    uint32_t dead;                      /* its context is gone: release without driver calls */
    uint32_t inserting;                 /* listed, not in its cache yet */
    struct byval_import *lnext, *lprev; /* the live list (imports_life.c) */
} byval_import_t;

typedef struct byval_imports_ops {
    const char *name; /* for statistics: "ze import" */
    size_t key_len;
    /* Give the mapping back to the driver (the core frees it after).
     * Never under a cache lock, never in a fork child, at most once per
     * mapping. */
    void (*release)(byval_import_t *m);
    /* 1 when cached mapping a serves an open of b's record. */
    int (*same)(const byval_import_t *a, const byval_import_t *b);
    /* Optional, at a mapping's first close: point m->live at the
     * exporter's registry (and set m->tracker). May take microseconds. */
    void (*track)(byval_import_t *m);
    /* Optional: drop what track() set (m->tracker), after release. */
    void (*untrack)(void *tracker);
    /* Optional, at a tracked mapping's first close, when it stays cached:
     * from now on a free must reach it while the application calls
     * nothing (the shim's registry watcher, started on demand). */
    void (*watch)(byval_import_t *m);
    /* 1 when the driver hands out the same pointer for a re-open of a
     * mapping while it is open, counting opens (CUDA legacy). Such a
     * mapping stays in its cache while the application has it open,
     * whatever its exporter did: a re-open must find it (natively the
     * driver's re-open succeeds), as a second mapping cannot be recorded
     * under the same pointer. */
    int shared_ptr;
    /* Optional: at a close of m when its exporter freed part of what it
     * maps (m not alive) while other opens of it remain: give back what
     * no open needs. Under the release gate, never under a cache lock. */
    void (*closed_dead)(byval_import_t *m);
} byval_imports_ops_t;

/* For ops->track: m lives while *word == serial; tracker is the
 * tracker's own (handed to ops->untrack after the release). */
void byval_import_track(byval_import_t *m, const uint64_t *word, uint64_t serial, void *tracker);

/* 1 while m's allocation lives as far as its tracker knows. */
int byval_import_alive(const byval_import_t *m);

/* capacity: entries (IPCBYVAL_CACHE_SIZE). NULL on ENOMEM. */
byval_imports_t *byval_imports_create(const byval_imports_ops_t *ops, size_t capacity);

/* Release every mapping of c and c itself (tests, teardown: no other
 * thread may use c meanwhile). */
void byval_imports_destroy(byval_imports_t *c);

/* The byte budget for mappings nobody has open (all caches together). */
void byval_imports_set_budget(uint64_t bytes);

/* Hit: the cached mapping for key, referenced, with its handle in *ref_p;
 * NULL on a miss. A mapping whose allocation the exporter freed is taken
 * out of the cache and is a miss. The caller checks the record (ops->same
 * semantics) and either opens it or drops it with byval_imports_unget. */
byval_import_t *byval_imports_get(byval_imports_t *c, const void *key, byval_lru_ref_t *ref_p);
void byval_imports_unget(byval_imports_t *c, byval_lru_ref_t ref);

/* Miss: cache m (newest verified record wins: an entry of the key with
 * another record is replaced, released when its last user closes it;
 * one with the same record, from a racing thread, is used instead and m
 * released). *out_p: the mapping to hand out, referenced with *ref_p
 * (0: cache full of open mappings, m handed out uncached and released at
 * its last close). Returns 0, or -1 when m could not be kept (released). */
int byval_imports_insert(byval_imports_t *c, const void *key, byval_import_t *m,
                         byval_import_t **out_p, byval_lru_ref_t *ref_p);

/* m maps delta bytes more than it did (an import that grows in place):
 * the byte budget counts them as it counts m's others. Returns 1 when the
 * closed bytes are over the budget now: call byval_imports_shed, under
 * no lock. */
int byval_imports_grow(byval_import_t *m, uint64_t delta);

/* Evict closed mappings until the closed bytes fit the budget. */
void byval_imports_shed(void);

/* The application opened ptr from m (reference ref from get or insert).
 * 0, or -1 on ENOMEM (the reference is dropped). */
int byval_imports_open(byval_imports_t *c, byval_import_t *m, byval_lru_ref_t ref, uintptr_t ptr);

enum {
    BYVAL_IMPORTS_NOT_OURS = 0,  /* never handed out: the driver's business */
    BYVAL_IMPORTS_CLOSED = 1,    /* one open closed */
    BYVAL_IMPORTS_NOT_OPEN = -1, /* ours, but every open of it is closed */
};

/* How many opens of ptr the application holds from m. */
int byval_imports_opens(const byval_import_t *m, uintptr_t ptr);

/* fn(arg) under the release gate: a driver call a thread of ours makes
 * on mappings (fork waits for it; see release). */
void byval_imports_gated(void (*fn)(void *arg), void *arg);

/* The application closes ptr (any cache). */
int byval_imports_close(uintptr_t ptr);

/* Release every mapping of local context ctx now, open or not (the
 * context is being destroyed: its mappings die with it). The pointers
 * are forgotten: a later close of one goes to the driver. Returns how
 * many mappings. Returns only when no release of ctx runs on any thread
 * (those other threads started before it too). */
size_t byval_imports_purge_ctx(uintptr_t ctx);

/* The same for a context already destroyed: the mappings died with it,
 * so the release callbacks are told (m->dead) not to call the driver. */
size_t byval_imports_forget_ctx(uintptr_t ctx);

/* Take out of the cache every mapping for which pred(ctx, m) is true
 * (open ones are released at their last close). */
size_t byval_imports_remove_if(int (*pred)(void *ctx, const byval_import_t *m), void *ctx);

/* Bytes of mappings closed and still cached, now and at most. */
void byval_imports_bytes(uint64_t *held_p, uint64_t *peak_p);

/* The cache behind c, for statistics. */
byval_lru_t *byval_imports_lru(byval_imports_t *c);

#endif
