/* SPDX-License-Identifier: MIT */
/*
 * exports.c - the export core (exports.h): a table per backend (an LRU
 * for lock-free hits, plus its list of live exports for the context,
 * range and by-fd scans), the one get flow (a hit, or the backend's new
 * export started, written and kept), and the shared objects exports hold,
 * counted: a registry entry
 * per (key, inode), a broker offer and a rescue registration per (fd,
 * inode); the first holder takes one through the sink, the last gives it
 * back. An export is withdrawn once, under the core's lock, and ends (the
 * backend's callback) when the cache lets it go: at once, or at its last
 * reference's unget.
 */
#include "cache/exports.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cache/locks.h"

#define ITEM_BUCKETS 1024u
#define EXP_PUBLISHED 4u /* an item's registry entry is taken */

struct byval_exports {
    struct byval_exports *next_table;
    const byval_backend_export_t *ops;
    byval_lru_t *lru;
    byval_export_t *head; /* live, not withdrawn */
    size_t live;
};

typedef struct held {
    struct held *next;
    unsigned stage; /* EXP_PUBLISHED, BYVAL_EXPORT_OFFER or BYVAL_EXPORT_RESCUE */
    uint64_t id;    /* registry key, or fd */
    uint32_t ino;
    uint32_t holders;
    uint64_t serial;
} held_t;

/* One lock for the tables' lists and the counted objects: ranked before
 * the sink's (registry, broker, rescue), never under a cache lock. */
static struct {
    byval_lock_t lock;
    byval_exports_t *tables;
    const byval_exports_sink_t *sink;
    held_t *bucket[ITEM_BUCKETS];
    size_t nheld[3]; /* by stage / 2: offered, registered, published */
} core = {.lock = BYVAL_LOCK_INIT(EXPORTS)};

/* fork: held across it like the sink's locks. The child ends nothing of
 * the parent's and holds nothing: its state is dropped, not freed. */
BYVAL_LOCK_STATIC(exports, &core.lock);

static void fork_child(void)
{
    for (byval_exports_t *x = core.tables; x; x = x->next_table) {
        x->head = NULL;
        __atomic_store_n(&x->live, 0, __ATOMIC_RELAXED);
    }
    memset(core.bucket, 0, sizeof(core.bucket));
    memset(core.nheld, 0, sizeof(core.nheld));
}
BYVAL_FORK_CHILD(exports, fork_child);

void byval_exports_set_sink(const byval_exports_sink_t *s)
{
    byval_lock(&core.lock);
    core.sink = s;
    byval_unlock(&core.lock);
}

/* ---- counted shared objects (locked) ------------------------------------ */

/* Hashed on (stage, key or fd) alone: a key's entries share a bucket. */
static held_t **head(unsigned stage, uint64_t id)
{
    uint64_t h = (id ^ stage) * UINT64_C(0x9E3779B97F4A7C15);
    return &core.bucket[h >> 54 & (ITEM_BUCKETS - 1)];
}

static held_t **find(unsigned stage, const byval_export_item_t *it)
{
    uint64_t id = stage == EXP_PUBLISHED ? it->key : (uint64_t)(int64_t)it->fd;
    held_t **pp = head(stage, id);
    while (*pp && !((*pp)->stage == stage && (*pp)->id == id && (*pp)->ino == it->ino))
        pp = &(*pp)->next;
    return pp;
}

static void untake(unsigned stage, const byval_export_item_t *it)
{
    if (stage == EXP_PUBLISHED)
        core.sink->unpublish(it->key, it->ino); /* importers release their closed mappings */
    else if (stage == BYVAL_EXPORT_OFFER)
        core.sink->withdraw(it->fd);
    else
        core.sink->delist(it->fd);
}

/* Take one stage of it: 1 when held (by it among others). */
static int take(unsigned stage, byval_export_item_t *it)
{
    held_t **pp = find(stage, it), *h = *pp;
    uint64_t serial = 0;
    if (!core.sink)
        return 0;
    if (stage == EXP_PUBLISHED) {
        /* Every fd of a key is listed: the registry adds a slot per fd
         * and answers a live one's serial again. */
        serial = core.sink->publish(it->key, it->ino, it->fd >= 0 ? (uint32_t)it->fd : 0, it->size);
        if (!serial && !h)
            return 0;
        it->serial = serial ? serial : h->serial;
    } else if (!h &&
               (stage == BYVAL_EXPORT_OFFER
                    ? core.sink->offer(it->fd, !!(it->flags & BYVAL_EXPORT_OPEN))
                    : core.sink->enlist(it->fd)) != 0) {
        return 0;
    }
    if (!h) {
        if (!(h = calloc(1, sizeof(*h)))) { /* cannot count it: given back at once */
            untake(stage, it);
            return 0;
        }
        uint64_t id = stage == EXP_PUBLISHED ? it->key : (uint64_t)(int64_t)it->fd;
        *h = (held_t){NULL, stage, id, it->ino, 0, it->serial};
        *pp = h;
        __atomic_add_fetch(&core.nheld[stage / 2], 1, __ATOMIC_RELAXED);
    }
    h->holders++;
    it->taken |= stage;
    return 1;
}

