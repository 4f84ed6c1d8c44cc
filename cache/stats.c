/* SPDX-License-Identifier: MIT */
/*
 * stats.c - the counters, and at exit their summary in the log
 * (IPCBYVAL_STATS=1) or a file per process (IPCBYVAL_STATS_DIR) that
 * `ipcbyval-run --report` merges into one table for the job. The file is
 * text, one field a line, each with its name, value, how a job totals it
 * and its meaning ("exports<TAB>4<TAB>sum<TAB>handles exported by value";
 * attributes as "@rank<TAB>3"), so that a counter added to
 * BYVAL_STATS_LIST appears in the table with no change here or in the merger.
 */
#include "cache/stats.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache/exports.h"
#include "cache/imports.h"
#include "handles/registry.h"
#include "handles/rendezvous.h" /* rendezvous_served */

byval_stats_t byval_stats[BYVAL_STRIPES];

/* The sum over the stripes of the counter at offset. */
static uint64_t stats_sum(size_t offset)
{
    uint64_t sum = 0;
    for (int i = 0; i < BYVAL_STRIPES; i++)
        sum += __atomic_load_n((uint64_t *)((char *)&byval_stats[i] + offset), __ATOMIC_RELAXED);
    return sum;
}

/* Registered caches: a slot claimed by one atomic increment, published by a
 * release store of its cache (no lock: one held by a registering thread at
 * fork() would hang the child's exit statistics). */
#define STATS_MAX_CACHES 12
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

/* A cache's field: "ze_import.hits" */
#define cache_field(f, p, name, v, total, doc) \
    fprintf(f, "%s.%s\t%llu\t%s\t%s\n", p, name, (unsigned long long)(v), total, doc)

/* Every published cache: a log line, or its fields in the file f under its
 * name ("ze import" -> ze_import.hits). A job's sum of the per-process sizes
 * means nothing: the largest process is what to size for ("max"). */
static void stats_caches_each(FILE *f)
{
    byval_lru_stats_t s;
    size_t now, full;
    char p[64];
    for (int i = 0; i < STATS_MAX_CACHES; i++) {
        byval_lru_t *lru = __atomic_load_n(&stats_caches[i].lru, __ATOMIC_ACQUIRE);
        if (!lru)
            continue;
        byval_lru_stats(lru, &s);
        byval_lru_memory(lru, &now, &full);
        if (!f) {
            byval_log(
                BYVAL_LOG_LVL_STATS, NULL,
                "%s cache: hits %llu misses %llu hit-rate %.2f%% evictions %llu removals "
                "%llu size %zu high-water %zu capacity %zu referenced %zu memory %zu bytes "
                "(%zu bytes/entry when full)",
                stats_caches[i].name, (unsigned long long)s.hits, (unsigned long long)s.misses,
                s.hits + s.misses ? 100.0 * (double)s.hits / (double)(s.hits + s.misses) : 0.0,
                (unsigned long long)s.evictions, (unsigned long long)s.removals, s.size,
                s.high_water, s.capacity, s.referenced, now, full);
            continue;
        }
        size_t n = 0;
        for (const char *c = stats_caches[i].name; *c && n + 1 < sizeof(p); c++)
            p[n++] = *c == ' ' ? '_' : *c;
        p[n] = '\0';
        cache_field(f, p, "hits", s.hits, "sum", "cache hits");
        cache_field(f, p, "misses", s.misses, "sum", "cache misses");
        cache_field(f, p, "evictions", s.evictions, "sum", "entries evicted for room");
        cache_field(f, p, "removals", s.removals, "sum", "entries removed (free, exit, context)");
        cache_field(f, p, "entries", s.size, "max", "entries held at exit");
        cache_field(f, p, "high_water", s.high_water, "max", "most entries held at once");
        cache_field(f, p, "capacity", s.capacity, "max", "entries it may hold");
        cache_field(f, p, "memory_bytes", now, "max", "memory of the cache's structures at exit");
        cache_field(f, p, "bytes_per_entry_full", full, "max",
                    "memory per entry when full at capacity");
    }
}

/* One field: a line of the file f, or of the log when f is NULL. */
static void stats_line(FILE *f, const char *name, uint64_t v, const char *total, const char *doc)
{
    if (f)
        fprintf(f, "%s\t%llu\t%s\t%s\n", name, (unsigned long long)v, total, doc);
    else
        byval_log(BYVAL_LOG_LVL_STATS, NULL, "%-20s %12llu  %s", name, (unsigned long long)v, doc);
}

/* Every counter, then the values read from their owners (a gauge of one
 * process now: a job's total is its largest process, "max"). */
