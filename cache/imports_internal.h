/* SPDX-License-Identifier: MIT */
/*
 * imports_internal.h - what imports.c (open, close, budgets) and
 * imports_life.c (releases, the live list, purges) share. Not an API.
 */
#ifndef BYVAL_CACHE_IMPORTS_INTERNAL_H
#define BYVAL_CACHE_IMPORTS_INTERNAL_H

#include <pthread.h>

#include "cache/imports.h"
#include "cache/locks.h"
#include "cache/ptrmap.h"

#define IMPORTS_MAX 8

struct byval_imports {
    const byval_backend_import_t *ops;
    byval_lru_t *lru;
};

typedef struct byval_imports_global {
    byval_lock_t lock;       /* the list of caches, the uncached and live lists */
    pthread_cond_t released; /* a listed mapping's release ended */
    byval_imports_t *caches[IMPORTS_MAX];
    unsigned ncaches;
    byval_import_t *uncached;
    /* Every mapping from its insert until its release has returned: a
     * mapping an eviction or a removal took out of its cache is in no
     * cache while its release runs, on whichever thread. */
    byval_import_t *live;
    byval_ptrmap_t *open_ptrs;
    byval_rwlock_t gate; /* releases shared, fork and purges exclusive */
    uint64_t closed, peak, budget;
} byval_imports_global_t;

extern byval_imports_global_t byval_imports_g;

/* An acquire load (LD, in lru_internal.h, is a relaxed one). */
#define LD_ACQ(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)

/* Give m to the driver and free it: every path that ends a mapping. */
void byval_imports_release(byval_import_t *m);
/* Put m on the live list (at insert); g.lock not held. */
void byval_imports_list(byval_import_t *m);
/* 1 when ptr lies inside a mapping on the live list. */
int byval_imports_holds(uintptr_t ptr);
/* 1 when m is a shared_ptr mapping the application has open. */
int byval_imports_open_shared(const byval_import_t *m);
/* At-fork child: the lists start empty, the condition anew. */
void byval_imports_life_child(void);

#endif
