/* SPDX-License-Identifier: MIT */
/*
 * test_lru.c - cache/lru.h semantics: basic operations, EXISTS, FULL, LRU
 * order, a randomised model check (eviction never drops a referenced
 * entry), callbacks without the lock, stats, ptrmap. Zombies, scale, threads,
 * fork and the shared helpers: test_lru_threads.c (same binary).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "cache/lru.h"
#include "cache/ptrmap.h"

#include "test/unit/test_lru.h"
void test_zombies(void **state);
void test_bound_1m_inserts_random_refs(void **state);
void test_sharded_bound_and_bytes(void **state);
void test_threads_16_shared_keys(void **state);
void test_fork_child_empty_no_callback(void **state);
void test_fork_while_hammered(void **state);

/* Every release: key and value; bad when bytes 8.. of the key are not the
 * zeros the entry was created with (the callback gets the entry's key). */
#define MAXREL 256
typedef struct evlog {
    size_t n;
    uint64_t key[MAXREL];
    void *val[MAXREL];
    int bad;
} evlog_t;

static void log_evict(void *ctx, const void *key, void *value)
{
    evlog_t *l = ctx;
    static const unsigned char zero[KLEN - 8];
    l->bad += memcmp((const unsigned char *)key + 8, zero, sizeof(zero)) != 0;
    if (l->n < MAXREL)
        l->key[l->n] = key_of(key), l->val[l->n++] = value;
}

#define V(k) ((void *)(uintptr_t)(0x1000 + (k)))

static void test_get_insert_put_remove_exists(void **state)
{
    evlog_t l = {0};
    assert_null(byval_lru_create(0, KLEN, NULL, NULL));
    assert_null(byval_lru_create(4, 0, NULL, NULL));
    byval_lru_t *lru = byval_lru_create(4, KLEN, log_evict, &l);
    void *v = NULL;
    assert_int_equal(GET(lru, 1, 0, &v), 0);
    assert_int_equal(INS(lru, 1, V(1), 0, NULL), BYVAL_LRU_OK);
    assert_true(GET(lru, 1, 0, &v) == 1 && v == V(1));
    assert_int_equal(PUT(lru, 1), BYVAL_LRU_NOENT); /* no reference held */
    assert_int_equal(PUT(lru, 2), BYVAL_LRU_NOENT); /* unknown key */
    assert_int_equal(GET(lru, 1, 1, &v), 1);
    assert_int_equal(GET(lru, 1, 1, NULL), 1);
    EXPECT(lru, 1, 1, 3, 1, 1, 0, 0); /* hits, misses, no stats for put */
    assert_int_equal(PUT(lru, 1), 1);
    assert_int_equal(PUT(lru, 1), 0);
    assert_int_equal(PUT(lru, 1), BYVAL_LRU_NOENT);
    assert_int_equal(RM(lru, 1), BYVAL_LRU_OK);
    assert_true(l.n == 1 && l.key[0] == 1 && l.val[0] == V(1));
    assert_int_equal(RM(lru, 1), BYVAL_LRU_NOENT);
    assert_int_equal(GET(lru, 1, 0, &v), 0);
    EXPECT(lru, 0, 0, 3, 2, 1, 0, 1);
    /* EXISTS: value not stored, the existing entry referenced */
    void *ex = NULL;
    assert_int_equal(INS(lru, 7, V(7), 0, NULL), BYVAL_LRU_OK);
    assert_true(INS(lru, 7, V(8), 1, &ex) == BYVAL_LRU_EXISTS && ex == V(7));
    EXPECT(lru, 1, 1, 3, 2, 2, 0, 1);
    assert_true(GET(lru, 7, 0, &v) == 1 && v == V(7));
    assert_int_equal(PUT(lru, 7), 0);
    byval_lru_set_capacity(lru, 9);
    assert_true(stats(lru).capacity == 9 && stats(lru).size == 1);
    byval_lru_destroy(lru);
    assert_true(l.n == 2 && l.val[1] == V(7) && l.bad == 0); /* V(8) never released */
}

/* Heap values freed by the callback: ASan proves no leak on FULL. */
static void free_evict(void *ctx, const void *key, void *value)
{
    (*(int *)ctx)++;
    free(value);
}

