/* SPDX-License-Identifier: MIT */
/*
 * test_exports.c - the export lifecycle core (cache/exports.c) with a
 * recording sink: what an export takes (registry entry, broker offer,
 * rescue registration) is given back when it ends, whatever ends it (an
 * end by key, a context, a predicate, eviction), shared objects when their
 * last holder ends, and always before the API's end callback runs.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "cache/exports.h"

/* What the sink and the end callback were told, in order. */
static char journal[4096];
static int live_pub, live_offer, live_reg;
static uint64_t next_serial = 1;

static void note(const char *fmt, ...)
{
    va_list ap;
    size_t n = strlen(journal);
    va_start(ap, fmt);
    vsnprintf(journal + n, sizeof(journal) - n, fmt, ap);
    va_end(ap);
}

/* The registry's rules: a live (key, ino, fd) added again is a no-op;
 * a remove takes every slot of (key, ino). */
static struct {
    uint64_t key;
    uint32_t ino, fd;
} slots[64];

static uint64_t publish(uint64_t key, uint32_t ino, uint32_t fd, uint64_t size)
{
    (void)size;
    note("P%llu/%u/%u ", (unsigned long long)key, ino, fd);
    for (int i = 0; i < live_pub; i++)
        if (slots[i].key == key && slots[i].ino == ino && slots[i].fd == fd)
            return 1;
    slots[live_pub].key = key;
    slots[live_pub].ino = ino;
    slots[live_pub++].fd = fd;
    return next_serial++;
}

static void unpublish(uint64_t key, uint32_t ino)
{
    note("U%llu/%u ", (unsigned long long)key, ino);
    for (int i = 0; i < live_pub;)
        if (slots[i].key == key && slots[i].ino == ino)
            slots[i] = slots[--live_pub];
        else
            i++;
}

static int offer(int fd, int open)
{
    (void)open;
    note("O%d ", fd);
    live_offer++;
    return 0;
}

static void withdraw(int fd)
{
    note("W%d ", fd);
    live_offer--;
}

static int enlist(int fd)
{
    note("R%d ", fd);
    live_reg++;
    return 0;
}

static void delist(int fd)
{
    note("D%d ", fd);
    live_reg--;
}

static const byval_exports_sink_t sink = {publish, unpublish, offer, withdraw, enlist, delist};

typedef struct test_export {
    byval_export_t core; /* first */
    byval_export_item_t item[2];
    int id;
} test_export_t;

static int ended;

static void end(byval_export_t *e)
{
    note("E%d ", ((test_export_t *)e)->id);
    ended++;
    free(e);
}

static const byval_backend_export_t ops = {.name = "test export", .key_len = sizeof(uint64_t),
                                           .end = end};

static test_export_t *mk(int id, uintptr_t ctx, uint64_t key, int fd, uint32_t ino)
{
    test_export_t *t = calloc(1, sizeof(*t));
    assert_non_null(t);
    t->id = id;
    t->core.ctx = ctx;
    t->core.nitems = 1;
    t->core.items = t->item;
    t->item[0] = (byval_export_item_t){.key = key, .fd = fd, .ino = ino, .size = 4096,
                                       .flags = BYVAL_EXPORT_OFFER | BYVAL_EXPORT_RESCUE};
    return t;
}

static void keep(byval_exports_t *x, uint64_t key, test_export_t *t)
{
    assert_int_equal(byval_exports_add(x, &key, &t->core, NULL), 0);
}

static void reset(void)
{
    journal[0] = 0;
}

static void assert_nothing_held(void)
{
    size_t p, o, r;
    byval_exports_counts(&p, &o, &r);
    assert_int_equal(p + o + r, 0);
    assert_int_equal(live_pub, 0);
    assert_int_equal(live_offer, 0);
    assert_int_equal(live_reg, 0);
}

static void test_start_and_end_by_key(void **state)
{
    byval_exports_t *x = *state;
    reset();
    test_export_t *t = mk(1, 10, 77, 5, 500);
    keep(x, 1, t);
    assert_string_equal(journal, "P77/500/5 O5 R5 ");
    assert_int_not_equal(t->item[0].serial, 0);
    size_t p, o, r;
    byval_exports_counts(&p, &o, &r);
    assert_true(p == 1 && o == 1 && r == 1);
    reset();
    uint64_t key = 1;
    assert_int_equal(byval_exports_end(x, &key), 1);
    /* Everything naming fd 5 goes before the driver is told (E). */
    assert_string_equal(journal, "U77/500 W5 D5 E1 ");
    assert_nothing_held();
    assert_int_equal(byval_exports_end(x, &key), 0);
}

static void test_shared_items_last_holder(void **state)
{
    byval_exports_t *x = *state;
    /* Two contexts' exports of one allocation: one fd, one entry. */
    keep(x, 2, mk(2, 10, 88, 6, 600));
    keep(x, 3, mk(3, 11, 88, 6, 600));
    reset();
    assert_int_equal(byval_exports_end_ctx(x, 10), 1);
    assert_string_equal(journal, "E2 "); /* still held by 3 */
    reset();
    assert_int_equal(byval_exports_end_ctx(x, 11), 1);
    assert_string_equal(journal, "U88/600 W6 D6 E3 ");
    assert_nothing_held();
}

