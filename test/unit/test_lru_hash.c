/* SPDX-License-Identifier: MIT */
/*
 * test_lru_hash.c - part of test_lru (main in test_lru.c): the key hash
 * spreads structured keys like a random function. Real keys differ in a
 * few fields (an index, a pid, a page-aligned pointer) at fixed offsets,
 * and every word feeds one of two lanes: for each key size the shim uses
 * and each pattern, the 32-bit hashes may collide only as often as random
 * values do, and so may their low bits (the table's bucket).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cache/lru.h"

#define HN 200000
#define LOW_BITS 20

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* n - distinct values among v[0..n) (sorts v). */
static long repeats(uint32_t *v, long n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_u32);
    long r = 0;
    for (long i = 1; i < n; i++)
        r += v[i] == v[i - 1];
    return r;
}

/* Key i of a pattern: 0 the index in word `at`, 1 two 10/8-bit fields in
 * adjacent words (the two lanes), 2 a page-aligned pointer in word `at`,
 * 3 the index spread over the last bytes (the tail word when len % 8). */
static void mkkey(unsigned char *k, size_t len, int pattern, size_t at, uint64_t i)
{
    memset(k, 0, len);
    k[len - 1] ^= 0x5a;
    uint64_t x = i;
    uint32_t f[2] = {(uint32_t)(i & 1023), (uint32_t)(i >> 10)};
    switch (pattern) {
    case 0:
        memcpy(k + at, &x, 8);
        break;
    case 1:
        memcpy(k + at, &f[0], 4);
        memcpy(k + at + 8, &f[1], 4);
        break;
    case 2:
        x = 0x7f0000000000ull + (i << 12);
        memcpy(k + at, &x, 8);
        break;
    default:
        for (size_t b = 0; b < 3; b++)
            k[len - 2 - b] = (unsigned char)(i >> (8 * b));
    }
}

void test_lru_hash_spread(void **state)
{
    const size_t lens[] = {8, 13, 40, 48, 80};
    uint32_t *h = malloc(HN * sizeof(*h)), *low = malloc(HN * sizeof(*low));
    unsigned char k[128];
    /* Random 32-bit values: HN^2/2^33 = 4.7 repeats expected; in 2^20
     * buckets HN - 2^20 (1 - e^(-HN/2^20)) = 17917, sd ~ 120. */
    const long low_want = 17917;
    for (size_t l = 0; l < 5; l++) {
        size_t len = lens[l];
        for (int pattern = 0; pattern < 4; pattern++) {
            for (size_t at = 0; at + 8 <= len; at += 8) {
                if (pattern == 1 && at + 16 > len)
                    continue;
                if (pattern == 3 && (len < 4 || at))
                    continue;
                for (long i = 0; i < HN; i++) {
                    mkkey(k, len, pattern, at, (uint64_t)i);
                    h[i] = byval_lru_hash(k, len);
                    low[i] = h[i] & ((1u << LOW_BITS) - 1);
                }
                long full = repeats(h, HN), lr = repeats(low, HN);
                if (full > 25 || lr < low_want * 95 / 100 || lr > low_want * 105 / 100)
                    fail_msg("len %zu pattern %d word %zu: %ld repeats in 32 bits (~5 "
                             "expected), %ld in %d bits (~%ld)",
                             len, pattern, at / 8, full, lr, LOW_BITS, low_want);
            }
        }
    }
    free(h);
    free(low);
}
