/* SPDX-License-Identifier: MIT */
/*
 * test_lru_model.c - part of test_lru (main in test_lru.c): a randomised
 * check against a model of the cache (get/insert/put/remove/set_capacity on
 * 64 keys, with and without reference handles). Every operation's result,
 * every handle (slot and generation), every release (which entry, in
 * which order, that none is referenced) and the stats must match the
 * model, which runs the same clock over the same slots. LRU_TEST_SEED=n
 * replays.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "cache/lru.h"

#include "test/unit/test_lru.h"

/* ---- randomised model check ------------------------------------------ */
#define MK 64
#define MSLOTS 1024

/* The model keeps the cache's slot discipline (a LIFO free list, then
 * never-used slots; slots of evicted entries reused only after their
 * callbacks) so that it can run the clock over the same slot order. */
typedef struct mkey {
    int live, zombie, clock;
    uint32_t refs, zrefs;
    unsigned slot, zslot;
    uintptr_t val, zval;
    /* Handles: the live entry's, the zombie's, and the last of an entry
     * released (that must name nothing: its slot moved on). */
    byval_lru_ref_t ref, zref, stale;
} mkey_t;

typedef struct model {
    mkey_t k[MK];
    int slot_key[MSLOTS]; /* key in the slot (live or zombie), -1 free */
    uint32_t gen[MSLOTS]; /* each slot's generation: one more per entry */
    unsigned free_[MSLOTS], nfree, next_new, hand;
    unsigned pending[MSLOTS], npending; /* released, freed after callbacks */
    size_t cap, size, high;
    uint64_t evictions;
    int put_live, put_zombie; /* key whose live entry / zombie a put drops, or -1 */
    uintptr_t exp[MAXREL], got[MAXREL];
    size_t nexp, ngot;
    int bad;
} model_t;

/* Checked against the model BEFORE the operation: the released instance
 * is the live one with no reference held by the test (a put dropping it to
 * 0 may evict it), or a zombie whose last reference the put drops. */
static void model_evict(void *ctx, const void *key, void *value)
{
    model_t *m = ctx;
    uint64_t k = key_of(key);
    uintptr_t v = (uintptr_t)value;
    if (k >= MK || m->ngot >= MAXREL)
        return (void)m->bad++;
    mkey_t *e = &m->k[k];
    uint32_t eff = e->refs - (m->put_live == (int)k && e->refs);
    m->bad += !((e->live && e->val == v && eff == 0) ||
                (e->zombie && e->zval == v && e->zrefs == 1 && m->put_zombie == (int)k));
    m->got[m->ngot++] = v;
}

static void model_release(model_t *m, unsigned slot, uintptr_t val)
{
    m->slot_key[slot] = -1;
    m->pending[m->npending++] = slot;
    m->exp[m->nexp++] = val;
}

/* After the operation's callbacks: its released slots become free. */
static void model_flush(model_t *m)
{
    for (unsigned i = 0; i < m->npending; i++)
        m->free_[m->nfree++] = m->pending[i];
    m->npending = 0;
}

static unsigned model_alloc(model_t *m)
{
    return m->nfree ? m->free_[--m->nfree] : m->next_new++;
}

/* The clock: skip free slots, zombies and referenced entries, clear the
 * bit of an entry hit since the hand passed, evict the first without. */
static int model_evict_one(model_t *m)
{
    unsigned n = m->next_new;
    for (unsigned v = 0; n > 1 && v <= 2 * (n - 1); v++) {
        unsigned i = m->hand;
        m->hand = i + 1 < n ? i + 1 : 1;
        int k = m->slot_key[i];
        if (k < 0)
            continue;
        mkey_t *e = &m->k[k];
        if (!e->live || e->slot != i || e->refs)
            continue; /* the slot is a zombie's, or referenced */
        if (e->clock) {
            e->clock = 0;
            continue;
        }
        e->live = 0, m->size--, m->evictions++;
        e->stale = e->ref, e->ref = 0;
        model_release(m, i, e->val);
        return 1;
    }
    return 0;
}

static void model_trim(model_t *m, size_t limit)
{
    while (m->size > limit && model_evict_one(m))
        ;
}

/* Drop a reference: how 0 = put by key, 1 = put_ref of the live entry,
 * 2 = of the zombie, 3 = of the last entry released (NOENT). A handle
 * the model has not learnt yet (0) also gives NOENT. */
static void model_put(model_t *m, byval_lru_t *lru, int k, int how)
{
    mkey_t *e = &m->k[k];
    byval_lru_ref_t r = how == 1 ? e->ref : how == 2 ? e->zref : e->stale;
    int zombie = how ? how == 2 && r : e->zombie; /* documented: by key, a zombie first */
    if (how == 3 || (how && !r)) {
        assert_int_equal(byval_lru_put_ref(lru, r), BYVAL_LRU_NOENT);
        return;
    }
    m->put_live = zombie ? -1 : k;
    m->put_zombie = zombie ? k : -1;
    int rc = how ? byval_lru_put_ref(lru, r) : PUT(lru, k);
    m->put_live = m->put_zombie = -1;
    if (zombie && e->zombie) {
        assert_int_equal(rc, (int)--e->zrefs);
        if (!e->zrefs) {
            e->zombie = 0;
            e->stale = e->zref, e->zref = 0;
            model_release(m, e->zslot, e->zval);
        }
    } else if (e->live && e->refs) {
        assert_int_equal(rc, (int)--e->refs);
        if (!e->refs)
            model_trim(m, m->cap);
    } else {
        assert_int_equal(rc, BYVAL_LRU_NOENT);
    }
    model_flush(m);
}

