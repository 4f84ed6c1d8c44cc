/* SPDX-License-Identifier: MIT */
/*
 * bench_lru.c - micro-benchmark of cache/lru: one hit is get_ref plus
 * put_ref (what a cached open + close does in the import caches), 40-byte
 * keys.
 *  - median ns per hit at 16, 1k, 64k and 1M entries: keys drawn uniformly
 *    from all entries (memory misses included, as a real cache of that
 *    size sees them) and from 16 hot keys (the algorithm alone);
 *  - aggregate hits/s of 1..16 threads on one shared cache, each thread on
 *    its own slice of the keys (as ranks open their own peers' handles):
 *    the contention measured is the cache's own;
 *  - ns per hit by key size (40 ze export, 48 ze import, 80 CUDA), both
 *    as get_ref + put_ref and as get + put_value (the key hashed and
 *    probed again by the put, as close did before handles);
 *  - bytes per entry (stats.bytes_per_entry);
 *  - the memory floor: one dependent load at random over as many bytes as
 *    the 1M-entry cache holds. A uniform hit there makes two (bucket, then
 *    slot), so no layout of this cache gets under twice that.
 * Lines start with a tag (lru_hit_ns, lru_hit_key_ns, lru_threads, lru_bytes, lru_mem_ns) that
 * scripts/bench.sh reads; the rest of each line is for people.
 * Usage: bench_lru [--threads 1,2,4,8,16] [--quick]
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "cache/lru.h"

#define KEY_LEN 40 /* the main table's */
#define MAX_KEY 128
#define REPEATS 21
#define MAX_THREADS 64
#define THREAD_ENTRIES 16384

static int quick; /* --quick: fewer repeats and shorter windows (smoke test) */
static size_t key_len = KEY_LEN;
static int by_value; /* put by key and value instead of by handle */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1DULL;
}

/* Key i: the index in the first 8 bytes, a constant tail (as real keys
 * have: pid, namespace, device...). */
static void mkkey(unsigned char *k, uint64_t i)
{
    memcpy(k, &i, sizeof(i));
}

static void key_init(unsigned char *k)
{
    memset(k, 0x5a, key_len);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return v[n / 2];
}

static byval_lru_t *filled(size_t n)
{
    byval_lru_t *lru = byval_lru_create(n, key_len, NULL, NULL);
    unsigned char k[MAX_KEY];
    key_init(k);
    for (uint64_t i = 0; lru && i < n; i++) {
        mkkey(k, i);
        if (byval_lru_insert(lru, k, (void *)(uintptr_t)(i + 1), 0, NULL) != BYVAL_LRU_OK) {
            fprintf(stderr, "bench_lru: insert %llu of %zu failed\n", (unsigned long long)i, n);
            exit(1);
        }
    }
    return lru;
}

/* One hit: get with a reference, then put it. A miss is a bug. */
static inline void hit(byval_lru_t *lru, unsigned char *k, uint64_t i)
{
    void *v = NULL;
    byval_lru_ref_t ref = 0;
    mkkey(k, i);
    int ok = by_value ? byval_lru_get(lru, k, 1, &v) && byval_lru_put_value(lru, k, v) == 0
                      : byval_lru_get_ref(lru, k, &v, &ref) && byval_lru_put_ref(lru, ref) == 0;
    if (!ok || v != (void *)(uintptr_t)(i + 1)) {
        fprintf(stderr, "bench_lru: key %llu did not hit\n", (unsigned long long)i);
        exit(1);
    }
}

/* Median ns per hit over REPEATS batches; hot: draw from 16 keys only. */
static double hit_ns(byval_lru_t *lru, size_t n, int hot)
{
    enum { BATCH = 20000 };
    uint64_t seed = 0x9E3779B97F4A7C15ull ^ n, set[16];
    unsigned char k[MAX_KEY];
    double per[REPEATS];
    int reps = quick ? 5 : REPEATS;
    key_init(k);
    for (int i = 0; i < 16; i++)
        set[i] = rnd(&seed) % n;
    for (int i = 0; i < BATCH; i++) /* warm up */
        hit(lru, k, hot ? set[i & 15] : rnd(&seed) % n);
    for (int r = 0; r < reps; r++) {
        uint64_t t0 = now_ns();
        for (int i = 0; i < BATCH; i++)
            hit(lru, k, hot ? set[rnd(&seed) & 15] : rnd(&seed) % n);
        per[r] = (double)(now_ns() - t0) / BATCH;
    }
    return median(per, reps);
}

