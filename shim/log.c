/* SPDX-License-Identifier: MIT */
/* log.c - one line per message, written with a single write(2) so lines
 * from ranks sharing a terminal do not interleave mid-line. */
#include "shim/log.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shim/config.h"

int byval_log_level = BYVAL_LOG_LVL_WARN;

static const char *const level_tag[] = {"", "error", "warn", "info", "debug", "stats"};

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

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

/* Open IPCBYVAL_LOG_FILE (with %p -> pid) once per process; -1 = stderr.
 * Called with log_lock held. */
static int log_fd_locked(void)
{
    static int fd = -2;
    static pid_t fd_pid;
    pid_t pid = getpid();
    if (fd != -2 && fd_pid == pid)
        return fd;
    if (fd >= 0 && fd_pid != pid)
        close(fd); /* a forked child writes to its own file */
    fd = -1;
    fd_pid = pid;
    if (byval_cfg.log_file[0]) {
        char path[320];
        const char *p = strstr(byval_cfg.log_file, "%p");
        if (p)
            snprintf(path, sizeof(path), "%.*s%d%s", (int)(p - byval_cfg.log_file),
                     byval_cfg.log_file, (int)pid, p + 2);
        else
            snprintf(path, sizeof(path), "%s", byval_cfg.log_file);
        fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    }
    return fd;
}

void byval_log(int level, const char *func, const char *fmt, ...)
{
    int saved = errno;
    char buf[1024];
    if (level < BYVAL_LOG_LVL_ERROR || level > BYVAL_LOG_LVL_STATS)
        level = BYVAL_LOG_LVL_ERROR;
    int n = snprintf(buf, sizeof(buf), "[ipcbyval %d %s] %s: %s%s", (int)getpid(),
                     byval_log_rank(), level_tag[level], func ? func : "", func ? ": " : "");
    if (n < 0)
        n = 0;
    if ((size_t)n < sizeof(buf)) {
        va_list ap;
        va_start(ap, fmt);
        errno = saved; /* let the caller's %m see its errno */
        int m = vsnprintf(buf + n, sizeof(buf) - (size_t)n, fmt, ap);
        va_end(ap);
        n = m < 0 ? n : n + m;
    }
    if ((size_t)n >= sizeof(buf) - 1)
        n = sizeof(buf) - 2;
    buf[n++] = '\n';
    /* Log lines are rare (errors, info, exit stats): a lock is fine. */
    pthread_mutex_lock(&log_lock);
    int fd = log_fd_locked();
    ssize_t w = write(fd >= 0 ? fd : STDERR_FILENO, buf, (size_t)n);
    pthread_mutex_unlock(&log_lock);
    (void)w;
    errno = saved;
}

void byval_log_double_close(const char *api, const void *ptr)
{
    static int warned;
    int lvl = __atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED) ? BYVAL_LOG_LVL_DEBUG
                                                                 : BYVAL_LOG_LVL_WARN;
    if (byval_log_level >= lvl)
        byval_log(lvl, NULL, "%s(%p): not open (closed already): the driver's error is returned "
                  "and the cached mapping is left alone", api, ptr);
}
