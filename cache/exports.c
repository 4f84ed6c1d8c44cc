/* SPDX-License-Identifier: MIT */
/*
 * exports.c - one lifecycle for every export (see exports.h): a table per
 * API (an LRU for lock-free hits, plus the list of live exports that the
 * context, range and by-fd scans walk), and one place where an export
 * ends: withdrawn under the core's lock, then the API's end callback
 * outside it.
 *
 * An export is withdrawn at most once (e->withdrawn) and leaves its
 * table's list then; it ends (the callback) when the cache lets it go:
 * at once, or at its last reference's unget when a hit holds it. A hit
 * never returns a withdrawn export.
 */
#include "cache/exports.h"

#include <pthread.h>
#include <stdlib.h>

#include "cache/exports_internal.h"
#include "cache/locks.h"

#define EXPORT_TABLES 8

struct byval_exports {
    const byval_exports_ops_t *ops;
    byval_lru_t *lru;
    byval_export_t *head; /* live, not withdrawn */
    size_t live;
};

static struct {
    byval_lock_t lock;
    unsigned ntables;
    byval_exports_t *tables[EXPORT_TABLES];
} core = {.lock = BYVAL_LOCK_INIT(EXPORTS)};

/* fork (cache/locks.h): the core's lock ranks before the sink's locks
 * (registry, broker, rescue registry) that it is held across, so prepare
 * holds it across fork like theirs. The child needs none of the state it
 * guards: the caches empty themselves without callbacks (lru.h), and the
 * child ends nothing of the parent's and holds nothing, so everything is
 * dropped (not freed: no free() in a fork child). */
BYVAL_LOCK_STATIC(exports, &core.lock);

static void fork_child(void)
{
    for (unsigned t = 0; t < core.ntables && t < EXPORT_TABLES; t++) {
        core.tables[t]->head = NULL;
        __atomic_store_n(&core.tables[t]->live, 0, __ATOMIC_RELAXED);
    }
    byval_exports_items_forget();
}
BYVAL_FORK_CHILD(exports, fork_child);

void byval_exports_lock(void)
{
    byval_lock(&core.lock);
}

void byval_exports_unlock(void)
{
    byval_unlock(&core.lock);
}

static int is_withdrawn(const byval_export_t *e)
{
    return __atomic_load_n(&e->withdrawn, __ATOMIC_ACQUIRE);
}

/* (locked) Withdraw e: its items given back, out of its table's list. */
static void withdraw_locked(byval_export_t *e)
{
    if (is_withdrawn(e))
        return;
    __atomic_store_n(&e->withdrawn, 1, __ATOMIC_RELEASE);
    byval_exports_give_locked(e, 0);
    if (e->listed) {
        byval_exports_t *x = e->home;
        if (e->prev)
            e->prev->next = e->next;
        else
            x->head = e->next;
        if (e->next)
            e->next->prev = e->prev;
        e->listed = 0;
        __atomic_store_n(&x->live, x->live - 1, __ATOMIC_RELAXED);
    }
}

void byval_exports_discard(byval_export_t *e)
{
    byval_exports_lock();
    withdraw_locked(e);
    byval_exports_unlock();
    e->home->ops->end(e);
}

/* The cache let e go (removed, evicted, or its last reference after a
 * removal): withdrawn if it was not, then ended. */
static void let_go(void *ctx, const void *key, void *value)
{
    (void)ctx;
    (void)key;
    byval_exports_discard(value);
}

byval_exports_t *byval_exports_create(const byval_exports_ops_t *ops, size_t capacity)
{
    byval_exports_t *x = calloc(1, sizeof(*x));
    if (!x)
        return NULL;
    x->ops = ops;
    x->lru = byval_lru_create(capacity ? capacity : 1, ops->key_len, let_go, x);
    byval_exports_lock();
    int room = core.ntables < EXPORT_TABLES;
    if (room && x->lru)
        core.tables[core.ntables++] = x;
    byval_exports_unlock();
    if (!room || !x->lru) {
        byval_lru_destroy(x->lru);
        free(x);
        return NULL;
    }
    return x;
}

byval_lru_t *byval_exports_lru(byval_exports_t *x)
{
    return x ? x->lru : NULL;
}

int byval_exports_start(byval_exports_t *x, byval_export_t *e)
{
    byval_exports_lock();
    e->home = x;
    e->started = 1;
    e->withdrawn = 0;
    e->prev = NULL;
    e->next = x->head;
    if (x->head)
        x->head->prev = e;
    x->head = e;
    e->listed = 1;
    __atomic_store_n(&x->live, x->live + 1, __ATOMIC_RELAXED);
    int rc = byval_exports_take_locked(e);
    byval_exports_unlock();
    return rc;
}

