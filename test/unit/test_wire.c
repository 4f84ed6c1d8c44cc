/* SPDX-License-Identifier: MIT */
/*
 * test_wire.c - the 47-byte record (handles/wire.h): layout pinned against
 * the documented offsets, round trips at the extremes, page rounding,
 * rejection of every single-bit flip and of every truncation, random
 * buffers (with and without the magic), encoder range checks.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "handles/wire.h"

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1DULL;
}

static void fill_random(uint8_t *b, size_t n, uint64_t *seed)
{
    for (size_t i = 0; i < n; i++)
        b[i] = (uint8_t)(rnd(seed) >> 56);
}

static void le(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void assert_same_record(const byval_record_t *a, const byval_record_t *b)
{
    assert_int_equal(a->kind, b->kind);
    assert_int_equal(a->flags, b->flags);
    assert_int_equal(a->pid, b->pid);
    assert_int_equal(a->pidns, b->pidns);
    assert_int_equal(a->boot, b->boot);
    assert_int_equal(a->identity, b->identity);
    assert_int_equal(a->fd, b->fd);
    assert_int_equal(a->fd_ino, b->fd_ino);
    assert_int_equal(a->alloc_id, b->alloc_id);
    assert_int_equal(a->size, b->size);
    assert_int_equal(a->device, b->device);
    assert_int_equal(a->tag, b->tag);
}

static const byval_record_t rec_max = {
    .kind = BYVAL_KIND_CU_VMM_MANIFEST, .flags = BYVAL_FLAG_ID_PIDFS, .pid = UINT32_MAX,
    .pidns = UINT32_MAX, .boot = UINT32_MAX, .identity = BYVAL_WIRE_MAX_IDENTITY,
    .fd = BYVAL_WIRE_MAX_FD, .fd_ino = UINT32_MAX, .alloc_id = BYVAL_WIRE_MAX_ALLOC_ID,
    .size = BYVAL_WIRE_MAX_SIZE, .device = 255, .tag = BYVAL_WIRE_MAX_TAG};

/* The encoder against the layout table in wire.h, written out here. */
static void test_layout_known_answer(void **state)
{
    const byval_record_t r = {.kind = BYVAL_KIND_ZE_EVENT_POOL, .flags = 1, .pid = 0x01020304,
                              .pidns = 0xF0000001, .boot = 0xCAFEBABE,
                              .identity = 0x112233445566ULL, .fd = 0x070809, .fd_ino = 0xABCDEF01,
                              .alloc_id = 0xA1A2A3A4A5A6ULL, .size = 3 * 4096 + 1, .device = 9,
                              .tag = 0xB1B2B3B4B5ULL};
    uint8_t want[BYVAL_WIRE_LEN] = {0x62, 0x79, 2, 0x12}, got[BYVAL_WIRE_LEN];
    le(want + 4, r.pid, 4);
    le(want + 8, r.pidns, 4);
    le(want + 12, r.boot, 4);
    le(want + 16, r.identity, 6);
    le(want + 22, r.fd, 3);
    le(want + 25, r.fd_ino, 4);
    le(want + 29, r.alloc_id, 6);
    le(want + 35, 4, 4); /* pages, rounded up */
    want[39] = 9;
    le(want + 40, r.tag, 5);
    le(want + 45, byval_fnv1a32(want, 45) & 0xffff, 2);
    assert_int_equal(byval_wire_encode(&r, got), BYVAL_WIRE_OK);
    assert_memory_equal(got, want, BYVAL_WIRE_LEN);
    /* FNV-1a 32 reference values */
    assert_int_equal(byval_fnv1a32("", 0), 0x811c9dc5u);
    assert_int_equal(byval_fnv1a32("a", 1), 0xe40c292cu);
    assert_int_equal(byval_fnv1a32("foobar", 6), 0xbf9cf968u);
}