static void test_full_path(void **state)
{
    int released = 0;
    byval_lru_t *lru = byval_lru_create(4, KLEN, free_evict, &released);
    for (uint64_t i = 0; i < 4; i++)
        assert_int_equal(INS(lru, i, malloc(8), 1, NULL), BYVAL_LRU_OK);
    for (int take = 0; take < 2; take++) { /* not stored: still ours to free */
        void *val = malloc(8);
        assert_true(INS(lru, 100, val, take, NULL) == BYVAL_LRU_FULL && !GET(lru, 100, 0, NULL));
        free(val);
    }
    EXPECT(lru, 4, 4, -1, -1, 4, 0, 0);
    assert_true(stats(lru).high_water == 4 && released == 0);
    assert_int_equal(PUT(lru, 2), 0);
    assert_int_equal(INS(lru, 100, malloc(8), 0, NULL), BYVAL_LRU_OK);
    assert_true(released == 1 && GET(lru, 2, 0, NULL) == 0); /* the one put was evicted */
    EXPECT(lru, 4, 3, -1, -1, 5, 1, 0);
    byval_lru_destroy(lru); /* referenced entries too */
    assert_int_equal(released, 5);
}

static void test_eviction_order(void **state)
{
    evlog_t l = {0};
    byval_lru_t *lru = byval_lru_create(4, KLEN, log_evict, &l);
    for (uint64_t i = 1; i <= 4; i++) /* 1 2 3 4 */
        assert_int_equal(INS(lru, i, V(i), 0, NULL), BYVAL_LRU_OK);
    assert_int_equal(GET(lru, 1, 0, NULL), 1);                  /* 2 3 4 1 */
    assert_int_equal(INS(lru, 5, V(5), 0, NULL), BYVAL_LRU_OK); /* -2 */
    assert_int_equal(GET(lru, 3, 1, NULL), 1);                  /* 3 referenced */
    assert_int_equal(INS(lru, 6, V(6), 0, NULL), BYVAL_LRU_OK); /* -4 */
    assert_int_equal(INS(lru, 7, V(7), 0, NULL), BYVAL_LRU_OK); /* -1 */
    assert_int_equal(PUT(lru, 3), 0);                           /* 3 most recent */
    assert_int_equal(INS(lru, 8, V(8), 0, NULL), BYVAL_LRU_OK); /* -5 */
    EXPECT(lru, 4, 0, 2, 0, 8, 4, 0);
    const uint64_t want[] = {2, 4, 1, 5};
    assert_true(l.n == 4 && l.bad == 0);
    for (size_t i = 0; i < 4; i++) /* in LRU order, each with its own value */
        assert_true(l.key[i] == want[i] && l.val[i] == V(want[i]));
    byval_lru_destroy(lru);
}

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