static void give(unsigned stage, byval_export_item_t *it)
{
    if (!(it->taken & stage))
        return;
    it->taken &= ~stage;
    held_t **pp = find(stage, it), *h = *pp;
    if (!h || --h->holders)
        return;
    *pp = h->next;
    __atomic_sub_fetch(&core.nheld[stage / 2], 1, __ATOMIC_RELAXED);
    free(h);
    untake(stage, it);
}

static int take_locked(byval_export_t *e)
{
    int rc = 0;
    for (uint32_t i = 0; i < e->nitems; i++) {
        byval_export_item_t *it = &e->items[i];
        it->taken = 0;
        it->serial = 0;
        if (it->key && !take(EXP_PUBLISHED, it) && i == 0)
            rc = -1;
        if (it->fd >= 0 && (it->flags & BYVAL_EXPORT_OFFER))
            take(BYVAL_EXPORT_OFFER, it);
        if (it->fd >= 0 && (it->flags & BYVAL_EXPORT_RESCUE))
            take(BYVAL_EXPORT_RESCUE, it);
    }
    return rc;
}

/* What names an fd goes before the backend's end can close it: the
 * registry entry first, then the offer and the registration. Item 0's
 * entry before all: an importer that finds a later item unlisted and
 * item 0 listed knows the export was trimmed, not ended. */
static void give_locked(byval_export_t *e, uint32_t from)
{
    if (!from && e->nitems)
        give(EXP_PUBLISHED, &e->items[0]);
    for (uint32_t i = e->nitems; i-- > from;) {
        give(EXP_PUBLISHED, &e->items[i]);
        give(BYVAL_EXPORT_OFFER, &e->items[i]);
        give(BYVAL_EXPORT_RESCUE, &e->items[i]);
    }
}

int byval_exports_key_held(uint64_t key)
{
    int held = 0;
    byval_lock(&core.lock);
    for (const held_t *h = *head(EXP_PUBLISHED, key); h && !held; h = h->next)
        held = h->stage == EXP_PUBLISHED && h->id == key;
    byval_unlock(&core.lock);
    return held;
}

void byval_exports_counts(size_t *published_p, size_t *offered_p, size_t *registered_p)
{
    /* No lock: a fork child's exit statistics must not wait for one. */
    *published_p = __atomic_load_n(&core.nheld[2], __ATOMIC_RELAXED);
    *offered_p = __atomic_load_n(&core.nheld[0], __ATOMIC_RELAXED);
    *registered_p = __atomic_load_n(&core.nheld[1], __ATOMIC_RELAXED);
}

/* ---- tables ------------------------------------------------------------- */

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
    give_locked(e, 0);
    byval_exports_t *x = e->home;
    if (e->prev)
        e->prev->next = e->next;
    else
        x->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    __atomic_store_n(&x->live, x->live - 1, __ATOMIC_RELAXED);
}

void byval_exports_discard(byval_export_t *e)
{
    byval_lock(&core.lock);
    withdraw_locked(e);
    byval_unlock(&core.lock);
    e->home->ops->end ? e->home->ops->end(e) : free(e);
}

/* The cache let e go (removed, evicted, or its last reference after a
 * removal): withdrawn if it was not, then ended. */
static void let_go(void *ctx, const void *key, void *value)
{
    byval_exports_discard(value);
}

byval_export_t *byval_export_alloc(size_t size, uint32_t nitems)
{
    byval_export_t *e = calloc(1, size + nitems * sizeof(byval_export_item_t));
    if (e) {
        e->nitems = nitems;
        e->items = (byval_export_item_t *)((char *)e + size);
    }
    return e;
}

byval_exports_t *byval_exports_create(const byval_backend_export_t *ops, size_t capacity)
{
    byval_exports_t *x = calloc(1, sizeof(*x));
    if (!x || !(x->lru = byval_lru_create(capacity ? capacity : 1, ops->key_len, let_go, x))) {
        free(x);
        return NULL;
    }
    x->ops = ops;
    byval_lock(&core.lock);
    x->next_table = core.tables;
    core.tables = x;
    byval_unlock(&core.lock);
    return x;
}

byval_lru_t *byval_exports_lru(byval_exports_t *x)
{
    return x ? x->lru : NULL;
}

int byval_exports_start(byval_exports_t *x, byval_export_t *e)
{
    byval_lock(&core.lock);
    e->home = x;
    e->withdrawn = 0;
    e->prev = NULL;
    e->next = x->head;
    if (x->head)
        x->head->prev = e;
    x->head = e;
    __atomic_store_n(&x->live, x->live + 1, __ATOMIC_RELAXED);
    int rc = take_locked(e);
    byval_unlock(&core.lock);
    return rc;
}

/* Out of the cache an export that a racing end withdrew. */
static void drop_ref(byval_exports_t *x, byval_lru_ref_t ref)
{
    byval_lru_remove_ref(x->lru, ref);
    byval_lru_put_ref(x->lru, ref);
}