static void stats_each(FILE *f)
{
    uint64_t held, peak, served, refused;
    size_t published, offered, registered;
#define STATS_EACH_(name, doc) \
    stats_line(f, #name, stats_sum(offsetof(byval_stats_t, name)), "sum", doc);
    BYVAL_STATS_LIST(STATS_EACH_)
#undef STATS_EACH_
    byval_imports_bytes(&held, &peak);
    byval_reg_fd_counts(&served, &refused);
    byval_exports_counts(&published, &offered, &registered);
    stats_line(f, "cache_bytes_held", held, "max",
               "bytes of closed mappings kept now (IPCBYVAL_CACHE_BYTES)");
    stats_line(f, "cache_bytes_peak", peak, "max", "most bytes of closed mappings kept at once");
    stats_line(f, "rescue_served", served, "sum",
               "exported fds served to peers whose own pidfd_getfd the kernel refused");
    stats_line(f, "rescue_denied", refused, "sum",
               "such requests refused (fd never exported, or closed/reused since)");
    stats_line(f, "export_entries", published, "max",
               "registry entries the exports hold now (withdrawn when each export ends)");
    stats_line(f, "export_offers", offered, "max", "fds offered to the socket fallback now");
    stats_line(f, "export_rescuable", registered, "max",
               "fds registered for the pidfd_getfd rescue by the exports now");
    stats_line(f, "rendezvous_served", byval_rendezvous_served_count(), "sum",
               "fds served through the rendezvous directory (importers in other pods/containers)");
    stats_caches_each(f);
}

void byval_stats_print(void)
{
    stats_each(NULL);
}

/* The folder as a directory fd, or -1 after one warning: made if missing;
 * never a symlink (as its last component), owned by us and not writable by
 * others, so nobody else can plant a name we then write through. */
static int stats_dir_open(const char *dir)
{
    struct stat st;
    int dfd = -1;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        BYVAL_LOG_WARN("IPCBYVAL_STATS_DIR: cannot create %s: %m", dir);
    else if ((dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0 &&
             (errno == ELOOP || errno == ENOTDIR))
        BYVAL_LOG_WARN("IPCBYVAL_STATS_DIR %s is a symlink or not a directory: not used", dir);
    else if (dfd < 0)
        BYVAL_LOG_WARN("IPCBYVAL_STATS_DIR: cannot open %s: %m", dir);
    else if (fstat(dfd, &st) != 0)
        BYVAL_LOG_WARN("IPCBYVAL_STATS_DIR: fstat %s: %m", dir);
    else if (st.st_uid != geteuid())
        BYVAL_LOG_WARN("IPCBYVAL_STATS_DIR %s is owned by uid %u, not by us (uid %u): not used",
                       dir, (unsigned)st.st_uid, (unsigned)geteuid());
    else if (st.st_mode & S_IWOTH)
        BYVAL_LOG_WARN("IPCBYVAL_STATS_DIR %s is writable by others (mode %o): not used", dir,
                       (unsigned)(st.st_mode & 07777));
    else
        return dfd;
    close(dfd);
    return -1;
}

int byval_stats_write_file(const char *dir)
{
    char host[256] = "localhost", comm[64] = "?", name[320], tmp[320], *buf = NULL;
    size_t len = 0;
    gethostname(host, sizeof(host) - 1);
    host[strcspn(host, ".")] = '\0';
    FILE *f = fopen("/proc/self/comm", "re");
    if (f) {
        if (fgets(comm, sizeof(comm), f))
            comm[strcspn(comm, "\n")] = '\0';
        fclose(f);
    }
    pid_t pid = getpid();
    snprintf(name, sizeof(name), "%s.%d.stats", host, (int)pid);
    snprintf(tmp, sizeof(tmp), ".%s.%d.tmp", host, (int)pid);
    int dfd = stats_dir_open(dir);
    if (dfd < 0 || !(f = open_memstream(&buf, &len))) {
        close(dfd);
        return -1;
    }
    fprintf(f,
            "# ipcbyval %s: statistics of one process; ipcbyval-run --report %s merges them\n"
            "# name<TAB>value<TAB>job total (sum or max)<TAB>meaning\n",
            BYVAL_VERSION, dir);
    fprintf(f, "@host\t%s\n@pid\t%d\n@rank\t%s\n@program\t%s\n", host, (int)pid, byval_log_rank(),
            comm);
    stats_each(f);
    int ok = fclose(f) == 0;

    /* Whole or not at all: a merger never reads half a file. A new file only
     * (a name already there is a stale file of an earlier process with our
     * pid, removed once, never opened). */
    const int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
    int fd = ok ? openat(dfd, tmp, flags, 0644) : -1;
    if (fd < 0 && ok && errno == EEXIST && unlinkat(dfd, tmp, 0) == 0)
        fd = openat(dfd, tmp, flags, 0644);
    ok = fd >= 0 && write(fd, buf, len) == (ssize_t)len;
    if (fd >= 0 && close(fd) != 0)
        ok = 0;
    free(buf);
    if (!ok || renameat(dfd, tmp, dfd, name) != 0) {
        ok = 0;
        BYVAL_LOG_WARN("IPCBYVAL_STATS_DIR: cannot write %s/%s: %m", dir, name);
        if (fd >= 0)
            unlinkat(dfd, tmp, 0);
    }
    close(dfd);
    return ok ? 0 : -1;
}
