/* SPDX-License-Identifier: MIT */
/* stats.c - counters and the exit summary (IPCBYVAL_STATS=1). */
#include "cache/stats.h"

#include <stdio.h>
#include <time.h>

#include "cache/exports.h"
#include "cache/imports.h"
#include "handles/registry.h"
#include "handles/rendezvous.h" /* rendezvous_served */
#include "cache/log.h"

byval_stats_t byval_stats[BYVAL_STRIPES];

uint64_t byval_stats_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t byval_stats_sum(size_t offset)
{
    uint64_t sum = 0;
    for (int i = 0; i < BYVAL_STRIPES; i++)
        sum += __atomic_load_n((uint64_t *)((char *)&byval_stats[i] + offset), __ATOMIC_RELAXED);
    return sum;
}

#define STATS_MAX_CACHES 12
/* Registered caches: a slot is claimed by one atomic increment and
 * published by a release store of its cache pointer. No lock (issue 15: a
 * lock held by a registering thread at fork() would hang the child's exit
 * statistics). */
static struct {
    const char *name;
    byval_lru_t *lru;
} stats_caches[STATS_MAX_CACHES];
static unsigned stats_ncaches;

void byval_stats_register_cache(const char *name, byval_lru_t *lru)
{
    unsigned i = __atomic_fetch_add(&stats_ncaches, 1, __ATOMIC_RELAXED);
    if (i >= STATS_MAX_CACHES)
        return;
    stats_caches[i].name = name;
    __atomic_store_n(&stats_caches[i].lru, lru, __ATOMIC_RELEASE);
}

void byval_stats_each_gauge(void (*fn)(void *ctx, const char *name, uint64_t v, const char *total,
                                       const char *doc),
                            void *ctx)
{
    uint64_t held, peak, served, refused;
    size_t published, offered, registered;
    byval_imports_bytes(&held, &peak);
    byval_reg_fd_counts(&served, &refused);
    byval_exports_counts(&published, &offered, &registered);
    fn(ctx, "cache_bytes_held", held, "max",
       "bytes of closed mappings kept now (IPCBYVAL_CACHE_BYTES)");
    fn(ctx, "cache_bytes_peak", peak, "max", "most bytes of closed mappings kept at once");
    fn(ctx, "rescue_served", served, "sum",
       "exported fds served to peers whose own pidfd_getfd the kernel refused");
    fn(ctx, "rescue_denied", refused, "sum",
       "such requests refused (fd never exported, or closed/reused since)");
    /* Gauges of one process now: a job's total is its largest process. */
    fn(ctx, "export_entries", published, "max",
       "registry entries the exports hold now (withdrawn when each export ends)");
    fn(ctx, "export_offers", offered, "max", "fds offered to the socket fallback now");
    fn(ctx, "export_rescuable", registered, "max",
       "fds registered for the pidfd_getfd rescue by the exports now");
    fn(ctx, "rendezvous_served", byval_rendezvous_served_count(), "sum",
       "fds served through the rendezvous directory (importers in other pods/containers)");
}

static void print_gauge(void *ctx, const char *name, uint64_t v, const char *total, const char *doc)
{
    (void)ctx;
    (void)total;
    byval_log(BYVAL_LOG_LVL_STATS, NULL, "%-20s %12llu  %s", name, (unsigned long long)v, doc);
}

void byval_stats_print(void)
{
    /* The "stats" pseudo-level: shown whenever IPCBYVAL_STATS asks. */
#define STATS_PRINT_(name, doc)                                     \
    byval_log(BYVAL_LOG_LVL_STATS, NULL, "%-20s %12llu  %s", #name, \
              (unsigned long long)BYVAL_STAT_SUM(name), doc);
    BYVAL_STATS_LIST(STATS_PRINT_)
#undef STATS_PRINT_
    byval_stats_each_gauge(print_gauge, NULL);
    for (int i = 0; i < STATS_MAX_CACHES; i++) {
        byval_lru_t *lru = __atomic_load_n(&stats_caches[i].lru, __ATOMIC_ACQUIRE);
        if (!lru)
            continue; /* not (yet) published */
        byval_lru_stats_t s;
        size_t mem, full;
        byval_lru_stats(lru, &s);
        byval_lru_memory(lru, &mem, &full);
        uint64_t lookups = s.hits + s.misses;
        byval_log(BYVAL_LOG_LVL_STATS, NULL,
                  "%s cache: hits %llu misses %llu hit-rate %.2f%% evictions %llu removals %llu "
                  "size %zu high-water %zu capacity %zu referenced %zu memory %zu bytes "
                  "(%zu bytes/entry when full)",
                  stats_caches[i].name, (unsigned long long)s.hits, (unsigned long long)s.misses,
                  lookups ? 100.0 * (double)s.hits / (double)lookups : 0.0,
                  (unsigned long long)s.evictions, (unsigned long long)s.removals, s.size,
                  s.high_water, s.capacity, s.referenced, mem, full);
    }
}

void byval_stats_each_cache(void (*fn)(void *ctx, const char *name, byval_lru_t *lru), void *ctx)
{
    for (int i = 0; i < STATS_MAX_CACHES; i++) {
        byval_lru_t *lru = __atomic_load_n(&stats_caches[i].lru, __ATOMIC_ACQUIRE);
        if (lru)
            fn(ctx, stats_caches[i].name, lru);
    }
}
