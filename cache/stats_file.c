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
#include "cache/stats.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache/imports.h"
#include "cache/log.h"

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

static void gauge_field(void *ctx, const char *name, uint64_t v, const char *total, const char *doc)
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
    field(b, prefix, "bytes_per_entry_full", full, "max", "memory per entry when full at capacity");
}

/* The folder as a directory fd, or -1 after one warning: made if missing;
 * never a symlink (as its last component), owned by us and not writable
 * by others, so nobody else can plant a name we then write through. */
static int stats_dir_open(const char *dir)
{
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        BYVAL_LOG_WARN("IPCBYVAL_STATS_DIR: cannot create %s: %m", dir);
        return -1;
    }
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0) {
        if (errno == ELOOP || errno == ENOTDIR)
            BYVAL_LOG_WARN("IPCBYVAL_STATS_DIR %s is a symlink or not a directory: not used", dir);
        else
            BYVAL_LOG_WARN("IPCBYVAL_STATS_DIR: cannot open %s: %m", dir);
        return -1;
    }
    struct stat st;
    if (fstat(dfd, &st) != 0) {
        BYVAL_LOG_WARN("IPCBYVAL_STATS_DIR: fstat %s: %m", dir);
    } else if (st.st_uid != geteuid()) {
        BYVAL_LOG_WARN("IPCBYVAL_STATS_DIR %s is owned by uid %u, not by us (uid %u): not used",
                       dir, (unsigned)st.st_uid, (unsigned)geteuid());
    } else if (st.st_mode & S_IWOTH) {
        BYVAL_LOG_WARN("IPCBYVAL_STATS_DIR %s is writable by others (mode %o): not used", dir,
                       (unsigned)(st.st_mode & 07777));
    } else {
        return dfd;
    }
    close(dfd);
    return -1;
}

int byval_stats_write_file(const char *dir)
{
    char host[256] = "localhost", comm[64] = "?", name[320], tmp[320];
    gethostname(host, sizeof(host) - 1);
    host[strcspn(host, ".")] = '\0';
    FILE *f = fopen("/proc/self/comm", "re");
    if (f) {
        if (fgets(comm, sizeof(comm), f))
            comm[strcspn(comm, "\n")] = '\0';
        fclose(f);
    }
    pid_t pid = getpid();
    int dfd = stats_dir_open(dir);
    if (dfd < 0)
        return -1;
    snprintf(name, sizeof(name), "%s.%d.stats", host, (int)pid);
    snprintf(tmp, sizeof(tmp), ".%s.%d.tmp", host, (int)pid);

    stats_buf_t b = {0};
    put(&b, "# ipcbyval %s: statistics of one process; ipcbyval-run --report %s merges them\n",
        BYVAL_VERSION, dir);
    put(&b, "# name<TAB>value<TAB>job total (sum or max)<TAB>meaning\n");
    put(&b, "@host\t%s\n@pid\t%d\n@rank\t%s\n@program\t%s\n", host, (int)pid, byval_log_rank(),
        comm);
#define STATS_FIELD_(name, doc) field(&b, NULL, #name, BYVAL_STAT_SUM(name), "sum", doc);
    BYVAL_STATS_LIST(STATS_FIELD_)
#undef STATS_FIELD_
    byval_stats_each_gauge(gauge_field, &b);
    byval_stats_each_cache(cache_fields, &b);
    if (!b.p) {
        close(dfd);
        return -1;
    }

    /* Whole or not at all: a merger never reads half a file. A new file
     * only (a name already there is a stale file of an earlier process
     * with our pid, removed once, never opened). */
    const int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
    int fd = openat(dfd, tmp, flags, 0644);
    if (fd < 0 && errno == EEXIST && unlinkat(dfd, tmp, 0) == 0)
        fd = openat(dfd, tmp, flags, 0644);
    int ok = fd >= 0 && write(fd, b.p, b.len) == (ssize_t)b.len;
    if (fd >= 0 && close(fd) != 0)
        ok = 0;
    free(b.p);
    if (!ok || renameat(dfd, tmp, dfd, name) != 0) {
        BYVAL_LOG_WARN("IPCBYVAL_STATS_DIR: cannot write %s/%s: %m", dir, name);
        if (fd >= 0)
            unlinkat(dfd, tmp, 0);
        close(dfd);
        return -1;
    }
    close(dfd);
    return 0;
}
