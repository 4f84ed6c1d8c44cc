/* SPDX-License-Identifier: MIT */
/*
 * test_imports.c - the import lifecycle core (cache/imports.h): what keeps
 * a mapping and what releases it, without a GPU API. Each test is a
 * defect the core exists to prevent: a double close reaching the cached
 * mapping, a stale record beating a fresh one, a freed allocation served
 * from the cache, closed bytes without a bound, a destroyed context's
 * mappings found again, a full cache failing an open.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cache/imports.h"

typedef struct fake {
    byval_import_t core;
    int rec;      /* what ops.same compares */
    uintptr_t va; /* the "mapping" */
} fake_t;

static int released, released_dead, tracked;
static uint64_t live_word;
static const uint64_t *track_word; /* where track() points mappings */

static void fake_release(byval_import_t *m)
{
    released++;
    released_dead += m->dead != 0;
}

static int fake_same(const byval_import_t *a, const byval_import_t *b)
{
    return ((const fake_t *)a)->rec == ((const fake_t *)b)->rec;
}

static void fake_track(byval_import_t *m)
{
    tracked++;
    if (track_word)
        byval_import_track(m, track_word, *track_word, NULL);
}

static byval_backend_import_t ops = {
    .name = "test",
    .key_len = sizeof(uint64_t),
    .release = fake_release,
    .same = fake_same,
    .track = fake_track,
};

static uintptr_t next_va = 0x10000;

static fake_t *mk(int rec, uint64_t bytes, uintptr_t ctx)
{
    fake_t *f = calloc(1, sizeof(*f));
    f->rec = rec;
    f->va = next_va += 0x1000;
    f->core.bytes = bytes;
    f->core.ctx = ctx;
    return f;
}

/* Open key with record rec as the shim does: hit (same record) or miss
 * (insert), then the application's open of the mapping's address. */
static uintptr_t open_key(byval_imports_t *c, uint64_t key, int rec, uint64_t bytes,
                          uintptr_t ctx)
{
    byval_lru_ref_t ref = 0;
    fake_t *m = (fake_t *)byval_imports_get(c, &key, &ref);
    if (m && m->rec != rec) {
        byval_imports_unget(c, ref);
        m = NULL;
    }
    if (!m) {
        byval_import_t *out;
        fake_t *f = mk(rec, bytes, ctx);
        assert_int_equal(byval_imports_insert(c, &key, &f->core, &out, &ref), 0);
        m = (fake_t *)out;
    }
    assert_int_equal(byval_imports_open(c, &m->core, ref, m->va), 0);
    return m->va;
}

static int setup(void **state)
{
    released = released_dead = tracked = 0;
    track_word = NULL;
    byval_imports_set_budget(UINT64_MAX);
    *state = byval_imports_create(&ops, 8);
    assert_non_null(*state);
    return 0;
}

static int teardown(void **state)
{
    byval_imports_destroy(*state);
    return 0;
}

static void test_double_close_is_refused_and_keeps_the_mapping(void **state)
{
    byval_imports_t *c = *state;
    uintptr_t p = open_key(c, 1, 7, 100, 1);
    assert_int_equal(open_key(c, 1, 7, 100, 1), p); /* a hit: same mapping */
    assert_int_equal(byval_imports_close(p), BYVAL_IMPORTS_CLOSED);
    assert_int_equal(byval_imports_close(p), BYVAL_IMPORTS_CLOSED);
    assert_int_equal(byval_imports_close(p), BYVAL_IMPORTS_NOT_OPEN); /* double close */
    assert_int_equal(released, 0); /* the cached mapping is untouched */
    assert_int_equal(byval_imports_close(0xdead000), BYVAL_IMPORTS_NOT_OURS);
    assert_int_equal(open_key(c, 1, 7, 100, 1), p); /* and still served */
    assert_int_equal(byval_imports_close(p), BYVAL_IMPORTS_CLOSED);
    assert_int_equal(tracked, 1); /* tracked once, at its first close */
}

static void test_newest_verified_record_wins(void **state)
{
    byval_imports_t *c = *state;
    uintptr_t old = open_key(c, 2, 1, 10, 1);
    /* Same key, another record (an allocation id reused): the new one is
     * handed out; the old, still open, lives on for its user only. */
    uintptr_t fresh = open_key(c, 2, 2, 10, 1);
    assert_int_not_equal(fresh, old);
    assert_int_equal(released, 0);
    assert_int_equal(byval_imports_close(old), BYVAL_IMPORTS_CLOSED);
    assert_int_equal(released, 1); /* its last close released it */
    assert_int_equal(open_key(c, 2, 2, 10, 1), fresh); /* the new one is cached */
    assert_int_equal(byval_imports_close(fresh), BYVAL_IMPORTS_CLOSED);
    assert_int_equal(byval_imports_close(fresh), BYVAL_IMPORTS_CLOSED);
    /* A closed old record does not come back either. */
    uintptr_t again = open_key(c, 2, 3, 10, 1);
    assert_int_not_equal(again, fresh);
    assert_int_equal(released, 2);
    byval_imports_close(again);
}

