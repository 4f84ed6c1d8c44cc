/* SPDX-License-Identifier: MIT */
/*
 * stats_file.c - one process's statistics as a file, for a job-wide table
 * (IPCBYVAL_STATS_DIR; `ipcbyval-run --stats` and `--report DIR` merge the
 * files of every rank).
 *
 * The file is text, one field a line, every field carrying its own name,
 * how a job total is formed and its meaning:
 *
 *     @host<TAB>node17                 attributes of the process
 *     @rank<TAB>3
 *     exports<TAB>4<TAB>sum<TAB>handles exported by value
 *     ze_import.memory_bytes<TAB>99456<TAB>sum<TAB>...
 *
 * Counters come from BYVAL_STATS_LIST and caches from the registered list,
 * so a field added there appears in the file, and in the merged table,
 * without a change here or in the merger.
 */
#include "shim/stats.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache/imports.h"
#include "shim/log.h"

/* ---- the per-process file -------------------------------------------------- */

typedef struct stats_buf {
    char *p;
    size_t len, cap;
} stats_buf_t;

__attribute__((format(printf, 2, 3))) static void put(stats_buf_t *b, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0)
            return;
        if (b->p && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = (b->cap ? b->cap * 2 : 4096) + (size_t)n;
        char *p = realloc(b->p, cap);
        if (!p)
            return;
        b->p = p;
        b->cap = cap;
    }
}

static void field(stats_buf_t *b, const char *prefix, const char *name, unsigned long long v,
                  const char *total, const char *doc)
{
    put(b, "%s%s%s\t%llu\t%s\t%s\n", prefix ? prefix : "", prefix ? "." : "", name, v, total, doc);
}

static void gauge_field(void *ctx, const char *name, uint64_t v, const char *total,
                        const char *doc)
{
    field(ctx, NULL, name, v, total, doc);
}

static void cache_fields(void *ctx, const char *name, byval_lru_t *lru)
{
    stats_buf_t *b = ctx;
    char prefix[64];
    size_t i = 0;
    for (; name[i] && i + 1 < sizeof(prefix); i++) /* "ze import" -> ze_import */
        prefix[i] = name[i] == ' ' ? '_' : name[i];
    prefix[i] = '\0';
    byval_lru_stats_t s;
    size_t now, full;
    byval_lru_stats(lru, &s);
    byval_lru_memory(lru, &now, &full);
    field(b, prefix, "hits", s.hits, "sum", "cache hits");
    field(b, prefix, "misses", s.misses, "sum", "cache misses");
    field(b, prefix, "evictions", s.evictions, "sum", "entries evicted for room");
    field(b, prefix, "removals", s.removals, "sum", "entries removed (free, exit, context)");
    /* Per-process gauges: a job's sum of them means nothing (every rank
     * has its own capacity); the largest process is what to size for. */
    field(b, prefix, "entries", s.size, "max", "entries held at exit");
    field(b, prefix, "high_water", s.high_water, "max", "most entries held at once");
    field(b, prefix, "capacity", s.capacity, "max", "entries it may hold");
    field(b, prefix, "memory_bytes", now, "max", "memory of the cache's structures at exit");
    field(b, prefix, "bytes_per_entry_full", full, "max",
          "memory per entry when full at capacity");
}

int byval_stats_write_file(const char *dir)
{
    char host[256] = "localhost", comm[64] = "?", path[4096], tmp[4096];
    gethostname(host, sizeof(host) - 1);
    host[strcspn(host, ".")] = '\0';
    FILE *f = fopen("/proc/self/comm", "re");
    if (f) {
        if (fgets(comm, sizeof(comm), f))
            comm[strcspn(comm, "\n")] = '\0';
        fclose(f);
    }
    pid_t pid = getpid();
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        BYVAL_LOG_WARN("IPCBYVAL_STATS_DIR: cannot create %s: %m", dir);
        return -1;
    }
    snprintf(path, sizeof(path), "%s/%s.%d.stats", dir, host, (int)pid);
    snprintf(tmp, sizeof(tmp), "%s/.%s.%d.tmp", dir, host, (int)pid);

    stats_buf_t b = {0};
    put(&b, "# ipcbyval %s: statistics of one process; ipcbyval-run --report %s merges them\n",
        BYVAL_VERSION, dir);
    put(&b, "# name<TAB>value<TAB>job total (sum or max)<TAB>meaning\n");
    put(&b, "@host\t%s\n@pid\t%d\n@rank\t%s\n@program\t%s\n", host, (int)pid, byval_log_rank(), comm);
#define STATS_FIELD_(name, doc) field(&b, NULL, #name, BYVAL_STAT_SUM(name), "sum", doc);
    BYVAL_STATS_LIST(STATS_FIELD_)
#undef STATS_FIELD_
    byval_stats_each_gauge(gauge_field, &b);
    byval_stats_each_cache(cache_fields, &b);
    if (!b.p)
        return -1;

    /* Whole or not at all: a merger never reads half a file. */
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int ok = fd >= 0 && write(fd, b.p, b.len) == (ssize_t)b.len;
    if (fd >= 0 && close(fd) != 0)
        ok = 0;
    free(b.p);
    if (!ok || rename(tmp, path) != 0) {
        BYVAL_LOG_WARN("IPCBYVAL_STATS_DIR: cannot write %s: %m", path);
        unlink(tmp);
        return -1;
    }
    return 0;
}
