/* SPDX-License-Identifier: MIT */
/*
 * track.c - imported mappings and their exporters (see track.h).
 *
 * Events come from two places: the registry watcher thread (an exporter
 * freed an export, or its process image is gone) and the exporters table
 * (a kept pidfd says the exporter exited). Both end in
 * byval_imports_remove_if: closed mappings are released at once, open
 * ones at their last close, as natively.
 */
#include "cache/exporters.h"
#include "shim/track.h"

#include <pthread.h>
#include <string.h>

#include "cache/locks.h"
#include "handles/registry_view.h"
#include "shim/config.h"
#include "shim/log.h"
#include "shim/stats.h"

/* Never equal to a serial: what "not listed (freed)" points at. */
static const uint64_t freed_word = 0;

static int of_view(void *ctx, const byval_import_t *m)
{
    const byval_reg_view_t *v = ctx;
    return __atomic_load_n(&m->tracker, __ATOMIC_ACQUIRE) == v &&
        (byval_reg_view_gone(v) || !byval_import_alive(m));
}

static void (*event_hook)(void);

void byval_track_on_event(void (*fn)(void))
{
    __atomic_store_n(&event_hook, fn, __ATOMIC_RELEASE);
}

static void on_registry_event(byval_reg_view_t *v, int gone)
{
    size_t n = byval_imports_remove_if(of_view, v);
    void (*hook)(void) = __atomic_load_n(&event_hook, __ATOMIC_ACQUIRE);
    if (hook)
        hook();
    if (gone) { /* its kept pidfd goes too, without waiting for an open */
        byval_exporter_id_t id;
        byval_reg_view_id(v, &id.pidns, &id.pid, &id.identity);
        byval_exporters_gone(&id);
    }
    BYVAL_STAT_ADD(released_freed, n);
    if (n)
        BYVAL_LOG_DEBUG("exporter %s: released %zu cached mapping%s", gone ? "gone" : "freed", n,
                        n == 1 ? "" : "s");
}

static int of_exporter(void *ctx, const byval_import_t *m)
{
    const byval_exporter_id_t *id = ctx;
    return m->pidns == id->pidns && m->pid == id->pid && m->identity == id->identity;
}

static void exporter_exited(const byval_exporter_id_t *id)
{
    byval_imports_remove_if(of_exporter, (void *)id);
}

static byval_once_t track_once = BYVAL_ONCE_INIT;

static void track_init(void)
{
    byval_imports_set_budget(byval_cfg.cache_bytes);
    byval_reg_on_event(on_registry_event);
    byval_exporters_on_exit(exporter_exited);
}

byval_imports_t *byval_track_cache(byval_imports_ops_t *ops)
{
    byval_once(&track_once, track_init);
    ops->untrack = byval_track_untrack;
    ops->watch = byval_track_watch;
    byval_imports_t *c = byval_imports_create(ops, byval_cfg.cache_size);
    if (c)
        byval_stats_register_cache(ops->name, byval_imports_lru(c));
    return c;
}

void byval_track_untrack(void *tracker)
{
    byval_reg_view_put(tracker);
}

/* Log once per exporter pid that its mappings go untracked. */
static void untracked(uint32_t pid, const char *why)
{
    static uint32_t last_pid;
    if (__atomic_exchange_n(&last_pid, pid, __ATOMIC_RELAXED) != pid)
        BYVAL_LOG_INFO("pid %u: %s: its closed mappings are kept within IPCBYVAL_CACHE_BYTES", pid,
                       why);
}

static void track_in(byval_import_t *m, byval_reg_view_t *v, uint64_t key, uint32_t ino)
{
    uint64_t serial = 0;
    const uint64_t *w = byval_reg_find(v, key, ino, &serial);
    if (w)
        byval_import_track(m, w, serial, v);
    else
        byval_import_track(m, &freed_word, 1, v); /* freed before we looked */
}

/* A closed mapping now waits on its exporter's frees: the watcher must
 * run (registry_view.h, on demand). Without it a free is still seen by
 * the next open of the mapping (its liveness word). */
void byval_track_watch(byval_import_t *m)
{
    char msg[256] = "";
    int rc = m->tracker ? byval_reg_watch_need(msg, sizeof(msg)) : 0;
    if (rc < 0)
        untracked(m->pid, msg);
    else if (rc > 0)
        BYVAL_LOG_DEBUG("release watcher started: a closed mapping of pid %u waits on its "
                        "exporter's frees",
                        m->pid);
}

void byval_track_record_on(byval_import_t *m, const byval_record_t *rec, int pidfd, uint64_t key,
                           uint32_t ino)
{
    char msg[512] = "";
    byval_reg_view_t *v =
        pidfd >= 0 ? byval_reg_attach(rec, byval_cfg.transport, pidfd, msg, sizeof(msg)) : NULL;
    if (!v) {
        untracked(rec->pid, msg[0] ? msg : "no pidfd of it is kept");
        return;
    }
    track_in(m, v, key, ino);
}

int byval_track_listed(const byval_record_t *rec, int pidfd, uint64_t key, uint32_t ino)
{
    char msg[512] = "";
    uint64_t serial = 0;
    byval_reg_view_t *v =
        pidfd >= 0 ? byval_reg_attach(rec, byval_cfg.transport, pidfd, msg, sizeof(msg)) : NULL;
    int listed = v && byval_reg_find(v, key, ino, &serial) != NULL;
    byval_reg_view_put(v);
    return listed;
}

void byval_track_record(byval_import_t *m, const byval_record_t *rec, uint64_t key, uint32_t ino)
{
    byval_exporter_id_t id = {rec->pidns, rec->pid, rec->identity};
    int pidfd = byval_exporters_hold(&id);
    byval_track_record_on(m, rec, pidfd, key, ino);
    byval_exporters_release(&id, pidfd);
}

void byval_track_pid(byval_import_t *m, uint32_t pid, uint64_t key)
{
    char msg[512] = "";
    byval_reg_view_t *v = byval_reg_attach_pid(pid, msg, sizeof(msg));
    if (!v) {
        BYVAL_LOG_DEBUG("legacy handle of pid %u: %s: kept within IPCBYVAL_CACHE_BYTES", pid, msg);
        return;
    }
    track_in(m, v, key, 0);
}
