/* SPDX-License-Identifier: MIT */
/* log.c - one line per message, written with a single write(2) so that lines
 * from ranks sharing a terminal do not interleave mid-line. No lock: one held
 * by another thread at fork() would hang the child's first log line. */
#include "cache/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cache/config.h"

int byval_log_level = BYVAL_LOG_LVL_WARN;

const char *byval_log_rank(void)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK",
                                       "SLURM_PROCID"};
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
        const char *r = getenv(vars[i]);
        if (r && *r)
            return r;
    }
    return "-";
}

/* The log's fd and the pid that opened it, in one word published by a
 * compare-and-swap: (pid << 32) | (fd + 2); 0 before the first line. */
static uint64_t log_state;

/* IPCBYVAL_LOG_FILE (%p -> pid) opened once per process (a forked child
 * opens its own); -1: stderr. */
static int log_fd(void)
{
    pid_t pid = getpid();
    uint64_t st = __atomic_load_n(&log_state, __ATOMIC_ACQUIRE);
    if (st && (pid_t)(st >> 32) == pid)
        return (int)(uint32_t)st - 2;
    char path[320];
    const char *lf = byval_cfg.log_file, *p = strstr(lf, "%p");
    snprintf(path, sizeof(path), p ? "%.*s%d%s" : "%.*s", p ? (int)(p - lf) : (int)sizeof(path), lf,
             (int)pid, p ? p + 2 : "");
    int fd = path[0] ? open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644) : -1;
    int err = errno;
    uint64_t mine = (uint64_t)(uint32_t)pid << 32 | (uint32_t)(fd + 2);
    /* Racing threads: one fd wins, the others close theirs. */
    if (!__atomic_compare_exchange_n(&log_state, &st, mine, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE)) {
        close(fd);
        return (int)(uint32_t)st - 2;
    }
    close((int)(uint32_t)st - 2); /* the parent's, in a forked child (else below 0) */
    /* Said once, on the stderr every later line goes to. */
    if (path[0] && fd < 0)
        byval_log(BYVAL_LOG_LVL_WARN, NULL,
                  "IPCBYVAL_LOG_FILE: cannot open %s: %s; logging to stderr", path, strerror(err));
    return fd;
}

void byval_log(int level, const char *func, const char *fmt, ...)
{
    static const char *const level_tag[] = {"", "error", "warn", "info", "debug", "stats"};
    int saved = errno;
    char buf[1024];
    if (level < BYVAL_LOG_LVL_ERROR || level > BYVAL_LOG_LVL_STATS)
        level = BYVAL_LOG_LVL_ERROR;
    int n = snprintf(buf, sizeof(buf), "[ipcbyval %d %s] %s: %s%s", (int)getpid(), byval_log_rank(),
                     level_tag[level], func ? func : "", func ? ": " : "");
    if (n < 0)
        n = 0;
    if ((size_t)n < sizeof(buf)) {
        va_list ap;
        va_start(ap, fmt);
        errno = saved; /* the caller's %m sees its errno */
        int m = vsnprintf(buf + n, sizeof(buf) - (size_t)n, fmt, ap);
        va_end(ap);
        n = m < 0 ? n : n + m;
    }
    if ((size_t)n >= sizeof(buf) - 1)
        n = sizeof(buf) - 2;
    buf[n++] = '\n';
    int fd = log_fd();
    ssize_t w = write(fd >= 0 ? fd : STDERR_FILENO, buf, (size_t)n);
    (void)w;
    errno = saved;
}

/* lvl the first time *seen is set, debug after: a loop that keeps failing
 * must not flood the job's output. */
static int first_at(int *seen, int lvl)
{
    return __atomic_exchange_n(seen, 1, __ATOMIC_RELAXED) ? BYVAL_LOG_LVL_DEBUG : lvl;
}

void byval_log_double_close(const char *api, const void *ptr)
{
    static int warned;
    int lvl = first_at(&warned, BYVAL_LOG_LVL_WARN);
    BYVAL_LOG_(lvl,
               "%s(%p): not open (closed already): the driver's error is returned "
               "and the cached mapping is left alone",
               api, ptr);
}

void byval_log_once_per_kind(int *seen, int nkinds, int kind, const char *api, const char *fmt, ...)
{
    char msg[600];
    va_list ap;
    int lvl = first_at(&seen[kind >= 0 && kind < nkinds ? kind : nkinds - 1], BYVAL_LOG_LVL_ERROR);
    if (byval_log_level < lvl)
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    byval_log(lvl, NULL, "%s: %s", api, msg);
}

unsigned long long byval_log_clock(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

double byval_log_us(unsigned long long t0)
{
    return t0 ? (double)(byval_log_clock() - t0) / 1000.0 : 0.0;
}

void byval_log_open_(const char *what, int route, unsigned pid, unsigned long long bytes,
                     const void *ptr, unsigned long long t0)
{
    static const char *const served[] = {
        "hit",          "miss via pidfd",           "miss via socket", "miss via rendezvous",
        "miss rescued", "miss opened by the driver"};
    int r = route >= 0 && route < (int)(sizeof(served) / sizeof(served[0])) ? route : 0;
    char who[32] = "exporter not named"; /* CUDA legacy: the driver's bytes, not read */
    if (pid)
        snprintf(who, sizeof(who), "exporter pid %u", pid);
    byval_log(BYVAL_LOG_LVL_DEBUG, NULL, "open: %s%s: %s, %llu bytes at %p, %.1f us", what,
              served[r], who, bytes, ptr, byval_log_us(t0));
}

void byval_log_export_(const char *what, int withdrawn, const void *ptr, int fd)
{
    char f[24] = "";
    if (fd >= 0)
        snprintf(f, sizeof(f), " (fd %d)", fd);
    byval_log(BYVAL_LOG_LVL_DEBUG, NULL,
              withdrawn ? "export withdrawn: %s%p%s: freed; importers release their closed mappings"
                        : "export: %s%p by value%s",
              what, ptr, f);
}