static void model_run(size_t cap, uint64_t seed, long ops)
{
    model_t m = {.cap = cap, .put_key = -1};
    byval_lru_t *lru = byval_lru_create(cap, KLEN, model_evict, &m);
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

static void test_model_random(void **state)
{
    const char *s = getenv("LRU_TEST_SEED");
    uint64_t seed = s ? strtoull(s, NULL, 0) : 0x9E3779B97F4A7C15ULL;
    printf("model seed 0x%llx (LRU_TEST_SEED)\n", (unsigned long long)seed);
    const size_t caps[] = {1, 3, 16, 63};
    for (size_t i = 0; i < 4; i++)
        model_run(caps[i], seed + i, 40000);
}

/* ---- callbacks run without the lock ----------------------------------- */
typedef struct reent {
    byval_lru_t *lru;
    int calls, self_hits, other_hits, inserted;
} reent_t;

static void reent_evict(void *ctx, const void *key, void *value)
{
    reent_t *r = ctx;
    if (!r->lru) /* destroy */
        return;
    r->calls++;
    r->self_hits += byval_lru_get(r->lru, key, 0, NULL);
    r->other_hits += GET(r->lru, 1000, 0, NULL);
    (void)stats(r->lru);
    if (r->calls == 1) /* an insert from the callback (itself evicts once) */
        r->inserted += INS(r->lru, 2000, V(0), 1, NULL) == BYVAL_LRU_OK;
}

static int pred_small(void *ctx, const void *key, void *value)
{
    return key_of(key) < 1000;
}

static void test_callback_without_lock(void **state)
{
    reent_t r = {0};
    byval_lru_t *c = r.lru = byval_lru_create(64, KLEN, reent_evict, &r);
    alarm(20); /* a deadlock kills the binary: the test fails */
    INS(r.lru, 1000, V(0), 1, NULL);
    for (uint64_t i = 0; i < 70; i++) /* evictions from insert */
        assert_int_equal(INS(r.lru, i, V(i), 0, NULL), BYVAL_LRU_OK);
    assert_int_equal(r.calls, 8); /* 1000, 2000 and 0..69 into 64 */
    assert_int_equal(RM(r.lru, 69), BYVAL_LRU_OK); /* remove */
    assert_true(GET(r.lru, 68, 1, NULL) && RM(r.lru, 68) == BYVAL_LRU_OK);
    assert_true(PUT(r.lru, 68) == 0 && r.calls == 10); /* zombie release */
    assert_int_equal(stats(r.lru).size, 62); /* 1000, 2000 and 8..67 */
    assert_true(byval_lru_remove_if(r.lru, pred_small, NULL) == 60 && r.calls == 70);
    assert_int_equal(PUT(r.lru, 2000), 0);
    byval_lru_set_capacity(r.lru, 1); /* evicts 2000 */
    assert_int_equal(r.calls, 71);
    alarm(0);
    /* the released key was gone, the other key found, the insert done */
    assert_true(r.self_hits == 0 && r.other_hits == r.calls && r.inserted == 1);
    r.lru = NULL; /* destroy: the callback must not use the dying cache */
    byval_lru_destroy(c);
}

/* ---- ptrmap ----------------------------------------------------------------- */
static void test_ptrmap(void **state)
{
    byval_ptrmap_t *m = byval_ptrmap_create(KLEN);
    unsigned char out[KLEN];
    assert_int_equal(byval_ptrmap_ref(m, 0x1000, KB(1)), 1);
    assert_int_equal(byval_ptrmap_ref(m, 0x1000, KB(1)), 2);
    assert_int_equal(byval_ptrmap_ref(m, 0x1000, KB(2)), -1); /* key mismatch */
    assert_int_equal(byval_ptrmap_ref(m, 0x2000, KB(2)), 1);
    assert_int_equal(byval_ptrmap_size(m), 2);
    assert_int_equal(byval_ptrmap_unref(m, 0x1000, out), 1); /* the mismatch added none */
    assert_memory_equal(out, KB(1), KLEN); /* the key it was mapped from */
    assert_int_equal(byval_ptrmap_unref(m, 0x3000, out), -1); /* unknown */
    assert_int_equal(byval_ptrmap_unref(m, 0x1000, NULL), 0);
    assert_int_equal(byval_ptrmap_unref(m, 0x1000, NULL), -1); /* gone at 0 */
    assert_int_equal(byval_ptrmap_size(m), 1);
    assert_true(byval_ptrmap_ref(NULL, 1, KB(1)) == -1 && byval_ptrmap_ref(m, 1, NULL) == -1);
    assert_int_equal(byval_ptrmap_unref(NULL, 0x1000, NULL), -1);
    for (uintptr_t p = 16; p < 10016; p++) /* 0x2000 is mapped already */
        assert_int_equal(byval_ptrmap_ref(m, p << 12, KB(p)), 1);
    assert_int_equal(byval_ptrmap_size(m), 10001);
    assert_int_equal(byval_ptrmap_unref(m, 77 << 12, out), 0);
    assert_memory_equal(out, KB(77), KLEN);
    byval_ptrmap_clear(m); /* forgets everything (entries freed: ASan) */
    assert_int_equal(byval_ptrmap_size(m), 0);
    assert_int_equal(byval_ptrmap_unref(m, 0x2000, NULL), -1);
    assert_int_equal(byval_ptrmap_ref(m, 0x2000, KB(3)), 1); /* usable after */
    byval_ptrmap_destroy(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_get_insert_put_remove_exists),
        cmocka_unit_test(test_full_path),
        cmocka_unit_test(test_eviction_order),
        cmocka_unit_test(test_model_random),
        cmocka_unit_test(test_callback_without_lock),
        cmocka_unit_test(test_zombies),
        cmocka_unit_test(test_bound_1m_inserts_random_refs),
        cmocka_unit_test(test_sharded_bound_and_bytes),
        cmocka_unit_test(test_threads_16_shared_keys),
        cmocka_unit_test(test_fork_child_empty_no_callback),
        cmocka_unit_test(test_fork_while_hammered),
        cmocka_unit_test(test_ptrmap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
