/* SPDX-License-Identifier: MIT */
/* test_lru.h - helpers shared by the test_lru sources (the functions are
 * defined in test_lru_threads.c). */
#ifndef BYVAL_TEST_LRU_H
#define BYVAL_TEST_LRU_H

#include <stdint.h>

#include "cache/lru.h"

#define KLEN 16
#define MAXREL 256 /* releases logged by one test step */
#define KB(k) mkb((unsigned char[KLEN]){0}, (uint64_t)(k))
#define INS(c, k, v, ref, ex) byval_lru_insert((c), KB(k), (void *)(uintptr_t)(v), (ref), (ex))
#define GET(c, k, ref, v) byval_lru_get((c), KB(k), (ref), (v))
#define PUT(c, k) byval_lru_put((c), KB(k))
#define RM(c, k) byval_lru_remove((c), KB(k))
#define V(k) ((void *)(uintptr_t)(0x1000 + (k)))
/* Expected stats, -1 = any: size referenced hits misses inserts evictions removals */
#define EXPECT(c, ...) expect_stats((c), (const long[7]){__VA_ARGS__}, __LINE__)
unsigned char *mkb(unsigned char *b, uint64_t k);
uint64_t key_of(const void *key);
uint64_t rnd(uint64_t *s);
/* n times LRU_TEST_SCALE (0 < f <= 1), at least min. */
long scaled(long n, long min);
byval_lru_stats_t stats(byval_lru_t *lru);
void expect_stats(byval_lru_t *lru, const long *want, int line);

#endif
