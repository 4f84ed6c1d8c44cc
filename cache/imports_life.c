/* SPDX-License-Identifier: MIT */
/*
 * imports_life.c - how imported mappings end (see imports.h): the one
 * release path, the live list, releases by rule and context purges.
 *
 * Why a live list: a mapping that an eviction, a removal or a last close
 * takes out of its cache is released after the cache lock is dropped, on
 * whichever thread did it (the registry watcher's, for the exporter's
 * frees). A context's destroy that ran in that window found nothing of
 * its context in any cache, let the driver destroy the context, and the
 * release then closed the mapping with a dead context handle, or with the
 * same value reused by a new context, unmapping what a new import had
 * just mapped at that address under the application. Every mapping is
 * listed from its insert until its release returns, and a purge waits
 * until none of its context is listed.
 */
#include "cache/imports.h"

#include <stdlib.h>

#include "cache/imports_internal.h"

#define g byval_imports_g

void byval_imports_list(byval_import_t *m)
{
    m->inserting = 1; /* cleared once its cache has it (insert) */
    byval_lock(&g.lock);
    m->lprev = NULL;
    m->lnext = g.live;
    if (g.live)
        g.live->lprev = m;
    g.live = m;
    byval_unlock(&g.lock);
}

static void unlist(byval_import_t *m)
{
    byval_lock(&g.lock);
    if (m->lprev)
        m->lprev->lnext = m->lnext;
    else if (g.live == m)
        g.live = m->lnext;
    if (m->lnext)
        m->lnext->lprev = m->lprev;
    pthread_cond_broadcast(&g.released);
    byval_unlock(&g.lock);
}

int byval_imports_holds(uintptr_t ptr)
{
    int in = 0;
    byval_lock(&g.lock);
    for (byval_import_t *m = g.live; m && !in; m = m->lnext)
        in = m->addr && ptr >= m->addr &&
            ptr - m->addr < (m->span ? m->span : __atomic_load_n(&m->bytes, __ATOMIC_RELAXED));
    byval_unlock(&g.lock);
    return in;
}

void byval_imports_life_child(void)
{
    /* The child holds none of the parent's mappings (its caches empty
     * themselves without driver calls). */
    g.live = NULL;
    pthread_cond_init(&g.released, NULL);
}

void byval_imports_release(byval_import_t *m)
{
    const byval_backend_import_t *ops = m->home->ops;
    void *tracker = __atomic_load_n(&m->tracker, __ATOMIC_ACQUIRE);
    /* Closed for the application from here on, recorded until the driver
     * has unmapped it (imports.c, design notes). */
    byval_ptrmap_close_value_at(g.open_ptrs, m, m->addr);
    if (LD_ACQ(&m->counted)) {
        byval_lock(&g.lock);
        __atomic_sub_fetch(&g.closed, m->charged, __ATOMIC_RELAXED);
        m->charged = 0;
        byval_unlock(&g.lock);
    }
    byval_rdlock(&g.gate);
    ops->release(m);
    byval_rdunlock(&g.gate);
    byval_ptrmap_drop_value_at(g.open_ptrs, m, m->addr);
    if (tracker && ops->untrack)
        ops->untrack(tracker);
    unlist(m);
    free(m);
}

#define release byval_imports_release

/* ---- releases by rule ----------------------------------------------------- */

typedef struct pred_adapter {
    int (*pred)(void *, const byval_import_t *);
    void *ctx;
} pred_adapter_t;

int byval_imports_open_shared(const byval_import_t *m)
{
    return m->home->ops->shared_ptr && byval_ptrmap_count_value(g.open_ptrs, m->addr, m) > 0;
}

/* Rules release what nobody needs: a shared_ptr mapping that is open
 * stays (imports.h), released by its last close. */
static int adapt(void *ctx, const void *key, void *value)
{
    const pred_adapter_t *a = ctx;
    (void)key;
    return a->pred(a->ctx, value) && !byval_imports_open_shared(value);
}

static int adapt_all(void *ctx, const void *key, void *value)
{
    const pred_adapter_t *a = ctx;
    (void)key;
    return a->pred(a->ctx, value);
}

size_t byval_imports_remove_if(int (*pred)(void *ctx, const byval_import_t *m), void *ctx)
{
    pred_adapter_t a = {pred, ctx};
    size_t n = 0;
    unsigned nc = LD_ACQ(&g.ncaches);
    for (unsigned i = 0; i < nc; i++)
        n += byval_lru_remove_if(LD_ACQ(&g.caches[i])->lru, adapt, &a);
    return n;
}

typedef struct ctx_match {
    uintptr_t ctx;
    int dead;
} ctx_match_t;

static int of_ctx(void *arg, const byval_import_t *m)
{
    const ctx_match_t *c = arg;
    if (m->ctx != c->ctx)
        return 0;
    if (c->dead) /* under the cache lock: the release comes after */
        __atomic_store_n(&((byval_import_t *)m)->dead, 1, __ATOMIC_RELAXED);
    return 1;
}

/* A mapping of ctx still listed (its release not returned), not one that
 * another thread is inserting now (a use of ctx racing its destroy). */
static int in_flight(uintptr_t ctx, int dead)
{
    int n = 0;
    for (byval_import_t *m = g.live; m; m = m->lnext)
        if (m->ctx == ctx && !m->inserting) {
            if (dead) /* gone already: the release must not touch it */
                __atomic_store_n(&m->dead, 1, __ATOMIC_RELAXED);
            n++;
        }
    return n;
}

static size_t purge_ctx(uintptr_t ctx, int dead)
{
    ctx_match_t match = {ctx, dead};
    pred_adapter_t a = {of_ctx, &match};
    size_t n = 0;
    unsigned nc = LD_ACQ(&g.ncaches);
    for (unsigned i = 0; i < nc; i++)
        n += byval_lru_purge_if(LD_ACQ(&g.caches[i])->lru, adapt_all, &a);
    /* Uncached mappings of ctx, too. */
    byval_import_t *gone = NULL;
    byval_lock(&g.lock);
    for (byval_import_t **pp = &g.uncached; *pp;) {
        byval_import_t *m = *pp;
        if (m->ctx == ctx) {
            m->dead = dead;
            *pp = m->unext;
            m->unext = gone;
            gone = m;
        } else {
            pp = &m->unext;
        }
    }
    byval_unlock(&g.lock);
    for (byval_import_t *m = gone, *nx; m; m = nx, n++) {
        nx = m->unext;
        release(m);
    }
    /* Releases of ctx that other threads started before the purge (an
     * eviction, the exporter's free seen by the watcher, the last close
     * of a replaced entry): taken out of their cache, so the purge did
     * not see them, but listed until they return. The context outlives
     * them: the driver destroys it after this returns. */
    byval_lock(&g.lock);
    while (in_flight(ctx, dead))
        pthread_cond_wait(&g.released, &g.lock.m);
    byval_unlock(&g.lock);
    return n;
}

size_t byval_imports_purge_ctx(uintptr_t ctx)
{
    return purge_ctx(ctx, 0);
}

size_t byval_imports_forget_ctx(uintptr_t ctx)
{
    return purge_ctx(ctx, 1);
}