static void test_referenced_withdrawn_now(void **state)
{
    byval_exports_t *x = *state;
    keep(x, 4, mk(4, 12, 99, 7, 700));
    uint64_t key = 4;
    byval_lru_ref_t ref;
    byval_export_t *e = byval_exports_get(x, &key, &ref);
    assert_non_null(e);
    reset();
    assert_int_equal(byval_exports_end(x, &key), 1);
    /* A hit holds it: withdrawn at once, the driver told at the unget. */
    assert_string_equal(journal, "U99/700 W7 D7 ");
    assert_null(byval_exports_get(x, &key, &(byval_lru_ref_t){0}));
    byval_exports_unget(x, ref);
    assert_string_equal(journal, "U99/700 W7 D7 E4 ");
    assert_nothing_held();
}

static uint32_t id_is_not(void *arg, byval_export_t *e)
{
    return ((const test_export_t *)e)->id == *(int *)arg ? 0 : UINT32_MAX;
}

static int handed_id;

static void hand(const byval_export_t *e, void *call)
{
    handed_id = ((const test_export_t *)e)->id;
}

static const byval_backend_export_t hand_ops = {.name = "test export", .key_len = sizeof(uint64_t),
                                                .hand = hand, .end = end};

static void test_end_if_and_lost_race(void **state)
{
    byval_exports_t *x = *state;
    keep(x, 5, mk(5, 13, 111, 8, 800));
    /* A racing first get of the same key: the loser is discarded, and
     * what it shares with the winner stays. */
    test_export_t *loser = mk(6, 13, 111, 8, 800);
    uint64_t key = 5;
    byval_exports_t *y = byval_exports_create(&hand_ops, 4);
    keep(y, 5, mk(7, 13, 111, 8, 800));
    reset();
    assert_int_equal(byval_exports_add(y, &key, &loser->core, NULL), 2);
    assert_int_equal(handed_id, 7);
    assert_string_equal(journal, "P111/800/8 E6 ");
    assert_int_equal(byval_exports_end(y, &key), 1);
    int id = 5;
    reset();
    assert_int_equal(byval_exports_cut_if(x, id_is_not, &id), 1);
    assert_string_equal(journal, "U111/800 W8 D8 E5 ");
    assert_nothing_held();
}

static void test_eviction_withdraws(void **state)
{
    (void)state;
    byval_exports_t *small = byval_exports_create(&ops, 2);
    assert_non_null(small);
    for (int i = 0; i < 5; i++)
        keep(small, (uint64_t)i, mk(20 + i, 14, 200 + (uint64_t)i, 30 + i, 900 + (uint32_t)i));
    assert_int_equal(byval_exports_live(small), 2);
    reset();
    assert_int_equal(byval_exports_end_ctx(small, 14), 2);
    assert_nothing_held();
}

static void test_fork_child_holds_nothing(void **state)
{
    byval_exports_t *x = *state;
    keep(x, 9, mk(9, 15, 123, 9, 901));
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        size_t p, o, r;
        byval_exports_counts(&p, &o, &r);
        _exit(p + o + r == 0 && byval_exports_live(x) == 0 ? 0 : 1);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    uint64_t key = 9;
    assert_int_equal(byval_exports_end(x, &key), 1);
    assert_nothing_held();
}

/* A made export that was not kept (the table full: every entry
 * referenced) is made again, as often as the backend's tries say. */
static byval_exports_t *tiny;
static byval_lru_ref_t held;
static int made;

static byval_export_t *make(void *call)
{
    if (made++ == 2) { /* the third make: room again */
        byval_exports_unget(tiny, held);
        held = 0;
    }
    return &mk(30 + made, 16, 300 + (uint64_t)made, 40 + made, 950)->core;
}

static void test_not_kept_made_again(void **state)
{
    (void)state;
    static const byval_backend_export_t retry_ops = {
        .name = "test export", .key_len = sizeof(uint64_t), .tries = 3, .make = make, .end = end};
    uint64_t k1 = 1, k2 = 2;
    tiny = byval_exports_create(&retry_ops, 1);
    assert_non_null(tiny);
    assert_int_equal(byval_exports_obtain(tiny, &k1, NULL), 0);
    assert_int_equal(byval_exports_obtain(tiny, &k1, NULL), 1);
    assert_non_null(byval_exports_get(tiny, &k1, &held));
    assert_int_equal(byval_exports_obtain(tiny, &k2, NULL), 0);
    assert_int_equal(made, 3);
    assert_int_equal(byval_exports_end_ctx(tiny, 16), 1);
    assert_nothing_held();
}

static int setup(void **state)
{
    byval_exports_set_sink(&sink);
    *state = byval_exports_create(&ops, 64);
    return *state ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_start_and_end_by_key),
        cmocka_unit_test(test_shared_items_last_holder),
        cmocka_unit_test(test_referenced_withdrawn_now),
        cmocka_unit_test(test_end_if_and_lost_race),
        cmocka_unit_test(test_eviction_withdraws),
        cmocka_unit_test(test_fork_child_holds_nothing),
        cmocka_unit_test(test_not_kept_made_again),
    };
    return cmocka_run_group_tests_name("exports", tests, setup, NULL);
}