static void test_round_trip_extremes(void **state)
{
    byval_record_t recs[6] = {
        rec_max,
        {.kind = BYVAL_KIND_ZE_MEM}, /* every other field zero */
    };
    uint64_t seed = 1;
    for (int i = 2; i < 6; i++) { /* random in range, each kind */
        byval_record_t *r = &recs[i];
        r->kind = (uint8_t)(i - 1);
        r->flags = (uint8_t)(rnd(&seed) & 1);
        r->pid = (uint32_t)rnd(&seed);
        r->pidns = (uint32_t)rnd(&seed);
        r->boot = (uint32_t)rnd(&seed);
        r->identity = rnd(&seed) >> 16;
        r->fd = (uint32_t)rnd(&seed) >> 8;
        r->fd_ino = (uint32_t)rnd(&seed);
        r->alloc_id = rnd(&seed) >> 16;
        r->size = (rnd(&seed) % (BYVAL_WIRE_MAX_SIZE / 4096)) * 4096;
        r->device = (uint8_t)rnd(&seed);
        r->tag = rnd(&seed) >> 24;
    }
    for (int i = 0; i < 6; i++) {
        uint8_t b[BYVAL_WIRE_LEN + 17];
        byval_record_t out;
        memset(&out, 0x5a, sizeof(out));
        memset(b, 0xee, sizeof(b));
        assert_int_equal(byval_wire_encode(&recs[i], b), BYVAL_WIRE_OK);
        for (size_t j = BYVAL_WIRE_LEN; j < sizeof(b); j++)
            assert_int_equal(b[j], 0xee); /* writes exactly 47 bytes */
        assert_true(byval_wire_is_candidate(b, BYVAL_WIRE_LEN));
        assert_int_equal(byval_wire_decode(b, sizeof(b), &out), BYVAL_WIRE_OK); /* len > 47 */
        assert_int_equal(out.version, BYVAL_WIRE_VERSION);
        assert_same_record(&recs[i], &out);
        assert_int_equal(byval_wire_decode(b, BYVAL_WIRE_LEN, NULL), BYVAL_WIRE_OK);
    }
}

static void test_size_rounds_up_to_pages(void **state)
{
    const struct { uint64_t in, out; } c[] = {
        {0, 0}, {1, 4096}, {4095, 4096}, {4096, 4096}, {4097, 8192},
        {(1u << 20) + 1, (1u << 20) + 4096},
        {BYVAL_WIRE_MAX_SIZE - 4095, BYVAL_WIRE_MAX_SIZE},
        {BYVAL_WIRE_MAX_SIZE, BYVAL_WIRE_MAX_SIZE},
    };
    for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
        byval_record_t r = {.kind = BYVAL_KIND_CU_VMM, .size = c[i].in}, out;
        uint8_t b[BYVAL_WIRE_LEN];
        assert_int_equal(byval_wire_encode(&r, b), BYVAL_WIRE_OK);
        assert_int_equal(byval_wire_decode(b, sizeof(b), &out), BYVAL_WIRE_OK);
        assert_int_equal(out.size, c[i].out);
    }
}

static void test_every_bit_flip_rejected(void **state)
{
    const byval_record_t *recs[] = {&rec_max, &(byval_record_t){.kind = BYVAL_KIND_ZE_MEM}};
    for (int r = 0; r < 2; r++) {
        uint8_t good[BYVAL_WIRE_LEN], b[BYVAL_WIRE_LEN];
        assert_int_equal(byval_wire_encode(recs[r], good), BYVAL_WIRE_OK);
        for (int bit = 0; bit < BYVAL_WIRE_LEN * 8; bit++) {
            memcpy(b, good, sizeof(b));
            b[bit / 8] ^= (uint8_t)(1u << (bit % 8));
            byval_wire_status_t st = byval_wire_decode(b, sizeof(b), NULL);
            if (st != (bit < 16 ? BYVAL_WIRE_NOT_OURS : BYVAL_WIRE_CHECKSUM))
                fail_msg("bit %d flipped: %s", bit, byval_wire_status_str(st));
        }
    }
}

/* Each prefix in a heap block of exactly its length, so ASan flags a read
 * past the end; a refused record leaves *rec_p untouched. */
static void test_truncations_short(void **state)
{
    uint8_t b[BYVAL_WIRE_LEN];
    byval_record_t out, untouched;
    memset(&out, 0x5a, sizeof(out));
    memset(&untouched, 0x5a, sizeof(untouched));
    assert_int_equal(byval_wire_encode(&rec_max, b), BYVAL_WIRE_OK);
    for (size_t len = 0; len <= BYVAL_WIRE_LEN; len++) {
        uint8_t *p = malloc(len ? len : 1);
        assert_non_null(p);
        memcpy(p, b, len);
        byval_wire_status_t st = byval_wire_decode(p, len, &out);
        free(p);
        if (len == BYVAL_WIRE_LEN) {
            assert_int_equal(st, BYVAL_WIRE_OK);
            break;
        }
        assert_int_equal(st, BYVAL_WIRE_SHORT);
        assert_memory_equal(&out, &untouched, sizeof(out));
    }
    assert_int_equal(byval_wire_decode(NULL, BYVAL_WIRE_LEN, &out), BYVAL_WIRE_SHORT);
    assert_false(byval_wire_is_candidate(b, 1));
    assert_false(byval_wire_is_candidate(NULL, 47));
    assert_true(byval_wire_is_candidate(b, 2));
}

/* 1e6 seeded random buffers: no crash (ASan checks every read), and the
 * checksum lets essentially none through. */