int byval_exports_insert(byval_exports_t *x, const void *key, byval_export_t *e,
                         byval_export_t **existing_p, byval_lru_ref_t *ref_p)
{
    for (int tries = 0; tries < 2; tries++) {
        void *v = NULL;
        *ref_p = 0;
        if (is_withdrawn(e))
            break; /* ended meanwhile (a free or a context destroy) */
        int rc = byval_lru_insert_ref(x->lru, key, e, &v, ref_p);
        if (rc == BYVAL_LRU_OK)
            return 0;
        if (rc != BYVAL_LRU_EXISTS)
            break;
        if (!is_withdrawn(v)) {
            *existing_p = v;
            return BYVAL_LRU_EXISTS;
        }
        /* A withdrawn export still under the key: it goes, e takes its place. */
        byval_lru_remove_ref(x->lru, *ref_p);
        byval_lru_put_ref(x->lru, *ref_p);
    }
    *ref_p = 0;
    byval_exports_discard(e);
    return BYVAL_LRU_NOENT;
}

byval_export_t *byval_exports_get(byval_exports_t *x, const void *key, byval_lru_ref_t *ref_p)
{
    void *v;
    if (!x || !byval_lru_get_ref(x->lru, key, &v, ref_p))
        return NULL;
    if (!is_withdrawn(v))
        return v;
    /* Withdrawn by a racing end: let it go, a miss. */
    byval_lru_remove_ref(x->lru, *ref_p);
    byval_lru_put_ref(x->lru, *ref_p);
    *ref_p = 0;
    return NULL;
}

void byval_exports_unget(byval_exports_t *x, byval_lru_ref_t ref)
{
    if (x && ref)
        byval_lru_put_ref(x->lru, ref);
}

int byval_exports_end(byval_exports_t *x, const void *key)
{
    void *v;
    byval_lru_ref_t ref;
    if (!x || !byval_lru_get_ref(x->lru, key, &v, &ref))
        return 0;
    /* Withdrawn now, whoever else holds it: the caller frees next. */
    byval_exports_lock();
    withdraw_locked(v);
    byval_exports_unlock();
    byval_lru_remove_ref(x->lru, ref);
    byval_lru_put_ref(x->lru, ref);
    return 1;
}

static int withdrawn_pred(void *ctx, const void *key, void *value)
{
    (void)ctx;
    (void)key;
    return is_withdrawn(value);
}

size_t byval_exports_end_if(byval_exports_t *x, int (*pred)(void *arg, const byval_export_t *e),
                            void *arg)
{
    size_t n = 0;
    if (!x || !__atomic_load_n(&x->live, __ATOMIC_RELAXED))
        return 0;
    byval_exports_lock();
    for (byval_export_t *e = x->head, *next; e; e = next) {
        next = e->next;
        if (pred(arg, e)) {
            withdraw_locked(e);
            n++;
        }
    }
    byval_exports_unlock();
    if (n) /* and out of the cache: ended now, or at their last unget */
        byval_lru_remove_if(x->lru, withdrawn_pred, NULL);
    return n;
}

static int in_ctx(void *arg, const byval_export_t *e)
{
    return e->ctx == *(const uintptr_t *)arg;
}

size_t byval_exports_end_ctx(byval_exports_t *x, uintptr_t ctx)
{
    return byval_exports_end_if(x, in_ctx, &ctx);
}

int byval_exports_visit(byval_exports_t *x, int (*visit)(void *arg, const byval_export_t *e),
                        void *arg)
{
    int r = 0;
    if (!x || !__atomic_load_n(&x->live, __ATOMIC_RELAXED))
        return 0;
    byval_exports_lock();
    for (const byval_export_t *e = x->head; e && !r; e = e->next)
        r = visit(arg, e);
    byval_exports_unlock();
    return r;
}

void byval_exports_trim(byval_export_t *e, uint32_t nitems)
{
    byval_exports_lock();
    if (!is_withdrawn(e) && nitems < e->nitems) {
        byval_exports_give_locked(e, nitems);
        e->nitems = nitems;
    }
    byval_exports_unlock();
}

size_t byval_exports_live(byval_exports_t *x)
{
    return x ? __atomic_load_n(&x->live, __ATOMIC_RELAXED) : 0;
}

int byval_exports_key_held(uint64_t key)
{
    byval_exports_lock();
    int held = byval_exports_key_held_locked(key);
    byval_exports_unlock();
    return held;
}