/* ---- threads --------------------------------------------------------------- */
typedef struct worker {
    pthread_t tid;
    byval_lru_t *lru;
    uint64_t first, nkeys; /* this thread's slice of the keys */
    uint64_t seed, ops;
    pthread_barrier_t *start;
    volatile int *stop;
} __attribute__((aligned(64))) worker_t;

static void *work(void *p)
{
    worker_t *w = p;
    unsigned char k[MAX_KEY];
    key_init(k);
    /* Seed and count in locals: workers sit side by side in one array, and
     * a store per hit to a shared line would measure false sharing. */
    uint64_t seed = w->seed, ops = 0;
    pthread_barrier_wait(w->start);
    while (!__atomic_load_n(w->stop, __ATOMIC_RELAXED)) {
        for (int i = 0; i < 256; i++)
            hit(w->lru, k, w->first + rnd(&seed) % w->nkeys);
        ops += 256;
    }
    w->ops = ops;
    return NULL;
}

/* Aggregate hits/s of n threads over a window; median of repeats. */
static double threads_rate(byval_lru_t *lru, int n)
{
    worker_t w[MAX_THREADS];
    double rate[REPEATS];
    int reps = quick ? 3 : 5;
    uint64_t window = quick ? 50000000u : 200000000u;
    for (int r = 0; r < reps; r++) {
        pthread_barrier_t start;
        volatile int stop = 0;
        pthread_barrier_init(&start, NULL, (unsigned)n + 1);
        for (int i = 0; i < n; i++) {
            w[i] = (worker_t){.lru = lru,
                              .first = (uint64_t)THREAD_ENTRIES * (uint64_t)i / (uint64_t)n,
                              .nkeys = (uint64_t)THREAD_ENTRIES / (uint64_t)n,
                              .seed = 0x1234567ull * (uint64_t)(i + 1) + (uint64_t)r,
                              .start = &start, .stop = &stop};
            if (pthread_create(&w[i].tid, NULL, work, &w[i]) != 0) {
                perror("bench_lru: pthread_create");
                exit(1);
            }
        }
        pthread_barrier_wait(&start);
        uint64_t t0 = now_ns();
        struct timespec ts = {0, (long)window};
        nanosleep(&ts, NULL);
        __atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
        uint64_t ops = 0;
        for (int i = 0; i < n; i++) {
            pthread_join(w[i].tid, NULL);
            ops += w[i].ops;
        }
        rate[r] = (double)ops * 1e9 / (double)(now_ns() - t0);
        pthread_barrier_destroy(&start);
    }
    return median(rate, reps);
}

/* ns per dependent load over a random cycle of the 64-byte lines of
 * `bytes` (median of batches): what memory alone costs a uniform lookup
 * in a cache of that size. Huge pages where the kernel gives them, so the
 * figure is DRAM's, not the TLB's: a floor, not an excuse. */
