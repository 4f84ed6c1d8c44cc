/* SPDX-License-Identifier: MIT */
/*
 * test_lru.c - cache/lru.h semantics: basic operations, invalid arguments,
 * EXISTS, FULL, eviction order (the clock), zombies, callbacks
 * without the lock, stats. Same binary: the randomised model check
 * (test_lru_model.c); scale, threads, fork and the shared helpers
 * (test_lru_threads.c); reference handles (test_lru_ref.c); the key hash
 * (test_lru_hash.c).
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

#include "test/unit/test_lru.h"
void test_model_random(void **state);
void test_bound_1m_inserts_random_refs(void **state);
void test_bound_and_bytes(void **state);
void test_threads_16_shared_keys(void **state);
void test_fork_child_empty_no_callback(void **state);
void test_fork_while_hammered(void **state);
void test_ref_basics(void **state);
void test_ref_zombie(void **state);
void test_ref_threads_churn(void **state);
void test_lru_hash_spread(void **state);

/* Every release: key and value; bad when bytes 8.. of the key are not the
 * zeros the entry was created with (the callback gets the entry's key). */
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

static int pred_all(void *ctx, const void *key, void *value)
{
    return 1;
}

static void test_invalid_args(void **state)
{
    byval_lru_stats_t st;
    memset(&st, 0xff, sizeof(st));
    assert_null(byval_lru_create(1, 1025, NULL, NULL)); /* key too long */
    byval_lru_t *lru = byval_lru_create(2, KLEN, NULL, NULL);
    assert_non_null(lru);
    void *v = (void *)1;
    assert_int_equal(byval_lru_get(NULL, KB(1), 1, &v), 0);
    assert_int_equal(byval_lru_get(lru, NULL, 1, &v), 0);
    assert_true(v == (void *)1 && stats(lru).misses == 0); /* untouched */
    assert_int_equal(byval_lru_insert(NULL, KB(1), v, 1, &v), BYVAL_LRU_NOENT);
    assert_int_equal(byval_lru_insert(lru, NULL, v, 1, &v), BYVAL_LRU_NOENT);
    assert_int_equal(byval_lru_put(NULL, KB(1)), BYVAL_LRU_NOENT);
    assert_int_equal(byval_lru_put(lru, NULL), BYVAL_LRU_NOENT);
    assert_int_equal(byval_lru_put_value(NULL, KB(1), v), BYVAL_LRU_NOENT);
    assert_int_equal(byval_lru_put_value(lru, NULL, v), BYVAL_LRU_NOENT);
    assert_int_equal(byval_lru_remove(NULL, KB(1)), BYVAL_LRU_NOENT);
    assert_int_equal(byval_lru_remove(lru, NULL), BYVAL_LRU_NOENT);
    assert_int_equal(byval_lru_remove_if(NULL, pred_all, NULL), 0);
    assert_int_equal(byval_lru_remove_if(lru, NULL, NULL), 0);
    byval_lru_stats(NULL, &st);
    assert_true(st.capacity == 0 && st.size == 0 && st.bytes_per_entry == 0);
    byval_lru_stats(lru, NULL);
    byval_lru_set_capacity(NULL, 5);
    byval_lru_set_capacity(lru, 0); /* ignored */
    assert_true(stats(lru).capacity == 2 && stats(lru).inserts == 0);
    byval_lru_destroy(NULL);
    byval_lru_destroy(lru);
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

/* The clock, step by step (slots in brackets, the hand as ^). A hit sets
 * an entry's bit; the hand clears a set bit and evicts the first
 * unreferenced entry without one; an evicted slot is reused only after
 * its callback, so a new entry takes a free or a new slot. */
static void test_eviction_order(void **state)
{
    evlog_t l = {0};
    byval_lru_t *lru = byval_lru_create(4, KLEN, log_evict, &l);
    for (uint64_t i = 1; i <= 4; i++) /* ^[1 2 3 4] */
        assert_int_equal(INS(lru, i, V(i), 0, NULL), BYVAL_LRU_OK);
    assert_int_equal(GET(lru, 1, 0, NULL), 1);                  /* 1 hit */
    assert_int_equal(INS(lru, 5, V(5), 0, NULL), BYVAL_LRU_OK); /* 1 spared, -2: [1 . ^3 4 5] */
    assert_int_equal(GET(lru, 3, 1, NULL), 1);                  /* 3 referenced */
    assert_int_equal(INS(lru, 6, V(6), 0, NULL), BYVAL_LRU_OK); /* -4: [1 6 3 . ^5] */
    assert_int_equal(INS(lru, 7, V(7), 0, NULL), BYVAL_LRU_OK); /* -5: [^1 6 3 7 .] */
    assert_int_equal(PUT(lru, 3), 0);                           /* 3 unreferenced, bit set */
    assert_int_equal(INS(lru, 8, V(8), 0, NULL), BYVAL_LRU_OK); /* -1 (spared once already) */
    EXPECT(lru, 4, 0, 2, 0, 8, 4, 0);
    const uint64_t want[] = {2, 4, 5, 1};
    assert_true(l.n == 4 && l.bad == 0);
    for (size_t i = 0; i < 4; i++) /* in the clock's order, each with its own value */
        assert_true(l.key[i] == want[i] && l.val[i] == V(want[i]));
    /* 3 was hit since the hand passed: it survives the next two inserts. */
    assert_int_equal(INS(lru, 9, V(9), 0, NULL), BYVAL_LRU_OK);
    assert_int_equal(INS(lru, 10, V(10), 0, NULL), BYVAL_LRU_OK);
    assert_true(l.n == 6 && GET(lru, 3, 0, NULL) == 1);
    assert_true(l.key[4] != 3 && l.key[5] != 3);
    byval_lru_destroy(lru);
}

/* A large cache mostly referenced: the hand skips referenced entries and
 * gives a hit entry a second chance; FULL only when every entry is
 * referenced; a shrink evicts only unreferenced entries. */
static void test_clock_mostly_referenced(void **state)
{
    evlog_t l = {0};
    byval_lru_t *lru = byval_lru_create(256, KLEN, log_evict, &l);
    uint64_t a[200], b[56], c[8];
    for (int i = 0; i < 200; i++)
        a[i] = 1 + (uint64_t)i;
    for (int i = 0; i < 56; i++)
        b[i] = 1000 + (uint64_t)i;
    for (int i = 0; i < 8; i++)
        c[i] = 2000 + (uint64_t)i;
    for (int i = 0; i < 200; i++) /* all referenced */
        assert_int_equal(INS(lru, a[i], V(a[i]), 1, NULL), BYVAL_LRU_OK);
    for (int i = 0; i < 56; i++)
        assert_int_equal(INS(lru, b[i], V(b[i]), 0, NULL), BYVAL_LRU_OK);
    assert_int_equal(GET(lru, b[0], 0, NULL), 1); /* b[0] hit: b[1] goes first */
    assert_int_equal(INS(lru, c[0], V(c[0]), 1, NULL), BYVAL_LRU_OK);
    assert_true(l.n == 1 && l.key[0] == b[1] && l.val[0] == V(b[1]));
    for (int i = 2; i < 56; i++) /* everything referenced now */
        assert_int_equal(GET(lru, b[i], 1, NULL), 1);
    assert_int_equal(GET(lru, b[0], 1, NULL), 1);
    assert_int_equal(INS(lru, c[1], V(c[1]), 0, NULL), BYVAL_LRU_FULL);
    assert_int_equal(INS(lru, b[1], V(b[1]), 0, NULL), BYVAL_LRU_FULL);
    EXPECT(lru, 256, 256, 56, 0, 257, 1, 0);
    assert_int_equal(PUT(lru, b[9]), 0); /* the one evictable entry */
    assert_int_equal(INS(lru, c[1], V(c[1]), 0, NULL), BYVAL_LRU_OK);
    assert_true(l.n == 2 && l.key[1] == b[9]);
    for (int i = 199; i >= 0; i--) /* unreferenced now */
        assert_int_equal(PUT(lru, a[i]), 0);
    byval_lru_set_capacity(lru, 57); /* 55 referenced b[] and c[0] stay */
    assert_true(l.n == 2 + 199 && l.bad == 0);
    for (size_t i = 2; i < l.n; i++) /* only a[] and c[1] were unreferenced */
        assert_true((l.key[i] >= a[0] && l.key[i] <= a[199]) || l.key[i] == c[1]);
    EXPECT(lru, 57, 55, -1, -1, -1, 201, 0);
    assert_int_equal(stats(lru).high_water, 256);
    byval_lru_destroy(lru);
}

/* ---- zombies: removed while referenced ----------------------------------- */
typedef struct zlog {
    int n;
    uint64_t key; /* of the last release */
    void *val;
} zlog_t;

static void zlog_evict(void *ctx, const void *key, void *value)
{
    zlog_t *z = ctx;
    z->n++, z->key = key_of(key), z->val = value;
}

static int pred_even(void *ctx, const void *key, void *value)
{
    return key_of(key) % 2 == 0;
}

static void test_zombies(void **state)
{
    zlog_t z = {0};
    byval_lru_t *lru = byval_lru_create(8, KLEN, zlog_evict, &z);
    void *v = NULL;
    assert_int_equal(INS(lru, 1, 0x11, 1, NULL), BYVAL_LRU_OK);
    assert_int_equal(RM(lru, 1), BYVAL_LRU_OK);
    assert_true(z.n == 0 && GET(lru, 1, 0, &v) == 0); /* not released, not found */
    EXPECT(lru, 0, 0, -1, -1, 1, 0, 1);
    assert_int_equal(INS(lru, 1, 0x12, 0, NULL), BYVAL_LRU_OK); /* same key again */
    assert_int_equal(PUT(lru, 1), 0); /* last reference of the zombie */
    assert_true(z.n == 1 && z.key == 1 && z.val == (void *)0x11);
    assert_int_equal(PUT(lru, 1), BYVAL_LRU_NOENT);
    assert_true(GET(lru, 1, 0, &v) == 1 && v == (void *)0x12); /* untouched */
    /* remove_if: 2 4 referenced (zombies), 6 8 not; 3 (referenced) 5 7 stay */
    for (uint64_t i = 2; i <= 8; i++)
        assert_int_equal(INS(lru, i, i, i <= 4, NULL), BYVAL_LRU_OK);
    assert_int_equal(byval_lru_remove_if(lru, pred_even, NULL), 4);
    assert_true(z.n == 3 && (z.key == 6 || z.key == 8) && z.val == (void *)z.key);
    EXPECT(lru, 4, 1, -1, -1, -1, 0, 5);
    assert_true(GET(lru, 4, 0, NULL) == 0 && PUT(lru, 4) == 0);
    assert_true(z.n == 4 && z.key == 4 && z.val == (void *)4);
    byval_lru_destroy(lru); /* zombie 2, and 1 3 5 7 */
    assert_int_equal(z.n, 9);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_get_insert_put_remove_exists),
        cmocka_unit_test(test_invalid_args),
        cmocka_unit_test(test_full_path),
        cmocka_unit_test(test_eviction_order),
        cmocka_unit_test(test_clock_mostly_referenced),
        cmocka_unit_test(test_model_random),
        cmocka_unit_test(test_callback_without_lock),
        cmocka_unit_test(test_zombies),
        cmocka_unit_test(test_ref_basics),
        cmocka_unit_test(test_ref_zombie),
        cmocka_unit_test(test_ref_threads_churn),
        cmocka_unit_test(test_lru_hash_spread),
        cmocka_unit_test(test_bound_1m_inserts_random_refs),
        cmocka_unit_test(test_bound_and_bytes),
        cmocka_unit_test(test_threads_16_shared_keys),
        cmocka_unit_test(test_fork_child_empty_no_callback),
        cmocka_unit_test(test_fork_while_hammered),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