static void test_random_buffers(void **state)
{
    uint64_t seed = 0xfeedface, counts[6] = {0};
    long n = 1000000, with_magic_ok = 0;
    uint8_t b[BYVAL_WIRE_LEN];
    byval_record_t out;
    for (long i = 0; i < n; i++) {
        fill_random(b, sizeof(b), &seed);
        byval_wire_status_t st = byval_wire_decode(b, sizeof(b), &out);
        assert_true(st <= BYVAL_WIRE_BAD_FIELD);
        counts[st]++;
        b[0] = 0x62, b[1] = 0x79; /* the right magic, random rest */
        with_magic_ok += byval_wire_decode(b, sizeof(b), &out) != BYVAL_WIRE_CHECKSUM;
    }
    printf("random: %llu ok, %llu not ours, %llu checksum; with magic: %ld passed the checksum\n",
           (unsigned long long)counts[BYVAL_WIRE_OK],
           (unsigned long long)counts[BYVAL_WIRE_NOT_OURS],
           (unsigned long long)counts[BYVAL_WIRE_CHECKSUM], with_magic_ok);
    assert_int_equal(counts[BYVAL_WIRE_OK], 0);
    assert_true(counts[BYVAL_WIRE_NOT_OURS] >= (uint64_t)n - 100); /* ~n * (1 - 2^-16) */
    assert_true(with_magic_ok <= 60); /* a 16-bit checksum: expected n / 2^16, 15 */
}

/* Random payloads made to pass the checksum: the decoder's own field
 * checks decide, exactly as the format says. */
static void test_checksummed_random_fields(void **state)
{
    uint64_t seed = 7;
    long ok = 0;
    for (long i = 0; i < 200000; i++) {
        uint8_t b[BYVAL_WIRE_LEN];
        byval_record_t out;
        fill_random(b, sizeof(b), &seed);
        b[0] = 0x62, b[1] = 0x79;
        if (i % 2)
            b[2] = 2; /* half with the right version */
        le(b + 45, byval_fnv1a32(b, 45) & 0xffff, 2);
        unsigned kind = b[3] & 15, flags = b[3] >> 4;
        byval_wire_status_t want = b[2] != 2 ? BYVAL_WIRE_VERSION_UNKNOWN
                                   : (kind < 1 || kind > 4 || flags > 1)
                                       ? BYVAL_WIRE_BAD_FIELD
                                       : BYVAL_WIRE_OK;
        assert_int_equal(byval_wire_decode(b, sizeof(b), &out), want);
        if (want == BYVAL_WIRE_OK) {
            uint8_t again[BYVAL_WIRE_LEN];
            ok++;
            assert_int_equal(byval_wire_encode(&out, again), BYVAL_WIRE_OK);
            assert_memory_equal(again, b, BYVAL_WIRE_LEN); /* canonical: same bytes */
        }
    }
    assert_true(ok > 1000);
}

static void test_encode_refuses_out_of_range(void **state)
{
    byval_record_t bad[10];
    for (int i = 0; i < 10; i++)
        bad[i] = rec_max;
    bad[0].kind = 0;
    bad[1].kind = 5;
    bad[2].flags = 0x2;
    bad[3].size = BYVAL_WIRE_MAX_SIZE + 1;
    bad[4].alloc_id = BYVAL_WIRE_MAX_ALLOC_ID + 1;
    bad[5].fd = BYVAL_WIRE_MAX_FD + 1;
    bad[6].kind = 15;
    bad[7].flags = 0x10;
    bad[8].identity = BYVAL_WIRE_MAX_IDENTITY + 1;
    bad[9].tag = BYVAL_WIRE_MAX_TAG + 1;
    for (int i = 0; i < 10; i++) {
        uint8_t b[BYVAL_WIRE_LEN], untouched[BYVAL_WIRE_LEN];
        memset(b, 0xa5, sizeof(b));
        memset(untouched, 0xa5, sizeof(untouched));
        if (byval_wire_encode(&bad[i], b) != BYVAL_WIRE_BAD_FIELD)
            fail_msg("case %d encoded", i);
        assert_memory_equal(b, untouched, sizeof(b)); /* wrote nothing */
    }
    uint8_t b[BYVAL_WIRE_LEN];
    assert_int_equal(byval_wire_encode(NULL, b), BYVAL_WIRE_BAD_FIELD);
    assert_int_equal(byval_wire_encode(&rec_max, NULL), BYVAL_WIRE_BAD_FIELD);
}

static void test_status_strings(void **state)
{
    for (int i = BYVAL_WIRE_OK; i <= BYVAL_WIRE_BAD_FIELD; i++) {
        const char *s = byval_wire_status_str((byval_wire_status_t)i);
        assert_non_null(s);
        assert_true(strlen(s) > 0);
        for (int j = BYVAL_WIRE_OK; j < i; j++) /* distinct */
            assert_string_not_equal(s, byval_wire_status_str((byval_wire_status_t)j));
    }
    assert_string_equal(byval_wire_status_str((byval_wire_status_t)99), "unknown status");
}

