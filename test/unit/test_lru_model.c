/* SPDX-License-Identifier: MIT */
/*
 * test_lru_model.c - part of test_lru (main in test_lru.c): a randomised
 * check against a model of the cache (get/insert/put/remove/set_capacity on
 * 64 keys). Every operation's result, every release (which entry, in which
 * order, that none is referenced) and the stats must match the model, on
 * one shard and on 16 (exact LRU across shards). LRU_TEST_SEED=n replays.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "cache/lru.h"
#include "cache/lru_internal.h"

#include "test/unit/test_lru.h"

/* ---- randomised model check ------------------------------------------ */
#define MK 64

typedef struct mkey {
    int live, zombie;
    uint32_t refs, zrefs;
    uint64_t stamp; /* LRU position while live and unreferenced */
    uintptr_t val, zval;
} mkey_t;

typedef struct model {
    mkey_t k[MK];
    size_t cap, size, high;
    uint64_t clock, evictions;
    int put_key; /* key of the put in progress, -1 otherwise */
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
    uint32_t eff = e->refs - (m->put_key == (int)k && !e->zombie && e->refs);
    m->bad += !((e->live && e->val == v && eff == 0) ||
                (e->zombie && e->zval == v && e->zrefs == 1 && m->put_key == (int)k));
    m->got[m->ngot++] = v;
}

static void model_trim(model_t *m, size_t limit)
{
    while (m->size > limit) {
        mkey_t *best = NULL;
        for (int i = 0; i < MK; i++)
            if (m->k[i].live && !m->k[i].refs && (!best || m->k[i].stamp < best->stamp))
                best = &m->k[i];
        if (!best)
            return;
        best->live = 0, m->size--, m->evictions++;
        m->exp[m->nexp++] = best->val;
    }
}

static void model_put(model_t *m, byval_lru_t *lru, int k)
{
    mkey_t *e = &m->k[k];
    m->put_key = k;
    int rc = PUT(lru, k);
    m->put_key = -1;
    if (e->zombie) { /* documented: a zombie takes the put first */
        assert_int_equal(rc, (int)--e->zrefs);
        if (!e->zrefs) {
            e->zombie = 0;
            m->exp[m->nexp++] = e->zval;
        }
    } else if (e->live && e->refs) {
        assert_int_equal(rc, (int)--e->refs);
        if (!e->refs) {
            e->stamp = ++m->clock;
            model_trim(m, m->cap);
        }
    } else {
        assert_int_equal(rc, BYVAL_LRU_NOENT);
    }
}

/* create_cap > cap: a sharded cache, shrunk to cap before the run. */
static void model_run(size_t create_cap, size_t cap, uint64_t seed, long ops)
{
    model_t m = {.cap = cap, .put_key = -1};
    byval_lru_t *lru = byval_lru_create(create_cap, KLEN, model_evict, &m);
    assert_true(create_cap == cap || lru->nshards == 16);
    byval_lru_set_capacity(lru, cap);
    uintptr_t serial = 1;
    for (long n = 0; n < ops; n++) {
        int k = (int)(rnd(&seed) % MK), op = (int)(rnd(&seed) % 64), ref = op & 1;
        mkey_t *e = &m.k[k];
        void *v = NULL;
        m.nexp = m.ngot = 0;
        if (op < 10) { /* get */
            assert_int_equal(GET(lru, k, ref, &v), e->live);
            if (e->live) {
                assert_int_equal((uintptr_t)v, e->val);
                if (ref || e->refs)
                    e->refs += (uint32_t)ref;
                else
                    e->stamp = ++m.clock; /* touched */
            }
        } else if (op < 30) { /* insert */
            int rc = INS(lru, k, serial, ref, &v);
            if (e->live) {
                assert_int_equal(rc, BYVAL_LRU_EXISTS);
                assert_int_equal((uintptr_t)v, e->val);
                e->refs += (uint32_t)ref;
            } else if (model_trim(&m, m.cap - 1), m.size >= m.cap) {
                assert_int_equal(rc, BYVAL_LRU_FULL);
            } else {
                assert_int_equal(rc, BYVAL_LRU_OK);
                e->live = 1, e->refs = (uint32_t)ref, e->stamp = ++m.clock, e->val = serial;
                if (++m.size > m.high)
                    m.high = m.size;
            }
            serial++;
        } else if (op < 52) {
            model_put(&m, lru, k);
        } else if (op < 63) { /* remove: at most one zombie per key */
            if (e->live && e->refs && e->zombie)
                continue;
            assert_int_equal(RM(lru, k), e->live ? BYVAL_LRU_OK : BYVAL_LRU_NOENT);
            if (e->live) {
                e->live = 0;
                m.size--;
                if (e->refs) /* referenced: becomes a zombie */
                    e->zombie = 1, e->zrefs = e->refs, e->zval = e->val;
                else
                    m.exp[m.nexp++] = e->val;
            }
        } else { /* shrink or grow; every second time back to cap */
            m.cap = n % 2 ? 1 + rnd(&seed) % (2 * cap) : cap;
            byval_lru_set_capacity(lru, m.cap);
            model_trim(&m, m.cap);
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
            m.nexp = 0, model_put(&m, lru, k);
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
