/* SPDX-License-Identifier: MIT */
/* exporters.c - exporter exit detection with pidfds, no helper thread. */
#include "shim/exporters.h"

#include <pthread.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "handles/resolve.h"
#include "shim/log.h"
#include "shim/stats.h"

/* An importer talks to its peers on one node: a few hundred at most. */
#define EXPORTERS_MAX 1024
#define EXPORTERS_HANDLERS 4
#define EXPORTERS_POLL_NS 1000000LL

static struct {
    pthread_mutex_t lock;
    unsigned count;
    byval_exporter_id_t id[EXPORTERS_MAX];
    int pidfd[EXPORTERS_MAX];
    byval_exporter_exit_fn handlers[EXPORTERS_HANDLERS];
    int64_t last_poll_ns;
    int atfork_done;
} ex = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void exporters_atfork_child(void)
{
    /* The child did not import anything: forget the parent's exporters.
     * Closing the inherited pidfds touches no driver state. */
    pthread_mutex_init(&ex.lock, NULL);
    for (unsigned i = 0; i < ex.count; i++)
        close(ex.pidfd[i]);
    __atomic_store_n(&ex.count, 0, __ATOMIC_RELAXED);
}

void byval_exporters_on_exit(byval_exporter_exit_fn fn)
{
    pthread_mutex_lock(&ex.lock);
    if (!ex.atfork_done) {
        pthread_atfork(NULL, NULL, exporters_atfork_child);
        ex.atfork_done = 1;
    }
    for (int i = 0; i < EXPORTERS_HANDLERS; i++) {
        if (ex.handlers[i] == fn)
            break;
        if (!ex.handlers[i]) {
            ex.handlers[i] = fn;
            break;
        }
    }
    pthread_mutex_unlock(&ex.lock);
}

void byval_exporters_track(const byval_exporter_id_t *id, int pidfd)
{
    if (pidfd < 0)
        return;
    pthread_mutex_lock(&ex.lock);
    for (unsigned i = 0; i < ex.count; i++) {
        if (memcmp(&ex.id[i], id, sizeof(*id)) == 0) {
            pthread_mutex_unlock(&ex.lock);
            close(pidfd);
            return;
        }
    }
    if (ex.count < EXPORTERS_MAX) {
        ex.id[ex.count] = *id;
        ex.pidfd[ex.count] = pidfd;
        __atomic_store_n(&ex.count, ex.count + 1, __ATOMIC_RELAXED);
        pidfd = -1;
    }
    pthread_mutex_unlock(&ex.lock);
    if (pidfd >= 0) {
        BYVAL_LOG_DEBUG("tracking %d exporters already; exit of pid %u not watched",
                        EXPORTERS_MAX, id->pid);
        close(pidfd);
    }
}

unsigned byval_exporters_count(void)
{
    return __atomic_load_n(&ex.count, __ATOMIC_RELAXED);
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

void byval_exporters_poll(void)
{
    if (__atomic_load_n(&ex.count, __ATOMIC_RELAXED) == 0)
        return;
    int64_t now = now_ns();
    if (now - __atomic_load_n(&ex.last_poll_ns, __ATOMIC_RELAXED) < EXPORTERS_POLL_NS)
        return;
    byval_exporter_id_t gone[64];
    unsigned ngone = 0;
    byval_exporter_exit_fn handlers[EXPORTERS_HANDLERS];
    pthread_mutex_lock(&ex.lock);
    __atomic_store_n(&ex.last_poll_ns, now, __ATOMIC_RELAXED);
    for (unsigned i = 0; i < ex.count && ngone < 64;) {
        if (byval_pidfd_exited(ex.pidfd[i])) {
            gone[ngone++] = ex.id[i];
            close(ex.pidfd[i]);
            __atomic_store_n(&ex.count, ex.count - 1, __ATOMIC_RELAXED);
            ex.id[i] = ex.id[ex.count];
            ex.pidfd[i] = ex.pidfd[ex.count];
        } else {
            i++;
        }
    }
    memcpy(handlers, ex.handlers, sizeof(handlers));
    pthread_mutex_unlock(&ex.lock);
    for (unsigned g = 0; g < ngone; g++) {
        BYVAL_STAT_INC(exporter_exits);
        BYVAL_LOG_INFO("exporter pid %u exited: releasing its cached mappings", gone[g].pid);
        for (int h = 0; h < EXPORTERS_HANDLERS && handlers[h]; h++)
            handlers[h](&gone[g]);
    }
}
