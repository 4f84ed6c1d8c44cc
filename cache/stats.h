/* SPDX-License-Identifier: MIT */
/* stats.h - process-wide counters, printed at exit with IPCBYVAL_STATS=1. */
#ifndef BYVAL_CACHE_STATS_H
#define BYVAL_CACHE_STATS_H

#include <stddef.h>
#include <stdint.h>

#include "cache/log.h"
#include "cache/lru.h"
#include "cache/stripe.h"

#define BYVAL_STATS_LIST(X)                                                                        \
    X(exports, "handles exported by value")                                                        \
    X(pool_exports, "event-pool handles exported by value (short record)")                         \
    X(export_hits, "export-cache hits")                                                            \
    X(export_passthrough, "exports passed through (not ours to change)")                           \
    X(opens, "by-value handles opened")                                                            \
    X(pool_opens, "by-value event-pool handles opened")                                            \
    X(open_hits, "import-cache hits")                                                              \
    X(open_misses, "import-cache misses (the exporter's fd fetched)")                              \
    X(open_kept_pidfd, "misses of an exporter met before, pidfd_getfd on its kept pidfd")          \
    X(open_kept_socket, "misses of an exporter met before, served by its socket")                  \
    X(open_passthrough, "opens passed through to the driver unchanged")                            \
    X(open_errors, "opens refused")                                                                \
    X(closes, "closes of by-value mappings")                                                       \
    X(frees, "frees that dropped an export entry")                                                 \
    X(exporter_exits, "exporters seen exiting")                                                    \
    X(released_freed, "cached mappings released because the exporter freed them")                  \
    X(double_closes, "closes of a pointer not open (the API's error returned)")                    \
    X(via_pidfd, "exporters reached with pidfd_getfd (first contact)")                             \
    X(via_socket, "exporters reached through their socket (first contact)")                        \
    X(via_rendezvous, "exporters reached through the rendezvous directory (other pod/container)")  \
    X(open_rendezvous, "misses whose fd came through the rendezvous directory (every one)")        \
    X(rescued, "other libraries' pidfd_getfd the kernel refused, served by the exporter's broker") \
    X(rescue_failed, "refused pidfd_getfd no broker served (the kernel's error returned)")         \
    X(miss_fetch_ns, "ns in misses getting the exporter's fds (pidfd/socket, checks)")             \
    X(miss_import_ns, "ns in misses in the driver's import")                                       \
    X(miss_map_ns, "ns in misses mapping (CUDA VMM: reserve, map, access)")

/* One copy per thread stripe (cache/stripe.h), summed when printed: a
 * shared counter bumped with a lock prefix on every open and close cost
 * ~15 ns a call and a cache line passed between every CPU that opens. */
typedef struct byval_stats {
#define BYVAL_STATS_FIELD_(name, doc) uint64_t name;
    BYVAL_STATS_LIST(BYVAL_STATS_FIELD_)
#undef BYVAL_STATS_FIELD_
} __attribute__((aligned(128))) byval_stats_t;

extern byval_stats_t byval_stats[BYVAL_STRIPES];

#define BYVAL_STAT_INC(name) byval_stripe_bump(&byval_stats[byval_stripe()].name)
#define BYVAL_STAT_ADD(name, v) byval_stripe_add(&byval_stats[byval_stripe()].name, (v))

/* Monotonic ns, for the miss_*_ns split of a cold open (misses only). */
#define byval_stats_now_ns() ((uint64_t)byval_log_clock())

/* Include a cache in the exit summary (name must be a static string). */
void byval_stats_register_cache(const char *name, byval_lru_t *lru);

/* The summary in the log (IPCBYVAL_STATS=1): every counter and cache. */
void byval_stats_print(void);

/* The same, by name, into DIR/HOST.PID.stats (IPCBYVAL_STATS_DIR), which
 * ipcbyval-run merges into one table for the job. 0 or -1 (logged). */
int byval_stats_write_file(const char *dir);

#endif
