/* SPDX-License-Identifier: MIT */
/*
 * test_lru_put.c - byval_lru_put_value: with a removed-but-referenced
 * entry (zombie) and a newer live entry under the same key, each holder's
 * put must reach the entry it holds. Plain put goes to the zombie first,
 * which released the old value while its holder still used it. Also the
 * pointer map the close path uses to find that entry, alone and under
 * threads that open and close their own and shared pointers at once.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "cache/lru.h"
#include "cache/ptrmap.h"

#define KLEN 16
#define KB(k) mkb((unsigned char[KLEN]){0}, (uint64_t)(k))

static unsigned char *mkb(unsigned char *b, uint64_t k)
{
    return memcpy(b, &k, sizeof(k)); /* the rest stays zero */
}

static int released[4];

static void on_release(void *ctx, const void *key, void *value)
{
    released[(intptr_t)value]++;
}

static void test_put_value_reaches_the_held_entry(void **state)
{
    memset(released, 0, sizeof(released));
    byval_lru_t *lru = byval_lru_create(8, sizeof(uint64_t), on_release, NULL);
    assert_non_null(lru);
    uint64_t k = 42;
    void *got = NULL;
    /* Holder 1 holds A; A is removed (zombie); holder 2 inserts B. */
    assert_int_equal(byval_lru_insert(lru, &k, (void *)1, 1, &got), BYVAL_LRU_OK);
    assert_int_equal(byval_lru_remove(lru, &k), BYVAL_LRU_OK);
    assert_int_equal(byval_lru_insert(lru, &k, (void *)2, 1, &got), BYVAL_LRU_OK);
    /* Holder 2 puts B: A must stay alive for holder 1. */
    assert_int_equal(byval_lru_put_value(lru, &k, (void *)2), 0);
    assert_int_equal(released[1], 0);
    assert_int_equal(released[2], 0);
    /* A value nobody holds is not found. */
    assert_int_equal(byval_lru_put_value(lru, &k, (void *)3), BYVAL_LRU_NOENT);
    /* Holder 1 puts A: released now, B still cached. */
    assert_int_equal(byval_lru_put_value(lru, &k, (void *)1), 0);
    assert_int_equal(released[1], 1);
    assert_int_equal(byval_lru_get(lru, &k, 0, &got), 1);
    assert_ptr_equal(got, (void *)2);
    byval_lru_destroy(lru);
    assert_int_equal(released[2], 1);
}

static void test_ptrmap_carries_the_value(void **state)
{
    byval_ptrmap_t *m = byval_ptrmap_create(sizeof(uint64_t));
    uint64_t k = 7, kout = 0;
    void *v = NULL;
    assert_int_equal(byval_ptrmap_ref_value(m, 0x1000, &k, (void *)5), 1);
    assert_int_equal(byval_ptrmap_ref_value(m, 0x1000, &k, (void *)6), -1); /* other value */
    assert_int_equal(byval_ptrmap_ref_value(m, 0x1000, &k, (void *)5), 2);
    assert_int_equal(byval_ptrmap_unref_value(m, 0x1000, &kout, &v), 1);
    assert_ptr_equal(v, (void *)5);
    assert_int_equal(kout, 7);
    assert_int_equal(byval_ptrmap_unref_value(m, 0x1000, NULL, &v), 0);
    assert_int_equal(byval_ptrmap_unref_value(m, 0x1000, NULL, &v), -1);
    byval_ptrmap_destroy(m);
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

/* Threads open and close (ref/unref) their own pointers and one shared
 * pointer, enough to grow the table under them: every count must come out
 * exact, which it does only if the map's lock excludes them (lost updates
 * or a grow under a reader show as wrong counts; TSan sees the race). */
#define PM_THREADS 4
#define PM_OWN 200
#define PM_ROUNDS 2000
static byval_ptrmap_t *pm;

static void *ptrmap_worker(void *arg)
{
    uintptr_t base = 0x100000 * (1 + (uintptr_t)arg);
    uint64_t k = 7;
    intptr_t bad = 0;
    for (int r = 0; r < PM_ROUNDS; r++) {
        uintptr_t own = base + 0x1000 * (uintptr_t)(r % PM_OWN);
        int want = r % 2 ? 1 : r / PM_OWN + 1; /* even rounds' pointers stay open */
        bad += byval_ptrmap_ref_value(pm, own, &k, (void *)own) != want;
        bad += byval_ptrmap_ref_value(pm, 0x42000, &k, (void *)1) < 1;
        bad += byval_ptrmap_unref_value(pm, 0x42000, NULL, NULL) < 0;
        if (r % 2) /* half the own pointers stay open until the end */
            bad += byval_ptrmap_unref_value(pm, own, NULL, NULL) != 0;
    }
    return (void *)bad;
}

static void test_ptrmap_threads(void **state)
{
    pthread_t t[PM_THREADS];
    pm = byval_ptrmap_create(sizeof(uint64_t));
    assert_non_null(pm);
    for (intptr_t i = 0; i < PM_THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, ptrmap_worker, (void *)i), 0);
    intptr_t bad = 0;
    for (int i = 0; i < PM_THREADS; i++) {
        void *r;
        pthread_join(t[i], &r);
        bad += (intptr_t)r;
    }
    assert_int_equal(bad, 0);
    /* Own pointers of even rounds: PM_OWN / 2 a thread, each opened
     * PM_ROUNDS / PM_OWN times and never closed; the shared one is closed. */
    assert_int_equal(byval_ptrmap_size(pm), PM_THREADS * PM_OWN / 2);
    assert_int_equal(byval_ptrmap_unref_value(pm, 0x42000, NULL, NULL), -1);
    for (intptr_t i = 0; i < PM_THREADS; i++) {
        uintptr_t own = 0x100000 * (1 + (uintptr_t)i);
        assert_int_equal(byval_ptrmap_unref_value(pm, own, NULL, NULL),
                         PM_ROUNDS / PM_OWN - 1);
    }
    byval_ptrmap_destroy(pm);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_put_value_reaches_the_held_entry),
        cmocka_unit_test(test_ptrmap_carries_the_value),
        cmocka_unit_test(test_ptrmap),
        cmocka_unit_test(test_ptrmap_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
