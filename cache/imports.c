/* SPDX-License-Identifier: MIT */
/*
 * imports.c - the lifecycle core of imported mappings (imports.h): opens,
 * closes, budgets, the one release path, releases by rule and purges.
 *
 * Design notes.
 * - One open-pointer map for every API: close gets only a pointer. It
 *   keeps each pointer with the cache reference it came with; a pointer
 *   closed as often as opened stays (count 0) until its mapping is
 *   released. A release marks it closed before the driver unmaps it (a
 *   close then fails as natively: the application closed it; it never
 *   reaches the driver, which would close our mapping) and drops it
 *   after; a new mapping at the same address meanwhile replaces the
 *   closed record. A close of a pointer inside a mapping we hold fails
 *   too (a driver's close takes interior pointers: it would release ours).
 * - The byte budget counts a mapping's bytes from its first close until
 *   it is released, also while it is open again: an over-estimate of what
 *   closed mappings hold (never an under-estimate), which keeps the hit
 *   path free of shared counters (a re-open and its close touch no global
 *   state). When a first close takes the total over the budget, the
 *   caches evict unreferenced counted mappings in clock order until it
 *   fits.
 * - Liveness: m->live points at the exporter's registry slot and m->serial
 *   is what it held when tracked (at the first close, when a mapping
 *   starts to live on borrowed time); a hit compares them (one load) and
 *   the registry watcher's events remove freed ones at once.
 * - Releases run under a shared gate, which a fork takes exclusive; a
 *   context's purge waits for every release of that context, also those
 *   other threads started.
 * - Why a live list: a mapping that an eviction, a removal or a last
 *   close takes out of its cache is released after the cache lock is
 *   dropped, on whichever thread. A context's destroy in that window
 *   would find nothing of its context, and the release would then close
 *   the mapping with a dead (or reused) context handle. Every mapping is
 *   listed from its insert until its release returns; a purge waits until
 *   none of its context is listed.
 */
#include "cache/imports.h"

#include <stdlib.h>

#include "cache/locks.h"
#include "cache/ptrmap.h"

#define IMPORTS_MAX 8

struct byval_imports {
    const byval_backend_import_t *ops;
    byval_lru_t *lru;
};

static struct {
    byval_lock_t lock;       /* the list of caches, the live list */
    pthread_cond_t released; /* a listed mapping's release ended */
    byval_imports_t *caches[IMPORTS_MAX];
    unsigned ncaches;
    /* Every mapping from its insert until its release has returned: a
     * mapping an eviction or a removal took out of its cache is in no
     * cache while its release runs, on whichever thread. */
    byval_import_t *live;
    byval_ptrmap_t *open_ptrs;
    byval_rwlock_t gate; /* releases shared, fork and purges exclusive */
    uint64_t closed, peak, budget;
    void (*untrack)(void *tracker);
    void (*watch)(byval_import_t *m);
} g = {.lock = BYVAL_LOCK_INIT(IMPORTS),
       .gate = BYVAL_RWLOCK_INIT(IMPORTS_GATE),
       .released = PTHREAD_COND_INITIALIZER,
       .budget = UINT64_MAX};

/* An acquire load. */
#define LD_ACQ(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)

int byval_import_alive(const byval_import_t *m)
{
    const uint64_t *w = LD_ACQ(&m->live);
    return !w ||
        __atomic_load_n(w, __ATOMIC_ACQUIRE) == __atomic_load_n(&m->serial, __ATOMIC_RELAXED);
}

/* byval_import_alive() right after m was tracked: either we see the exporter's free
 * or its wake-up's scan sees m tracked. We store m->live then load the
 * serial word; the watcher loads m->tracker and m->live after the
 * exporter's store to that word (ordered by its pipe write). A store and
 * a later load may pass each other (x86 too) and both sides would read
 * the old values: sequentially consistent, they cannot (the store in
 * byval_import_track is too; no fence: TSan has none). */
