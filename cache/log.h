/* SPDX-License-Identifier: MIT */
/* log.h - leveled logging: "[ipcbyval <pid> <rank>] <level>: message".
 * Every level reads the same: what happened, in the user's words (debug
 * lines start with what they are about: "open:", "close:", "export:"),
 * never the name of a function inside ipcbyval. */
#ifndef BYVAL_CACHE_LOG_H
#define BYVAL_CACHE_LOG_H

enum byval_log_level {
    BYVAL_LOG_LVL_NONE = 0,
    BYVAL_LOG_LVL_ERROR = 1,
    BYVAL_LOG_LVL_WARN = 2,
    BYVAL_LOG_LVL_INFO = 3,
    BYVAL_LOG_LVL_DEBUG = 4,
    BYVAL_LOG_LVL_STATS = 5, /* the exit summary: printed when asked for */
};

/* Current level (from IPCBYVAL_LOG; default warn). */
extern int byval_log_level;

/* Write one line to stderr (or IPCBYVAL_LOG_FILE), whatever the level.
 * errno is preserved so callers may use %m. func may be NULL (no "func: "). */
void byval_log(int level, const char *func, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The MPI rank from the launchers' environment (OMPI_COMM_WORLD_RANK,
 * PMI_RANK, PMIX_RANK, SLURM_PROCID), "-" when there is none. */
const char *byval_log_rank(void);

/* call, when the level lets lvl through. */
#define BYVAL_LOG_IF_(lvl, call)                           \
    do {                                                   \
        if (__builtin_expect(byval_log_level >= (lvl), 0)) \
            call;                                          \
    } while (0)
#define BYVAL_LOG_(lvl, ...) BYVAL_LOG_IF_(lvl, byval_log((lvl), NULL, __VA_ARGS__))
#define BYVAL_LOG_ERROR(...) BYVAL_LOG_(BYVAL_LOG_LVL_ERROR, __VA_ARGS__)
#define BYVAL_LOG_WARN(...) BYVAL_LOG_(BYVAL_LOG_LVL_WARN, __VA_ARGS__)
#define BYVAL_LOG_INFO(...) BYVAL_LOG_(BYVAL_LOG_LVL_INFO, __VA_ARGS__)
#define BYVAL_LOG_DEBUG(...) BYVAL_LOG_(BYVAL_LOG_LVL_DEBUG, __VA_ARGS__)

/* "api: message" at error level the first time each kind is seen, at debug
 * level after (a loop that keeps failing must not flood the job's output).
 * seen: the caller's flags, nkinds of them; a kind out of range uses the last. */
void byval_log_once_per_kind(int *seen, int nkinds, int kind, const char *api, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* A close of a pointer that is open no more (the API's error is returned and
 * the cached mapping left alone): one warning per process, then debug lines. */
void byval_log_double_close(const char *api, const void *ptr);

/* What served an open. */
enum byval_route {
    BYVAL_ROUTE_HIT = 0,    /* the import cache */
    BYVAL_ROUTE_PIDFD,      /* pidfd_getfd on the exporter */
    BYVAL_ROUTE_SOCKET,     /* the exporter's socket (broker) */
    BYVAL_ROUTE_RENDEZVOUS, /* the rendezvous directory */
    BYVAL_ROUTE_RESCUED,    /* a refused pidfd_getfd served by the broker */
    BYVAL_ROUTE_DRIVER,     /* nothing to fetch: the driver opened it (CUDA legacy) */
};

/* The clock a logged operation starts from: 0 (not read) unless debug lines
 * are on, so a cache hit pays one compare for its log line. */
unsigned long long byval_log_clock(void);
/* Microseconds since t0 (0: the caller did not time it). */
double byval_log_us(unsigned long long t0);
#define BYVAL_LOG_T0() \
    (__builtin_expect(byval_log_level >= BYVAL_LOG_LVL_DEBUG, 0) ? byval_log_clock() : 0)

/* One debug line per open, close, export and withdrawal:
 *   "open: miss via pidfd: exporter pid 4242, 4096 bytes at 0x7f.., 15.1 us"
 * what: "" for memory, else what it was ("event pool "); an export's fd: -1
 * when not known there; withdrawn: 1 for the export's end. */
void byval_log_open_(const char *what, int route, unsigned pid, unsigned long long bytes,
                     const void *ptr, unsigned long long t0);
void byval_log_export_(const char *what, int withdrawn, const void *ptr, int fd);
#define byval_log_open(...) BYVAL_LOG_IF_(BYVAL_LOG_LVL_DEBUG, byval_log_open_(__VA_ARGS__))
#define byval_log_close(what, ptr, outcome, t0) \
    BYVAL_LOG_DEBUG("close: %s%p: %s, %.1f us", what, ptr, outcome, byval_log_us(t0))
#define byval_log_export(...) BYVAL_LOG_IF_(BYVAL_LOG_LVL_DEBUG, byval_log_export_(__VA_ARGS__))

#endif