/* ---- the short record (event pools) -------------------------------------- */

static void test_short_round_trip_and_layout(void **state)
{
    (void)state;
    uint8_t bound[40], out[BYVAL_SHORT_LEN];
    for (int i = 0; i < 40; i++)
        bound[i] = (uint8_t)(i * 7);
    byval_short_t s = {.flags = BYVAL_FLAG_ID_PIDFS, .pid = 0x01020304, .id32 = 0xdeadbeef,
                       .guard = byval_short_guard(0x11111111, 0x22222222), .serial = 42};
    assert_int_equal(byval_short_encode(&s, bound, 40, out), BYVAL_WIRE_OK);
    uint8_t want[20];
    le(want, BYVAL_SHORT_MAGIC, 2);
    want[2] = BYVAL_SHORT_VERSION;
    want[3] = BYVAL_FLAG_ID_PIDFS;
    le(want + 4, s.pid, 4);
    le(want + 8, s.id32, 4);
    le(want + 12, s.guard, 4);
    le(want + 16, s.serial, 4);
    assert_memory_equal(out, want, 20);
    byval_short_t d;
    assert_int_equal(byval_short_decode(out, bound, 40, &d), BYVAL_WIRE_OK);
    assert_int_equal(d.flags, s.flags);
    assert_int_equal(d.pid, s.pid);
    assert_int_equal(d.id32, s.id32);
    assert_int_equal(d.guard, s.guard);
    assert_int_equal(d.serial, s.serial);
    /* The guard tells hosts and namespaces apart. */
    assert_int_not_equal(byval_short_guard(1, 2), byval_short_guard(2, 1));
    assert_int_not_equal(byval_short_guard(1, 2), byval_short_guard(1, 3));
}

static void test_short_every_bit_flip_rejected(void **state)
{
    (void)state;
    uint8_t bound[40] = {17}, out[BYVAL_SHORT_LEN];
    byval_short_t s = {.pid = 77, .id32 = 5, .guard = 9, .serial = 3};
    assert_int_equal(byval_short_encode(&s, bound, 40, out), BYVAL_WIRE_OK);
    /* Any change in the record or in the driver's bytes it is bound to
     * (a program writing its own fd into bytes 0-3) makes it not ours. */
    for (int i = 0; i < (BYVAL_SHORT_LEN + 40) * 8; i++) {
        uint8_t r[BYVAL_SHORT_LEN], b[40];
        memcpy(r, out, sizeof(r));
        memcpy(b, bound, sizeof(b));
        if (i < BYVAL_SHORT_LEN * 8)
            r[i / 8] ^= (uint8_t)(1u << (i % 8));
        else
            b[i / 8 - BYVAL_SHORT_LEN] ^= (uint8_t)(1u << (i % 8));
        assert_int_not_equal(byval_short_decode(r, b, 40, NULL), BYVAL_WIRE_OK);
    }
}

static void test_short_refuses_bad_flags_and_random(void **state)
{
    (void)state;
    uint8_t out[BYVAL_SHORT_LEN];
    byval_short_t s = {.flags = 0x2};
    assert_int_equal(byval_short_encode(&s, NULL, 0, out), BYVAL_WIRE_BAD_FIELD);
    uint64_t seed = 0x1234567;
    int accepted = 0;
    for (int i = 0; i < 100000; i++) {
        uint8_t r[BYVAL_SHORT_LEN], b[40];
        fill_random(r, sizeof(r), &seed);
        fill_random(b, sizeof(b), &seed);
        le(r, BYVAL_SHORT_MAGIC, 2);
        accepted += byval_short_decode(r, b, 40, NULL) == BYVAL_WIRE_OK;
    }
    assert_true(accepted <= 1); /* a 32-bit checksum: about 2^-32 each */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout_known_answer),
        cmocka_unit_test(test_round_trip_extremes),
        cmocka_unit_test(test_size_rounds_up_to_pages),
        cmocka_unit_test(test_every_bit_flip_rejected),
        cmocka_unit_test(test_truncations_short),
        cmocka_unit_test(test_random_buffers),
        cmocka_unit_test(test_checksummed_random_fields),
        cmocka_unit_test(test_encode_refuses_out_of_range),
        cmocka_unit_test(test_status_strings),
        cmocka_unit_test(test_short_round_trip_and_layout),
        cmocka_unit_test(test_short_every_bit_flip_rejected),
        cmocka_unit_test(test_short_refuses_bad_flags_and_random),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