static int alive_tracked(const byval_import_t *m)
{
    const uint64_t *w = __atomic_load_n(&m->live, __ATOMIC_SEQ_CST);
    return !w ||
        __atomic_load_n(w, __ATOMIC_SEQ_CST) == __atomic_load_n(&m->serial, __ATOMIC_RELAXED);
}

void byval_import_track(byval_import_t *m, const uint64_t *word, uint64_t serial, void *tracker)
{
    __atomic_store_n(&m->tracker, tracker, __ATOMIC_RELAXED); /* read by the watcher thread */
    __atomic_store_n(&m->serial, serial, __ATOMIC_RELAXED);
    __atomic_store_n(&m->live, word, __ATOMIC_SEQ_CST); /* after the serial; alive_tracked */
}

/* ---- the live list, the one release path ---------------------------------- */

static void list(byval_import_t *m)
{
    m->inserting = 1; /* cleared once its cache has it */
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

static int holds(uintptr_t ptr)
{
    int in = 0;
    byval_lock(&g.lock);
    for (byval_import_t *m = g.live; m && !in; m = m->lnext)
        in = m->addr && ptr >= m->addr &&
            ptr - m->addr < (m->span ? m->span : __atomic_load_n(&m->bytes, __ATOMIC_RELAXED));
    byval_unlock(&g.lock);
    return in;
}

static void release(byval_import_t *m)
{
    const byval_backend_import_t *ops = m->home->ops;
    void *tracker = __atomic_load_n(&m->tracker, __ATOMIC_ACQUIRE);
    /* Closed for the application from here on, recorded until the driver
     * has unmapped it (design notes). */
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
    if (tracker && g.untrack)
        g.untrack(tracker);
    unlist(m);
    free(m);
}

static int open_shared(const byval_import_t *m)
{
    return m->home->ops->shared_ptr && byval_ptrmap_count_value(g.open_ptrs, m->addr, m) > 0;
}

static void evicted(void *ctx, const void *key, void *value)
{
    release(value);
}

/* fork (cache/locks.h): the gate, so that no release is inside the
 * driver while fork copies the address space (the watcher thread's
 * releases are ours, not the application's, and a driver lock they hold
 * would stay locked in the child forever), and the lists' lock. */
BYVAL_RWLOCK_STATIC(imports_gate, &g.gate);
BYVAL_LOCK_STATIC(imports, &g.lock);

/* The child holds none of the parent's mappings (its caches empty
 * themselves, without driver calls): it forgets the opens too. */
static void imports_fork_child(void)
{
    g.live = NULL;
    pthread_cond_init(&g.released, NULL);
    byval_ptrmap_clear(g.open_ptrs);
    __atomic_store_n(&g.closed, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&g.peak, 0, __ATOMIC_RELAXED);
}
BYVAL_FORK_CHILD(imports, imports_fork_child);

byval_imports_t *byval_imports_create(const byval_backend_import_t *ops, size_t capacity)
{
    byval_imports_t *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->ops = ops;
    /* The cache is made outside g.lock: nothing needs it held, and its
     * list's lock (LRU_LIST) needs no order against ours. */
    c->lru = byval_lru_create(capacity, ops->key_len, evicted, c);
    int listed = 0;
    byval_lock(&g.lock);
    if (!g.open_ptrs)
        g.open_ptrs = byval_ptrmap_create_keep(sizeof(byval_lru_ref_t));
    unsigned n = g.ncaches;
    if (c->lru && g.open_ptrs && n < IMPORTS_MAX) {
        /* The slot first, then the count: readers load the count, then
         * the slots below it, without the lock. */
        __atomic_store_n(&g.caches[n], c, __ATOMIC_RELEASE);
        __atomic_store_n(&g.ncaches, n + 1, __ATOMIC_RELEASE);
        listed = 1;
    }
    byval_unlock(&g.lock);
    if (!listed) {
        byval_lru_destroy(c->lru);
        free(c);
        return NULL;
    }
    return c;
}

void byval_imports_destroy(byval_imports_t *c)
{
    if (!c)
        return;
    byval_lock(&g.lock);
    unsigned n = g.ncaches;
    for (unsigned i = 0; i < n; i++)
        if (g.caches[i] == c) {
            __atomic_store_n(&g.caches[i], g.caches[n - 1], __ATOMIC_RELEASE);
            __atomic_store_n(&g.ncaches, n - 1, __ATOMIC_RELEASE);
            break;
        }
    byval_unlock(&g.lock);
    byval_lru_destroy(c->lru); /* releases what is left, open or not */
    free(c);
}

void byval_imports_set_budget(uint64_t bytes)
{
    __atomic_store_n(&g.budget, bytes, __ATOMIC_RELAXED);
}

void byval_imports_set_tracking(void (*untrack)(void *tracker), void (*watch)(byval_import_t *m))
{
    g.untrack = untrack;
    g.watch = watch;
}

byval_lru_t *byval_imports_lru(byval_imports_t *c)
{
    return c ? c->lru : NULL;
}

void byval_imports_bytes(uint64_t *held_p, uint64_t *peak_p)
{
    *held_p = __atomic_load_n(&g.closed, __ATOMIC_RELAXED);
    *peak_p = __atomic_load_n(&g.peak, __ATOMIC_RELAXED);
}

/* ---- open ----------------------------------------------------------------- */

byval_import_t *byval_imports_get(byval_imports_t *c, const void *key, byval_lru_ref_t *ref_p)
{
    void *v = NULL;
    if (!byval_lru_get_ref(c->lru, key, &v, ref_p))
        return NULL;
    byval_import_t *m = v;
    if (!byval_import_alive(m) && !open_shared(m)) {
        /* The exporter freed it: out of the cache (released when its last
         * user closes it, maybe now), and this open imports afresh. */
        byval_lru_remove_ref(c->lru, *ref_p);
        byval_lru_put_ref(c->lru, *ref_p);
        *ref_p = 0;
        return NULL;
    }
    return m;
}

void byval_imports_unget(byval_imports_t *c, byval_lru_ref_t ref)
{
    byval_lru_put_ref(c->lru, ref);
}

/* Take m out of the uncached state (m->uncached); 0 when it was not in
 * it (a purge took it). */
static int unlist_uncached(byval_import_t *m)
{
    uint32_t one = 1;
    return __atomic_compare_exchange_n(&m->uncached, &one, 0, 0, __ATOMIC_ACQ_REL,
                                       __ATOMIC_RELAXED);
}

int byval_imports_insert(byval_imports_t *c, const void *key, byval_import_t *m,
                         byval_import_t **out_p, byval_lru_ref_t *ref_p)
{
    m->home = c;
    list(m);
    *out_p = m;
    for (int tries = 0; tries < 8; tries++) {
        void *ex = NULL;
        int rc = byval_lru_insert_ref(c->lru, key, m, &ex, ref_p);
        byval_import_t *e = ex;
        if (rc == BYVAL_LRU_OK) {
            __atomic_store_n(&m->inserting, 0, __ATOMIC_RELEASE); /* a purge finds it now */
            return 0;
        }
        if (rc != BYVAL_LRU_EXISTS)
            break;
        if ((!c->ops->same || c->ops->same(e, m)) &&
            (byval_import_alive(e) || c->ops->shared_ptr)) {
            release(m); /* a racing thread imported the same record first */
            *out_p = e;
            return 0;
        }
        /* Another record under the key (an allocation id the exporter's
         * driver reused, a new process image): m was verified just now,
         * so it wins; the old mapping lives on only for its open users. */
        byval_lru_remove_ref(c->lru, *ref_p);
        byval_lru_put_ref(c->lru, *ref_p);
    }
    /* Every cached mapping is open (or no memory): hand m out uncached. */
    __atomic_store_n(&m->uncached, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&m->inserting, 0, __ATOMIC_RELEASE);
    *ref_p = 0;
    return 0;
}

int byval_imports_open(byval_imports_t *c, byval_import_t *m, byval_lru_ref_t ref, uintptr_t ptr)
{
    if (byval_ptrmap_ref_value(g.open_ptrs, ptr, &ref, m) > 0)
        return 0;
    /* ptr is open from another mapping (a driver that hands out the same
     * pointer again: the other one left its cache while open), or no
     * memory: an entry nobody has open goes, or it would stay unopened,
     * so never tracked, for good. */
    if (ref && byval_ptrmap_count_value(g.open_ptrs, ptr, m) <= 0)
        byval_lru_remove_ref(c->lru, ref);
    if (ref)
        byval_lru_put_ref(c->lru, ref);
    else if (unlist_uncached(m))
        release(m);
    return -1;
}

int byval_imports_opens(const byval_import_t *m, uintptr_t ptr)
{
    int n = byval_ptrmap_count_value(LD_ACQ(&g.open_ptrs), ptr, m);
    return n > 0 ? n : 0;
}

void byval_imports_gated(void (*fn)(void *arg), void *arg)
{
    byval_rdlock(&g.gate);
    fn(arg);
    byval_rdunlock(&g.gate);
}

/* ---- close ---------------------------------------------------------------- */

static int shed_pred(void *ctx, const void *key, void *value)
{
    uint64_t *excess = ctx;
    const byval_import_t *m = value;
    if (!*excess)
        return -1;
    if (!LD_ACQ(&m->counted))
        return 0;
    uint64_t bytes = __atomic_load_n(&m->bytes, __ATOMIC_RELAXED);
    *excess = bytes >= *excess ? 0 : *excess - bytes;
    return 1;
}

/* Closed bytes over the budget: evict unreferenced counted mappings. */
void byval_imports_shed(void)
{
    unsigned n = LD_ACQ(&g.ncaches);
    for (unsigned i = 0; i < n; i++) {
        uint64_t held = __atomic_load_n(&g.closed, __ATOMIC_RELAXED);
        uint64_t budget = __atomic_load_n(&g.budget, __ATOMIC_RELAXED);
        if (held <= budget)
            return;
        uint64_t excess = held - budget;
        byval_lru_evict_if(LD_ACQ(&g.caches[i])->lru, shed_pred, &excess);
    }
}

/* Count delta more of m's bytes as closed (first: m's first charge).
 * Under the lists' lock, so that a growth and the first close count
 * each byte once, and the release takes back what was counted. 1 when
 * the total is over the budget. */
static int charge(byval_import_t *m, uint64_t delta, int first)
{
    byval_lock(&g.lock);
    uint64_t bytes = __atomic_add_fetch(&m->bytes, delta, __ATOMIC_RELAXED), add = 0;
    if (first) {
        __atomic_store_n(&m->counted, 2, __ATOMIC_RELEASE);
        add = bytes;
    } else if (LD_ACQ(&m->counted) == 2) {
        add = delta; /* else not charged yet: its first close counts every byte */
    }
    m->charged += add;
    uint64_t held = __atomic_add_fetch(&g.closed, add, __ATOMIC_RELAXED);
    if (held > __atomic_load_n(&g.peak, __ATOMIC_RELAXED))
        __atomic_store_n(&g.peak, held, __ATOMIC_RELAXED);
    byval_unlock(&g.lock);
    return held > __atomic_load_n(&g.budget, __ATOMIC_RELAXED);
}

/* A mapping's first close (we still hold the reference being closed):
 * track it, count its bytes. Returns 1 when the budget must shed. */
static int first_close(byval_imports_t *c, byval_import_t *m, byval_lru_ref_t ref, int left)
{
    uint32_t zero = 0;
    if (!__atomic_compare_exchange_n(&m->counted, &zero, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
        return 0; /* another thread's close was first */
    if (c->ops->track && !LD_ACQ(&m->live))
        c->ops->track(m);
    if (!alive_tracked(m) && !(c->ops->shared_ptr && left)) /* freed before we looked */
        byval_lru_remove_ref(c->lru, ref);
    else if (g.watch && LD_ACQ(&m->live))
        g.watch(m);
    return charge(m, 0, 1);
}

int byval_imports_grow(byval_import_t *m, uint64_t delta)
{
    return charge(m, delta, 0);
}

int byval_imports_close(uintptr_t ptr)
{
    byval_lru_ref_t ref = 0;
    void *v = NULL;
    if (!LD_ACQ(&g.open_ptrs))
        return BYVAL_IMPORTS_NOT_OURS;
    int left = byval_ptrmap_unref_value(g.open_ptrs, ptr, &ref, &v);
    if (left == BYVAL_PTRMAP_CLOSED)
        return BYVAL_IMPORTS_NOT_OPEN;
    if (left < 0) /* inside a mapping of ours: the driver would release it under us */
        return holds(ptr) ? BYVAL_IMPORTS_NOT_OPEN : BYVAL_IMPORTS_NOT_OURS;
    byval_import_t *m = v;
    if (!ref) { /* uncached: the driver's close at the last one */
        if (left == 0) {
            byval_ptrmap_drop(g.open_ptrs, ptr);
            if (unlist_uncached(m))
                release(m);
        }
        return BYVAL_IMPORTS_CLOSED;
    }
    byval_imports_t *c = m->home;
    int over = LD_ACQ(&m->counted) ? 0 : first_close(c, m, ref, left);
    if (c->ops->closed_dead && left >= 0 && !byval_import_alive(m))
        byval_imports_gated(c->ops->closed_dead, m);
    if (c->ops->shared_ptr && !left && !byval_import_alive(m)) /* kept while open (imports.h) */
        byval_lru_remove_ref(c->lru, ref);
    byval_lru_put_ref(c->lru, ref); /* m may be gone from here on */
    if (over)
        byval_imports_shed();
    return BYVAL_IMPORTS_CLOSED;
}

/* ---- releases by rule ----------------------------------------------------- */

typedef struct pred_adapter {
    int (*pred)(void *, const byval_import_t *);
    void *ctx;
} pred_adapter_t;

/* Rules release what nobody needs: a shared_ptr mapping that is open
 * stays (imports.h), released by its last close. */
static int adapt(void *ctx, const void *key, void *value)
{
    const pred_adapter_t *a = ctx;
    return a->pred(a->ctx, value) && !open_shared(value);
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

/* arg: {ctx, dead}. Under the cache lock: the release comes after. */
static int of_ctx(void *arg, const void *key, void *value)
{
    const uintptr_t *c = arg;
    byval_import_t *m = value;
    if (m->ctx == c[0] && c[1])
        __atomic_store_n(&m->dead, 1, __ATOMIC_RELAXED);
    return m->ctx == c[0];
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

size_t byval_imports_purge(uintptr_t ctx, int dead)
{
    uintptr_t match[2] = {ctx, (uintptr_t)dead};
    size_t n = 0;
    unsigned nc = LD_ACQ(&g.ncaches);
    for (unsigned i = 0; i < nc; i++)
        n += byval_lru_purge_if(LD_ACQ(&g.caches[i])->lru, of_ctx, match);
    /* Uncached mappings of ctx, too. */
    byval_import_t *gone = NULL;
    byval_lock(&g.lock);
    for (byval_import_t *m = g.live; m; m = m->lnext)
        if (m->ctx == ctx && unlist_uncached(m)) {
            m->dead = dead;
            m->unext = gone;
            gone = m;
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