static double mem_ns(size_t bytes)
{
    enum { BATCH = 200000 };
    const size_t huge = (size_t)2 << 20;
    size_t len = (bytes + huge - 1) & ~(huge - 1), n = len / 64;
    void **buf = aligned_alloc(huge, len);
    size_t *order = malloc(n * sizeof(*order));
    double per[REPEATS];
    int reps = quick ? 5 : REPEATS;
    uint64_t seed = 0x2545F4914F6CDD1Dull;
    if (!buf || !order) {
        perror("bench_lru: mem_ns");
        exit(1);
    }
    madvise(buf, len, MADV_HUGEPAGE);
    for (size_t i = 0; i < n; i++)
        order[i] = i;
    for (size_t i = n - 1; i > 0; i--) { /* Sattolo: one cycle through all */
        size_t j = rnd(&seed) % i, t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    for (size_t i = 0; i < n; i++)
        buf[order[i] * 8] = &buf[order[(i + 1) % n] * 8];
    void **p = &buf[order[0] * 8];
    for (int i = 0; i < BATCH; i++) /* warm up */
        p = *p;
    for (int r = 0; r < reps; r++) {
        uint64_t t0 = now_ns();
        for (int i = 0; i < BATCH; i++)
            p = *p;
        per[r] = (double)(now_ns() - t0) / BATCH;
    }
    if (!p) /* keep the chase */
        abort();
    free(order);
    free(buf);
    return median(per, reps);
}

static size_t bytes_per_entry(size_t klen, size_t n)
{
    byval_lru_t *lru = byval_lru_create(n, klen, NULL, NULL);
    unsigned char *k = calloc(1, klen);
    byval_lru_stats_t st = {0};
    for (uint64_t i = 0; lru && k && i < n; i++) {
        memcpy(k, &i, sizeof(i));
        byval_lru_insert(lru, k, NULL, 0, NULL);
    }
    byval_lru_stats(lru, &st);
    byval_lru_destroy(lru);
    free(k);
    return st.bytes_per_entry;
}

int main(int argc, char **argv)
{
    int threads[MAX_THREADS], nthreads = 0;
    const char *list = "1,2,4,8,16";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            list = argv[++i];
        } else if (!strcmp(argv[i], "--quick")) {
            quick = 1;
        } else {
            fprintf(stderr, "usage: %s [--threads 1,2,4,8,16] [--quick]\n", argv[0]);
            return 2;
        }
    }
    for (const char *p = list; *p && nthreads < MAX_THREADS; p += *p == ',') {
        char *end;
        long t = strtol(p, &end, 10);
        if (end == p || t < 1 || t > MAX_THREADS) {
            fprintf(stderr, "bench_lru: bad --threads list '%s' (1..%d)\n", list, MAX_THREADS);
            return 2;
        }
        threads[nthreads++] = (int)t;
        p = end;
    }

    printf("# cache/lru: one hit = get_ref + put_ref, %d-byte keys, %ld CPUs online\n",
           KEY_LEN, sysconf(_SC_NPROCESSORS_ONLN));
    printf("# %-12s %10s %12s %14s\n", "tag", "entries", "ns/hit", "ns/hit 16 hot");
    const size_t sizes[] = {16, 1000, 65536, 1000000};
    double first = 0, last = 0;
    size_t bpe_1m = 0;
    for (int i = 0; i < 4; i++) {
        byval_lru_t *lru = filled(sizes[i]);
        if (!lru) {
            perror("bench_lru: create");
            return 1;
        }
        double u = hit_ns(lru, sizes[i], 0), h = hit_ns(lru, sizes[i], 1);
        printf("%-14s %10zu %12.1f %14.1f\n", "lru_hit_ns", sizes[i], u, h);
        if (i == 0)
            first = u;
        last = u;
        byval_lru_stats_t st;
        byval_lru_stats(lru, &st);
        bpe_1m = st.bytes_per_entry;
        byval_lru_destroy(lru);
    }
    printf("%-14s %10s %12.2f   (1M / 16 entries, uniform keys)\n", "lru_hit_ratio", "1M/16",
           last / first);
    printf("%-14s %10s %12.1f   (one dependent load over the 1M cache's %zu MB: its hit makes 2)\n",
           "lru_mem_ns", "1000000", mem_ns(bpe_1m * sizes[3]), bpe_1m * sizes[3] >> 20);

    /* Key sizes, and what put by handle saves over put by key + value. */
    printf("# %-12s %10s %12s %14s   (1000 entries, uniform keys)\n", "tag", "key bytes",
           "ns/hit ref", "ns/hit value");
    const size_t klens[] = {40, 48, 80}; /* ze export, ze import, CUDA */
    for (int i = 0; i < 3; i++) {
        double ns[2];
        key_len = klens[i];
        byval_lru_t *kl = filled(1000);
        for (by_value = 0; by_value < 2; by_value++)
            ns[by_value] = hit_ns(kl, 1000, 0);
        by_value = 0;
        byval_lru_destroy(kl);
        printf("%-14s %10zu %12.1f %14.1f\n", "lru_hit_key_ns", klens[i], ns[0], ns[1]);
    }
    key_len = KEY_LEN;

    printf("# %-12s %10s %12s %14s   (%d entries, own key slice per thread)\n", "tag", "threads", "hits/s",
           "vs 1 thread", THREAD_ENTRIES);
    byval_lru_t *lru = filled(THREAD_ENTRIES);
    double base = 0;
    for (int i = 0; i < nthreads; i++) {
        double r = threads_rate(lru, threads[i]);
        if (i == 0)
            base = r / threads[0];
        printf("%-14s %10d %12.0f %13.2fx\n", "lru_threads", threads[i], r, r / base);
        fflush(stdout);
    }
    byval_lru_destroy(lru);

    printf("# %-12s %10s %12s\n", "tag", "key bytes", "bytes/entry");
    printf("%-14s %10d %12zu   (1M entries)\n", "lru_bytes", KEY_LEN, bpe_1m);
    const size_t keys[] = {40, 48, 80}; /* ze export, ze import, CUDA */
    for (int i = 0; i < 3; i++)
        printf("%-14s %10zu %12zu   (100k entries)\n", "lru_bytes", keys[i],
               bytes_per_entry(keys[i], 100000));
    return 0;
}
