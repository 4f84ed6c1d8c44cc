/* SPDX-License-Identifier: MIT */
/*
 * bench_lru: cost of an import-cache hit (get with a reference + put_value,
 * what a cached zeMemOpenIpcHandle + zeMemCloseIpcHandle does in the cache),
 * how it grows with the number of entries, how aggregate hits scale with
 * threads, and what an entry costs in memory. Prints machine-readable lines:
 *   lru_hit_ns <entries> <median ns>
 *   lru_threads <n> <hits per second>
 *   lru_bytes <key length> <bytes per entry>
 * Measures only; asserts nothing about time.
 */
#include "cache/lru.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define KEY_MAX 96
#define BATCHES 1000
#define BATCH_OPS 100
#define THREAD_KEYS 1024
#define THREAD_RUN_NS 200000000LL /* 200 ms per thread count */

static int64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

static double median(double *v, size_t n)
{
    qsort(v, n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Keys differ in their first 8 bytes and are zero elsewhere, as the
 * shim's keys are zero-padded; the hash still has to read all of them. */
static void make_key(uint8_t *key, size_t len, uint64_t i)
{
    memset(key, 0, len);
    memcpy(key, &i, sizeof(i));
    key[len - 1] = (uint8_t)(i * 131u); /* the tail matters to memcmp too */
}

/* Fill a cache of capacity `entries` with `entries` keys. The cache is
 * sharded and each shard holds its share of the capacity, so a few keys of
 * an uneven hash are evicted: *present_p (if not NULL) gets the indices
 * that stayed, and lookups pick only those (a miss is another benchmark). */
static byval_lru_t *filled(size_t entries, size_t key_len, uint32_t **present_p, size_t *n_p)
{
    byval_lru_t *lru = byval_lru_create(entries, key_len, NULL, NULL);
    uint8_t key[KEY_MAX];
    void *v;

    if (lru == NULL) {
        fprintf(stderr, "bench_lru: byval_lru_create(%zu) failed\n", entries);
        exit(1);
    }
    for (size_t i = 0; i < entries; i++) {
        make_key(key, key_len, i);
        if (byval_lru_insert(lru, key, (void *)(uintptr_t)(i + 1), 0, NULL) != BYVAL_LRU_OK) {
            fprintf(stderr, "bench_lru: insert %zu failed\n", i);
            exit(1);
        }
    }
    if (present_p != NULL) {
        uint32_t *present = malloc(entries * sizeof(*present));
        size_t n = 0;

        if (present == NULL)
            exit(1);
        for (size_t i = 0; i < entries; i++) {
            make_key(key, key_len, i);
            if (byval_lru_get(lru, key, 0, &v))
                present[n++] = (uint32_t)i;
        }
        *present_p = present;
        *n_p = n;
    }
    return lru;
}

static uint64_t xorshift(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* One hit as the shim does it: get with a reference, then put that value. */
static inline void hit(byval_lru_t *lru, const uint8_t *key)
{
    void *v;

    if (!byval_lru_get(lru, key, 1, &v)) {
        fprintf(stderr, "bench_lru: unexpected miss\n");
        exit(1);
    }
    byval_lru_put_value(lru, key, v);
}

/* Median over batches of the per-hit time: one clock read per batch keeps
 * the timer's own cost (~20 ns) out of a ~50 ns operation. Keys are picked
 * at random so that large caches pay their cache misses, as real opens of
 * many different handles would. */
static void bench_hit(size_t entries)
{
    static double samples[BATCHES];
    static uint32_t idx[BATCH_OPS];
    uint32_t *present;
    size_t n;
    byval_lru_t *lru = filled(entries, 48, &present, &n);
    uint8_t key[KEY_MAX];
    uint64_t seed = 0x9e3779b97f4a7c15ULL;

    for (int b = 0; b < BATCHES; b++) {
        for (int j = 0; j < BATCH_OPS; j++)
            idx[j] = present[xorshift(&seed) % n];
        int64_t t0 = now_ns();
        for (int j = 0; j < BATCH_OPS; j++) {
            make_key(key, 48, idx[j]);
            hit(lru, key);
        }
        samples[b] = (double)(now_ns() - t0) / BATCH_OPS;
    }
    printf("lru_hit_ns %zu %.1f\n", entries, median(samples, BATCHES));
    fprintf(stderr, "bench_lru: %zu of %zu keys stayed in a cache of capacity %zu\n", n,
            entries, entries);
    free(present);
    byval_lru_destroy(lru);
}

struct worker {
    pthread_t tid;
    byval_lru_t *lru;
    const uint32_t *keys; /* this thread's own subset */
    size_t nkeys;
    uint64_t seed;
    uint64_t ops;
};

static atomic_int go, stop;

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    uint8_t key[KEY_MAX];
    uint64_t seed = w->seed, ops = 0;

    while (!atomic_load_explicit(&go, memory_order_acquire))
        ;
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        for (int j = 0; j < BATCH_OPS; j++) {
            /* Own key subset: contention is the cache's lock, not the keys. */
            make_key(key, 48, w->keys[xorshift(&seed) % w->nkeys]);
            hit(w->lru, key);
        }
        ops += BATCH_OPS;
    }
    w->ops = ops;
    return NULL;
}

static void bench_threads(unsigned n)
{
    uint32_t *present;
    size_t np;
    byval_lru_t *lru = filled((size_t)n * THREAD_KEYS, 48, &present, &np);
    struct worker *w = calloc(n, sizeof(*w));
    uint64_t total = 0;
    int64_t t0, t1;

    if (w == NULL)
        exit(1);
    atomic_store(&go, 0);
    atomic_store(&stop, 0);
    for (unsigned i = 0; i < n; i++) {
        /* Contiguous slices: the contention measured is the cache's own. */
        w[i].lru = lru;
        w[i].keys = present + np * i / n;
        w[i].nkeys = np * (i + 1) / n - np * i / n;
        w[i].seed = 0x2545f4914f6cdd1dULL + i;
        if (pthread_create(&w[i].tid, NULL, worker_main, &w[i]) != 0) {
            fprintf(stderr, "bench_lru: pthread_create failed\n");
            exit(1);
        }
    }
    t0 = now_ns();
    atomic_store_explicit(&go, 1, memory_order_release);
    while (now_ns() - t0 < THREAD_RUN_NS)
        usleep(1000);
    atomic_store(&stop, 1);
    for (unsigned i = 0; i < n; i++) {
        pthread_join(w[i].tid, NULL);
        total += w[i].ops;
    }
    t1 = now_ns();
    printf("lru_threads %u %.0f\n", n, (double)total * 1e9 / (double)(t1 - t0));
    free(w);
    free(present);
    byval_lru_destroy(lru);
}

static void bench_bytes(size_t key_len)
{
    byval_lru_t *lru = filled(100000, key_len, NULL, NULL);
    byval_lru_stats_t st;

    byval_lru_stats(lru, &st);
    printf("lru_bytes %zu %zu\n", key_len, st.bytes_per_entry);
    byval_lru_destroy(lru);
}

int main(int argc, char **argv)
{
    static const size_t sizes[] = {16, 1000, 100000, 1000000};
    const char *threads = "1,2";

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
            threads = argv[++i];
        } else {
            fprintf(stderr, "usage: bench_lru [--threads 1,2,4,8,16]\n");
            return 2;
        }
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
        bench_hit(sizes[i]);
    for (const char *p = threads; *p != '\0';) {
        char *end;
        unsigned long n = strtoul(p, &end, 10);

        if (end == p || n == 0 || n > 1024 || (*end != ',' && *end != '\0')) {
            fprintf(stderr, "bench_lru: bad --threads list '%s'\n", threads);
            return 2;
        }
        bench_threads((unsigned)n);
        p = *end == ',' ? end + 1 : end;
    }
    bench_bytes(48);
    bench_bytes(96);
    return 0;
}
