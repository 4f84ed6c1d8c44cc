/* SPDX-License-Identifier: MIT */
/*
 * bench_imports.c - the import cache at scale, as the shim uses it
 * (cache/imports.h, with the pointer map and the liveness check of the
 * lifetime and registry work): N mappings imported, opened and closed
 * once (cached, closed, their pointers kept), each tracked by a registry
 * word; then a hit is what a cached open+close does: byval_imports_get
 * (hash, probe, reference, liveness load), byval_imports_open (pointer
 * counted) and byval_imports_close (uncounted, reference dropped).
 *  - imports_hit_ns N uniform hot: median ns per hit at N entries, keys
 *    drawn uniformly from all N (memory misses included) and from 16 hot
 *    keys (what a job re-opening its peers' handles sees);
 *  - imports_bytes N B: resident bytes per entry at N entries (the cache's
 *    slots and table, the pointer map, a mapping record of the shim's
 *    size), from the process's RSS growth.
 * Usage: bench_imports [--quick]. No timing asserts.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cache/imports.h"

#define KEY_LEN 40 /* the CUDA VMM key's (shim/cu.h) */
#define HOT 16
#define REPEATS 11

typedef struct mapping {
    byval_import_t core;
    uint8_t rec[48]; /* what the shim's records keep beside the core */
    uint64_t base, size;
} mapping_t;

static uint64_t live_word = 1; /* the exporter's registry word: live */

static void release(byval_import_t *m)
{
    (void)m; /* the core frees the mapping */
}

static int same(const byval_import_t *a, const byval_import_t *b)
{
    return a == b;
}

static void track(byval_import_t *m)
{
    byval_import_track(m, &live_word, 1, NULL);
}

static const byval_backend_import_t ops = {
    .name = "bench import", .key_len = KEY_LEN, .release = release, .same = same, .track = track};

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

/* Key i as the shim's VMM key looks: type, flags, context, then the
 * exporter's pid namespace, pid, identity and the allocation id. */
static void key_of(uint64_t i, uint64_t k[KEY_LEN / 8])
{
    k[0] = 1;
    k[1] = 0x7f0000001000ull;
    k[2] = 0x0000100000004026ull;
    k[3] = 0x12345;
    k[4] = i + 1;
}

static uintptr_t ptr_of(uint64_t i)
{
    return (uintptr_t)(0x7e0000000000ull + (i << 21)); /* 2 MiB mappings */
}

static long rss_bytes(void)
{
    long pages = 0, rss = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &rss) != 2)
            rss = 0;
        fclose(f);
    }
    return rss * sysconf(_SC_PAGESIZE);
}

static int one_hit(byval_imports_t *c, uint64_t i)
{
    uint64_t k[KEY_LEN / 8];
    byval_lru_ref_t ref;
    key_of(i, k);
    byval_import_t *m = byval_imports_get(c, k, &ref);
    if (!m || byval_imports_open(c, m, ref, ptr_of(i)) != 0)
        return -1;
    return byval_imports_close(ptr_of(i)) == BYVAL_IMPORTS_CLOSED ? 0 : -1;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Median ns per hit over REPEATS windows of `hits` hits (keys from
 * [0, span) of n at random). */
static double time_hits(byval_imports_t *c, uint64_t span, int hits)
{
    uint64_t t[REPEATS], s = 88172645463325252ull;
    for (int r = 0; r < REPEATS; r++) {
        uint64_t t0 = now_ns();
        for (int h = 0; h < hits; h++)
            if (one_hit(c, rnd(&s) % span) != 0)
                return -1;
        t[r] = now_ns() - t0;
    }
    qsort(t, REPEATS, sizeof(t[0]), cmp_u64);
    return (double)t[REPEATS / 2] / hits;
}

static int run(uint64_t n, int hits)
{
    byval_imports_set_budget(UINT64_MAX);
    long rss0 = rss_bytes();
    byval_imports_t *c = byval_imports_create(&ops, n);
    if (!c)
        return -1;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t k[KEY_LEN / 8];
        byval_import_t *out;
        byval_lru_ref_t ref;
        mapping_t *m = calloc(1, sizeof(*m));
        if (!m)
            return -1;
        m->core.bytes = 2u << 20;
        m->core.addr = ptr_of(i);
        m->core.pid = 4242;
        key_of(i, k);
        if (byval_imports_insert(c, k, &m->core, &out, &ref) != 0 || !ref ||
            byval_imports_open(c, out, ref, ptr_of(i)) != 0 ||
            byval_imports_close(ptr_of(i)) != BYVAL_IMPORTS_CLOSED)
            return -1;
    }
    double per = (double)(rss_bytes() - rss0) / (double)n;
    double uni = time_hits(c, n, hits), hot = time_hits(c, n < HOT ? n : HOT, hits);
    if (uni < 0 || hot < 0)
        return -1;
    printf("imports_hit_ns %llu %.1f %.1f (uniform, %d hot keys; get+open+close)\n",
           (unsigned long long)n, uni, hot, HOT);
    printf("imports_bytes %llu %.0f (resident bytes per entry, mapping records included)\n",
           (unsigned long long)n, per);
    byval_imports_destroy(c); /* N releases: each finds its pointer at once (vtally.c) */
    return 0;
}

int main(int argc, char **argv)
{
    int quick = argc > 1 && !strcmp(argv[1], "--quick");
    uint64_t sizes[] = {16, 1000000};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
        if (run(quick && sizes[i] > 16 ? 10000 : sizes[i], quick ? 2000 : 100000) != 0) {
            fprintf(stderr, "bench_imports: the cache refused an entry at %llu\n",
                    (unsigned long long)sizes[i]);
            return 1;
        }
    return 0;
}