byval_export_t *byval_exports_get(byval_exports_t *x, const void *key, byval_lru_ref_t *ref_p)
{
    void *v;
    if (!x || !byval_lru_get_ref(x->lru, key, &v, ref_p))
        return NULL;
    if (!is_withdrawn(v))
        return v;
    drop_ref(x, *ref_p); /* withdrawn by a racing end: a miss */
    *ref_p = 0;
    return NULL;
}

void byval_exports_unget(byval_exports_t *x, byval_lru_ref_t ref)
{
    if (x && ref)
        byval_lru_put_ref(x->lru, ref);
}

static int stands_for(const byval_exports_t *x, const byval_export_t *e, void *call)
{
    return !x->ops->same || x->ops->same(e, call);
}

int byval_exports_hit(byval_exports_t *x, const void *key, void *call)
{
    byval_lru_ref_t ref = 0;
    byval_export_t *e = byval_exports_get(x, key, &ref);
    int same = e && stands_for(x, e, call);
    if (same && x->ops->hand)
        x->ops->hand(e, call);
    byval_exports_unget(x, ref);
    if (e && !same) /* freed behind our back, the key reused: stale */
        byval_exports_end(x, key);
    return same;
}

int byval_exports_add(byval_exports_t *x, const void *key, byval_export_t *e, void *call)
{
    if (!x || !e) {
        free(e);
        return -1;
    }
    if (byval_exports_start(x, e) != 0 || (x->ops->write && x->ops->write(e, call) != 0)) {
        byval_exports_discard(e);
        return -1;
    }
    e->handed = 1;
    for (int tries = 0; tries < 3 && !is_withdrawn(e); tries++) { /* ended meanwhile: not kept */
        void *v = NULL;
        byval_lru_ref_t ref;
        int rc = byval_lru_insert_ref(x->lru, key, e, &v, &ref);
        int shared = rc == BYVAL_LRU_EXISTS && !is_withdrawn(v) && stands_for(x, v, call);
        if ((rc == BYVAL_LRU_OK || shared) && x->ops->hand)
            x->ops->hand(rc == BYVAL_LRU_OK ? e : v, call);
        if (rc == BYVAL_LRU_EXISTS && !shared && is_withdrawn(v))
            drop_ref(x, ref); /* withdrawn, still under the key: e takes its place */
        else
            byval_exports_unget(x, ref);
        if (rc == BYVAL_LRU_OK)
            return 0;
        if (shared) {
            byval_exports_discard(e);
            return 2;
        }
        if (rc != BYVAL_LRU_EXISTS)
            break;
        if (!is_withdrawn(v)) /* another one under the key: stale */
            byval_exports_end(x, key);
    }
    e->handed = 0;
    byval_exports_discard(e);
    return -2;
}

int byval_exports_obtain(byval_exports_t *x, const void *key, void *call)
{
    int rc = -2;
    for (unsigned t = 0; rc == -2 && t < (x->ops->tries ? x->ops->tries : 1); t++)
        rc = byval_exports_hit(x, key, call) ? 1
                                             : byval_exports_add(x, key, x->ops->make(call), call);
    return rc;
}

int byval_exports_end(byval_exports_t *x, const void *key)
{
    void *v;
    byval_lru_ref_t ref;
    if (!x || !byval_lru_get_ref(x->lru, key, &v, &ref))
        return 0;
    byval_lock(&core.lock); /* withdrawn now, whoever else holds it */
    withdraw_locked(v);
    byval_unlock(&core.lock);
    drop_ref(x, ref);
    return 1;
}

static int withdrawn_pred(void *ctx, const void *key, void *value)
{
    return is_withdrawn(value);
}

size_t byval_exports_cut_if(byval_exports_t *x, uint32_t (*keep)(void *arg, byval_export_t *e),
                            void *arg)
{
    size_t n = 0, ended = 0;
    if (!byval_exports_live(x))
        return 0;
    byval_lock(&core.lock);
    for (byval_export_t *e = x->head, *next; e; e = next) {
        next = e->next;
        uint32_t k = keep(arg, e);
        if (k >= e->nitems)
            continue;
        n++;
        if (!k) {
            withdraw_locked(e);
            ended++;
        } else {
            give_locked(e, k);
            e->nitems = k;
        }
    }
    byval_unlock(&core.lock);
    if (ended) /* and out of the cache: ended now, or at their last unget */
        byval_lru_remove_if(x->lru, withdrawn_pred, NULL);
    return n;
}

static uint32_t out_of_ctx(void *arg, byval_export_t *e)
{
    return e->ctx == *(const uintptr_t *)arg ? 0 : UINT32_MAX;
}

size_t byval_exports_end_ctx(byval_exports_t *x, uintptr_t ctx)
{
    return byval_exports_cut_if(x, out_of_ctx, &ctx);
}

size_t byval_exports_live(byval_exports_t *x)
{
    return x ? __atomic_load_n(&x->live, __ATOMIC_RELAXED) : 0;
}