/* create_cap > cap: a cache made larger (table, chunks), shrunk to cap before the run. */
static void model_run(size_t create_cap, size_t cap, uint64_t seed, long ops)
{
    model_t m = {.cap = cap, .put_live = -1, .put_zombie = -1, .next_new = 1, .hand = 1};
    for (int i = 0; i < MSLOTS; i++)
        m.slot_key[i] = -1;
    byval_lru_t *lru = byval_lru_create(create_cap, KLEN, model_evict, &m);
    byval_lru_set_capacity(lru, cap);
    uintptr_t serial = 1;
    for (long n = 0; n < ops; n++) {
        int k = (int)(rnd(&seed) % MK), op = (int)(rnd(&seed) % 64), ref = op & 1;
        int by_ref = ref && (op & 2); /* get_ref / insert_ref */
        mkey_t *e = &m.k[k];
        void *v = NULL;
        byval_lru_ref_t r = 1;
        m.nexp = m.ngot = 0;
        if (op < 10) { /* get */
            int hit = by_ref ? byval_lru_get_ref(lru, KB(k), &v, &r) : GET(lru, k, ref, &v);
            assert_int_equal(hit, e->live);
            if (e->live) {
                assert_int_equal((uintptr_t)v, e->val);
                e->refs += (uint32_t)ref;
                e->clock = 1; /* hit */
            }
            if (by_ref) /* the entry's handle, or none */
                assert_int_equal(r, e->live ? e->ref : 0);
        } else if (op < 30) { /* insert */
            int rc = by_ref ? byval_lru_insert_ref(lru, KB(k), (void *)serial, &v, &r)
                            : INS(lru, k, serial, ref, &v);
            if (e->live) {
                assert_int_equal(rc, BYVAL_LRU_EXISTS);
                assert_int_equal((uintptr_t)v, e->val);
                e->refs += (uint32_t)ref;
                e->clock |= ref; /* a reference taken is a use */
            } else if (model_trim(&m, m.cap - 1), m.size >= m.cap) {
                assert_int_equal(rc, BYVAL_LRU_FULL);
            } else {
                assert_int_equal(rc, BYVAL_LRU_OK);
                e->live = 1, e->refs = (uint32_t)ref, e->clock = 0, e->val = serial;
                e->slot = model_alloc(&m);
                e->ref = (uint64_t)e->slot << 32 | ++m.gen[e->slot];
                m.slot_key[e->slot] = k;
                if (++m.size > m.high)
                    m.high = m.size;
            }
            if (by_ref)
                assert_int_equal(r, e->live ? e->ref : 0);
            model_flush(&m);
            serial++;
        } else if (op < 52) { /* put: by key, or by one of the handles */
            model_put(&m, lru, k, op < 40 ? 0 : op < 46 ? 1 : op < 50 ? 2 : 3);
        } else if (op < 63) { /* remove: at most one zombie per key */
            if (e->live && e->refs && e->zombie)
                continue;
            assert_int_equal(RM(lru, k), e->live ? BYVAL_LRU_OK : BYVAL_LRU_NOENT);
            if (e->live) {
                e->live = 0;
                m.size--;
                if (e->refs) { /* referenced: becomes a zombie */
                    e->zombie = 1, e->zrefs = e->refs, e->zval = e->val, e->zslot = e->slot;
                    e->zref = e->ref;
                } else {
                    e->stale = e->ref;
                    model_release(&m, e->slot, e->val);
                }
                e->ref = 0;
                model_flush(&m);
            }
        } else { /* shrink or grow; every second time back to cap */
            m.cap = n % 2 ? 1 + rnd(&seed) % (2 * cap) : cap;
            byval_lru_set_capacity(lru, m.cap);
            model_trim(&m, m.cap);
            model_flush(&m);
        }
        assert_int_equal(m.bad, 0);
        assert_int_equal(m.ngot, m.nexp);
        assert_memory_equal(m.got, m.exp, m.nexp * sizeof(m.exp[0]));
        EXPECT(lru, (long)m.size, -1, -1, -1, -1, (long)m.evictions, -1);
        byval_lru_stats_t st = stats(lru);
        assert_int_equal(st.high_water, m.high);
        assert_true(st.size <= m.cap || st.size == st.referenced);
    }
    for (int k = 0; k < MK; k++) /* drop every reference the test holds */
        while (m.k[k].zombie || (m.k[k].live && m.k[k].refs))
            m.nexp = 0, model_put(&m, lru, k, (int)(rnd(&seed) % 3));
    assert_int_equal(stats(lru).referenced, 0);
    byval_lru_destroy(lru);
    assert_int_equal(m.bad, 0);
}

void test_model_random(void **state)
{
    const char *s = getenv("LRU_TEST_SEED");
    uint64_t seed = s ? strtoull(s, NULL, 0) : 0x9E3779B97F4A7C15ULL;
    printf("model seed 0x%llx (LRU_TEST_SEED)\n", (unsigned long long)seed);
    const size_t caps[] = {1, 3, 16, 63, 5, 48}, create[] = {1, 3, 16, 63, 1024, 1024};
    for (size_t i = 0; i < 6; i++)
        model_run(create[i], caps[i], seed + i, scaled(40000, 5000));
}
