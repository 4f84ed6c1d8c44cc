/* SPDX-License-Identifier: MIT */
/* log.h - leveled logging: "[ipcbyval <pid> <rank>] <level>: message"
 * ("<level>: <function>: message" for debug lines). */
#ifndef BYVAL_SHIM_LOG_H
#define BYVAL_SHIM_LOG_H

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

/* Write one line to stderr (or IPCBYVAL_LOG_FILE). errno is preserved so
 * callers may use %m. func may be NULL (no "func: " part). */
void byval_log(int level, const char *func, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The MPI rank from the launchers' environment (OMPI_COMM_WORLD_RANK,
 * PMI_RANK, PMIX_RANK, SLURM_PROCID), "-" when there is none. */
const char *byval_log_rank(void);

/* Users read error, warn and info lines: they say what happened, not
 * where in ipcbyval; debug lines name the function too. */
#define BYVAL_LOG_(lvl, ...)                                                      \
    do {                                                                          \
        if (__builtin_expect(byval_log_level >= (lvl), 0))                        \
            byval_log((lvl), (lvl) >= BYVAL_LOG_LVL_DEBUG ? __func__ : NULL,      \
                      __VA_ARGS__);                                               \
    } while (0)
#define BYVAL_LOG_ERROR(...) BYVAL_LOG_(BYVAL_LOG_LVL_ERROR, __VA_ARGS__)
#define BYVAL_LOG_WARN(...) BYVAL_LOG_(BYVAL_LOG_LVL_WARN, __VA_ARGS__)
#define BYVAL_LOG_INFO(...) BYVAL_LOG_(BYVAL_LOG_LVL_INFO, __VA_ARGS__)
#define BYVAL_LOG_DEBUG(...) BYVAL_LOG_(BYVAL_LOG_LVL_DEBUG, __VA_ARGS__)

/* "api: message" at error level the first time each kind is seen, at
 * debug level after (a loop that keeps failing must not flood the job's
 * output). seen: the caller's flags, nkinds of them; a kind out of range
 * uses the last. */
void byval_log_once_per_kind(int *seen, int nkinds, int kind, const char *api, const char *fmt,
                             ...) __attribute__((format(printf, 5, 6)));

/* A close of a pointer that is open no more (a double close): the API's
 * error is returned and the cached mapping left alone. One warning per
 * process, then debug lines: a loop must not flood the job's output. */
void byval_log_double_close(const char *api, const void *ptr);

#endif