static void test_freed_allocation_is_never_served(void **state)
{
    byval_imports_t *c = *state;
    live_word = 5;
    track_word = &live_word;
    uintptr_t p = open_key(c, 3, 1, 10, 1);
    assert_int_equal(byval_imports_close(p), BYVAL_IMPORTS_CLOSED);
    assert_int_equal(released, 0); /* live: kept for a re-open */
    assert_int_equal(open_key(c, 3, 1, 10, 1), p);
    byval_imports_close(p);
    live_word = 0; /* the exporter freed it */
    uintptr_t q = open_key(c, 3, 1, 10, 1);
    assert_int_not_equal(q, p); /* a fresh import, not the freed one */
    assert_int_equal(released, 1);
    byval_imports_close(q);
}

static int of_word(void *ctx, const byval_import_t *m)
{
    return !byval_import_alive(m);
}

static void test_release_on_free_without_a_further_open(void **state)
{
    byval_imports_t *c = *state;
    live_word = 9;
    track_word = &live_word;
    uintptr_t p = open_key(c, 4, 1, 10, 1);
    byval_imports_close(p);
    live_word = 0;
    /* What the watcher does when the exporter says it freed something. */
    assert_int_equal(byval_imports_remove_if(of_word, NULL), 1);
    assert_int_equal(released, 1);
    assert_int_equal(byval_imports_close(p), BYVAL_IMPORTS_NOT_OURS); /* forgotten */
}

static void test_byte_budget_bounds_closed_mappings(void **state)
{
    byval_imports_t *c = *state;
    uint64_t held, peak;
    byval_imports_set_budget(250);
    uintptr_t p[4];
    for (int i = 0; i < 4; i++)
        p[i] = open_key(c, 10 + (uint64_t)i, 1, 100, 1);
    byval_imports_bytes(&held, &peak);
    assert_int_equal(held, 0); /* open mappings are the application's */
    for (int i = 0; i < 4; i++)
        byval_imports_close(p[i]);
    byval_imports_bytes(&held, &peak);
    assert_true(held <= 250);
    assert_int_equal(released, 2);
    assert_true(peak >= held);
    byval_imports_set_budget(0);
    uintptr_t q = open_key(c, 20, 1, 100, 1);
    byval_imports_close(q); /* budget 0: nothing closed is kept */
    byval_imports_bytes(&held, &peak);
    assert_int_equal(held, 0);
    assert_int_equal(released, 5);
}

static void test_context_purge_releases_open_and_closed(void **state)
{
    byval_imports_t *c = *state;
    uintptr_t open_one = open_key(c, 30, 1, 10, 0xc0);
    uintptr_t closed_one = open_key(c, 31, 1, 10, 0xc0);
    uintptr_t other = open_key(c, 32, 1, 10, 0xc1);
    byval_imports_close(closed_one);
    assert_int_equal(byval_imports_purge(0xc0, 0), 2);
    assert_int_equal(released, 2);
    assert_int_equal(released_dead, 0); /* released through the driver */
    /* The application's close of a mapping of the dead context is the
     * driver's business now. */
    assert_int_equal(byval_imports_close(open_one), BYVAL_IMPORTS_NOT_OURS);
    /* A context created with the same handle value imports afresh. */
    uintptr_t again = open_key(c, 30, 1, 10, 0xc0);
    assert_int_not_equal(again, open_one);
    byval_imports_close(again);
    byval_imports_close(other);
    assert_int_equal(byval_imports_purge(0xc1, 1), 1);
    assert_int_equal(released_dead, 1); /* gone already: no driver call */
}

static void test_full_cache_hands_out_uncached(void **state)
{
    byval_imports_t *c = byval_imports_create(&ops, 2);
    uintptr_t a = open_key(c, 40, 1, 10, 1), b = open_key(c, 41, 1, 10, 1);
    uintptr_t u = open_key(c, 42, 1, 10, 1); /* every entry open: uncached */
    assert_int_equal(byval_imports_close(u), BYVAL_IMPORTS_CLOSED);
    assert_int_equal(released, 1); /* released at its last close */
    assert_int_equal(byval_imports_close(u), BYVAL_IMPORTS_NOT_OURS);
    byval_imports_close(a);
    byval_imports_close(b);
    byval_imports_destroy(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_double_close_is_refused_and_keeps_the_mapping, setup, teardown),
        cmocka_unit_test_setup_teardown(test_newest_verified_record_wins, setup, teardown),
        cmocka_unit_test_setup_teardown(test_freed_allocation_is_never_served, setup, teardown),
        cmocka_unit_test_setup_teardown(test_release_on_free_without_a_further_open, setup, teardown),
        cmocka_unit_test_setup_teardown(test_byte_budget_bounds_closed_mappings, setup, teardown),
        cmocka_unit_test_setup_teardown(test_context_purge_releases_open_and_closed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_full_cache_hands_out_uncached, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
