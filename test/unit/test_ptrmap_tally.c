/* SPDX-License-Identifier: MIT */
/*
 * test_ptrmap_tally.c - the pointer map's count of pointers per value
 * (cache/ptrmap.c) and what it buys at scale:
 *  - a release at scale: 100,000 cached mappings, each with its kept
 *    pointer, released one by one (byval_imports_destroy). Each release
 *    scanned the whole map before: 10^10 slot visits, half a minute here;
 *    with the tally each finds its pointer at once;
 *  - the fast path agrees with a scan: random refs, unrefs, drops and
 *    replacements of kept pointers over a few values, then
 *    close_value_at / drop_value_at (with the right hint, a wrong one, or
 *    none) return what a model of the map says.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "cache/imports.h"
#include "cache/ptrmap.h"

#define N_SCALE 100000

static void release_noop(byval_import_t *m)
{
    (void)m;
}

static int same_ptr(const byval_import_t *a, const byval_import_t *b)
{
    return a == b;
}

static const byval_backend_import_t ops = {
    .name = "tally test", .key_len = 16, .release = release_noop, .same = same_ptr};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void test_release_at_scale(void **state)
{
    byval_imports_set_budget(UINT64_MAX);
    byval_imports_t *c = byval_imports_create(&ops, N_SCALE);
    assert_non_null(c);
    for (uint64_t i = 0; i < N_SCALE; i++) {
        uint64_t key[2] = {i + 1, 77};
        uintptr_t ptr = (uintptr_t)(0x7e0000000000ull + (i << 21));
        byval_import_t *m = calloc(1, sizeof(*m)), *out;
        byval_lru_ref_t ref;
        assert_non_null(m);
        m->bytes = 2u << 20;
        m->addr = ptr;
        assert_int_equal(byval_imports_insert(c, key, m, &out, &ref), 0);
        assert_int_equal(byval_imports_open(c, out, ref, ptr), 0);
        assert_int_equal(byval_imports_close(ptr), BYVAL_IMPORTS_CLOSED);
    }
    double t0 = now_s();
    byval_imports_destroy(c); /* N releases */
    double took = now_s() - t0;
    printf("released %d cached mappings in %.3f s\n", N_SCALE, took);
    assert_true(took < 3.0); /* ~0.05 s with the tally; ~30 s scanning */
}

/* The model: per pointer slot, its value index (-1: absent) and count. */
#define NPTR 48
#define NVAL 4
static int mval[NPTR], mcount[NPTR];

static uintptr_t ptr_at(int p)
{
    return (uintptr_t)(0x10000 + 0x1000 * p);
}

static void *val_at(int v)
{
    static char vals[NVAL];
    return &vals[v];
}

static void test_fast_path_agrees_with_a_scan(void **state)
{
    byval_ptrmap_t *m = byval_ptrmap_create_keep(8);
    uint64_t s = 12345;
    assert_non_null(m);
    for (int p = 0; p < NPTR; p++)
        mval[p] = -1;
    for (int step = 0; step < 200000; step++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        int p = (int)(s >> 33) % NPTR, v = (int)(s >> 45) % NVAL, op = (int)(s >> 55) % 6;
        uint64_t key = (uint64_t)v;
        if (op <= 1) { /* open p from v */
            int n = byval_ptrmap_ref_value(m, ptr_at(p), &key, val_at(v));
            if (mval[p] < 0 || (mval[p] != v && mcount[p] == 0)) {
                mval[p] = v;
                mcount[p] = 1;
                assert_int_equal(n, 1);
            } else if (mval[p] == v) {
                assert_int_equal(n, ++mcount[p]);
            } else {
                assert_int_equal(n, -1); /* open from another value */
            }
        } else if (op == 2) { /* close p */
            void *got = NULL;
            int n = byval_ptrmap_unref_value(m, ptr_at(p), NULL, &got);
            if (mval[p] < 0)
                assert_int_equal(n, -1);
            else if (mcount[p] == 0)
                assert_int_equal(n, BYVAL_PTRMAP_CLOSED);
            else
                assert_int_equal(n, --mcount[p]);
        } else if (op == 3) { /* drop p */
            assert_int_equal(byval_ptrmap_drop(m, ptr_at(p)), mval[p] < 0 ? -1 : mcount[p]);
            mval[p] = -1;
        } else { /* close or drop everything of v, hinted at p, or at nothing */
            size_t want = 0;
            uintptr_t hint = (s >> 20) % 3 == 0 ? 0 : ptr_at(p);
            for (int q = 0; q < NPTR; q++)
                want += mval[q] == v && (op == 5 || mcount[q]);
            if (op == 4) {
                assert_int_equal(byval_ptrmap_close_value_at(m, val_at(v), hint), want);
                for (int q = 0; q < NPTR; q++)
                    if (mval[q] == v)
                        mcount[q] = 0;
            } else {
                assert_int_equal(byval_ptrmap_drop_value_at(m, val_at(v), hint), want);
                for (int q = 0; q < NPTR; q++)
                    if (mval[q] == v)
                        mval[q] = -1;
            }
        }
    }
    size_t live = 0;
    for (int p = 0; p < NPTR; p++)
        live += mval[p] >= 0;
    assert_int_equal(byval_ptrmap_size(m), live);
    byval_ptrmap_destroy(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_release_at_scale),
        cmocka_unit_test(test_fast_path_agrees_with_a_scan),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
