/* SPDX-License-Identifier: MIT */
/*
 * imports_flow.c - the one open and close flow of every import backend
 * (imports.h), and what ties imported mappings to their exporters: the
 * liveness word in the exporter's registry (handles/registry_view.h),
 * the registry watcher's and the exporters table's events, the budgets.
 */
#include <stdarg.h>

#include "cache/config.h"
#include "cache/exporters.h"
#include "cache/imports.h"
#include "cache/locks.h"
#include "cache/log.h"
#include "cache/stats.h"
#include "cache/transport.h"
#include "handles/registry_view.h"

static void track_init(void);
static void untrack(void *tracker);
static byval_once_t track_once = BYVAL_ONCE_INIT;
static void (*event_hook)(void *); /* one backend's on_event */

#define NSEEN (int)(sizeof(((byval_backend_import_t *)0)->seen) / sizeof(int))

int byval_import_refuse(byval_backend_import_t *b, const char *api, int st, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    byval_log_once_per_kind(b->seen, NSEEN, st, api, "%s", msg);
    return st == BYVAL_E_NOFD ? b->nomem : b->invalid;
}

int byval_import_fetch(byval_backend_import_t *b, const char *api, const byval_record_t *rec,
                       int *fd_p, int *pidfd_p)
{
    char msg[512];
    byval_self_t self;
    int pidfd = -1;
    byval_once(&track_once, track_init);
    if (byval_self_get(&self) != 0)
        return b->invalid;
    uint64_t t0 = byval_stats_now_ns();
    byval_status_t st = byval_fetch_fd(rec, &self, fd_p, &pidfd, msg, sizeof(msg));
    BYVAL_STAT_ADD(miss_fetch_ns, byval_stats_now_ns() - t0);
    if (pidfd_p && st == BYVAL_OK)
        *pidfd_p = pidfd;
    else
        byval_fetch_done(rec, pidfd);
    return st == BYVAL_OK ? 0 : byval_import_refuse(b, api, st, "%s", msg);
}

/* b->cache, set once by cache_make (racing first opens): read atomically. */
#define CACHE(b) __atomic_load_n(&(b)->cache, __ATOMIC_RELAXED)
#define SERVES(b, m, req) ((b)->serves ? (b)->serves(m, req) : (m)->addr)

/* Open p of m: 0, or the API's code (the reference dropped). */
static inline __attribute__((always_inline)) int hand_out(byval_backend_import_t *b,
                                                          byval_import_t *m, byval_lru_ref_t ref,
                                                          uintptr_t p, uintptr_t *ptr_p)
{
    if (!p) {
        byval_imports_unget(CACHE(b), ref);
        return b->invalid;
    }
    if (byval_imports_open(CACHE(b), m, ref, p) < 0)
        return b->nomem;
    *ptr_p = p;
    return 0;
}

/* b's cache, made by the first open (a racing thread's is dropped). */
static __attribute__((noinline)) byval_imports_t *cache_make(byval_backend_import_t *b)
{
    byval_imports_t *c, *none = NULL;
    byval_once(&track_once, track_init);
    if (b->on_event)
        __atomic_store_n(&event_hook, b->on_event, __ATOMIC_RELEASE);
    if (!(c = byval_imports_create(b, byval_cfg.cache_size)))
        BYVAL_LOG_ERROR("cannot allocate the %s cache: this open %s", b->name,
                        b->driver_route ? "goes to the driver uncached" : "fails");
    else if (!__atomic_compare_exchange_n(&b->cache, &none, c, 0, __ATOMIC_ACQ_REL,
                                          __ATOMIC_ACQUIRE))
        byval_imports_destroy(c), c = none;
    else
        byval_stats_register_cache(b->name, byval_imports_lru(c));
    return c;
}

/* A miss (had: the cached mapping under key that does not serve req,
 * referenced by had_ref; NULL when none). Out of line: the hit path
 * keeps few registers. */
static __attribute__((noinline)) int miss(byval_backend_import_t *b, const void *key, void *req,
                                          byval_import_t *had, byval_lru_ref_t had_ref,
                                          unsigned long long t0, uintptr_t *ptr_p)
{
    byval_import_t *m = NULL;
    byval_lru_ref_t ref = 0;
    int r;
    for (int retries = 0;;) {
        if (b->check && (r = b->check(req)) != 0)
            break;
        BYVAL_STAT_INC(opens);
        BYVAL_STAT_INC(open_misses);
        if ((r = b->import(req, had, &m)) != 0)
            break;
        if (m == had)
            ref = had_ref;
        else if (had)
            byval_imports_unget(CACHE(b), had_ref);
        if (m != had && !byval_imports_insert(CACHE(b), key, m, &m, &ref) && !ref)
            BYVAL_LOG_DEBUG("import cache full of open mappings (IPCBYVAL_CACHE_SIZE=%zu): "
                            "0x%llx not cached",
                            byval_cfg.cache_size, (unsigned long long)m->addr);
        had = NULL;
        r = hand_out(b, m, ref, SERVES(b, m, req), ptr_p);
        if (r || !b->stale || !b->stale(m) || ++retries >= 8)
            break;
        byval_imports_close(*ptr_p); /* died before this open counted: afresh */
    }
    if (had)
        byval_imports_unget(CACHE(b), had_ref);
    if (!r)
        byval_log_open(b->what, b->driver_route ? BYVAL_ROUTE_DRIVER : byval_fetch_route(), m->pid,
                       __atomic_load_n(&m->bytes, __ATOMIC_RELAXED), (void *)*ptr_p, t0);
    return r;
}

int byval_import_open(byval_backend_import_t *b, const void *key, void *req, uintptr_t *ptr_p)
{
    byval_imports_t *c = __atomic_load_n(&b->cache, __ATOMIC_ACQUIRE);
    if (!c)
        c = cache_make(b);
    if (!c) /* what the driver opens alone goes to it, as without us */
        return b->driver_route ? BYVAL_IMPORT_PASS : b->nomem;
    unsigned long long t0 = BYVAL_LOG_T0();
    byval_lru_ref_t ref = 0;
    byval_import_t *m = byval_imports_get(c, key, &ref);
    uintptr_t p = m ? SERVES(b, m, req) : 0;
    if (!p) /* none, or another record under key */
        return miss(b, key, req, m, ref, t0, ptr_p);
    int r = hand_out(b, m, ref, p, ptr_p);
    if (r || (b->stale && b->stale(m))) {
        if (!r)
            byval_imports_close(*ptr_p); /* died before this open counted: afresh */
        return r ? r : miss(b, key, req, NULL, 0, t0, ptr_p);
    }
    BYVAL_STAT_INC(opens);
    BYVAL_STAT_INC(open_hits);
    byval_log_open(b->what, BYVAL_ROUTE_HIT, m->pid, __atomic_load_n(&m->bytes, __ATOMIC_RELAXED),
                   (void *)*ptr_p, t0);
    return 0;
}

int byval_import_close(const byval_backend_import_t *b, uintptr_t ptr, const void *shown)
{
    unsigned long long t0 = BYVAL_LOG_T0();
    switch (byval_imports_close(ptr)) {
    case BYVAL_IMPORTS_CLOSED:
        BYVAL_STAT_INC(closes);
        byval_log_close(b->what, shown, b->kept, t0);
        return 0;
    case BYVAL_IMPORTS_NOT_OPEN: /* the cached mapping behind it must not be touched */
        BYVAL_STAT_INC(double_closes);
        byval_log_double_close(b->close_api, shown);
        return b->invalid;
    default: return BYVAL_IMPORT_PASS;
    }
}

/* ---- exporters ------------------------------------------------------------
 * Events come from the registry watcher thread (an exporter freed an
 * export, or its process image is gone) and the exporters table (a kept
 * pidfd says the exporter exited): closed mappings are released at once,
 * open ones at their last close, as natively. */

static const uint64_t freed_word = 0; /* never a serial: "not listed" */

static int of_view(void *ctx, const byval_import_t *m)
{
    const byval_reg_view_t *v = ctx;
    return __atomic_load_n(&m->tracker, __ATOMIC_ACQUIRE) == v &&
        (byval_reg_view_gone(v) || !byval_import_alive(m));
}

static void on_registry_event(byval_reg_view_t *v, int gone)
{
    size_t n = byval_imports_remove_if(of_view, v);
    void (*hook)(void *) = __atomic_load_n(&event_hook, __ATOMIC_ACQUIRE);
    if (hook)
        byval_imports_gated(hook, NULL);
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

static void track_init(void)
{
    byval_resolve_set_prover(&byval_reg_prover); /* nothing is fetched that was not published */
    byval_imports_set_budget(byval_cfg.cache_bytes);
    byval_imports_set_tracking(untrack, byval_track_watch);
    byval_reg_on_event(on_registry_event);
    byval_exporters_on_exit(exporter_exited);
}

static void untrack(void *tracker)
{
    byval_reg_view_put(tracker);
}

/* Once per exporter pid: its mappings go untracked. */
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

/* A closed mapping now waits on its exporter's frees: the watcher runs
 * on demand (without it the next open still sees the liveness word). */
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

static byval_reg_view_t *attach(const byval_record_t *rec, int pidfd, char *msg, size_t len)
{
    return pidfd >= 0 ? byval_reg_attach(rec, byval_cfg.transport, pidfd, msg, len) : NULL;
}

void byval_track_record(byval_import_t *m, const byval_record_t *rec, int pidfd, uint64_t key,
                        uint32_t ino)
{
    char msg[512] = "";
    byval_exporter_id_t id = {rec->pidns, rec->pid, rec->identity};
    int kept = pidfd == BYVAL_TRACK_KEPT ? byval_exporters_hold(&id) : -1;
    byval_reg_view_t *v = attach(rec, pidfd == BYVAL_TRACK_KEPT ? kept : pidfd, msg, sizeof(msg));
    if (pidfd == BYVAL_TRACK_KEPT)
        byval_exporters_release(&id, kept);
    if (v)
        track_in(m, v, key, ino);
    else
        untracked(rec->pid, msg[0] ? msg : "no pidfd of it is kept");
}

int byval_track_listed(const byval_record_t *rec, int pidfd, uint64_t key, uint32_t ino)
{
    char msg[512] = "";
    uint64_t serial = 0;
    byval_reg_view_t *v = attach(rec, pidfd, msg, sizeof(msg));
    int listed = v && byval_reg_find(v, key, ino, &serial) != NULL;
    byval_reg_view_put(v);
    return listed;
}

void byval_track_pid(byval_import_t *m, uint32_t pid, uint64_t key)
{
    char msg[512] = "";
    byval_reg_view_t *v = byval_reg_attach_pid(pid, msg, sizeof(msg));
    if (v)
        track_in(m, v, key, 0);
    else
        BYVAL_LOG_DEBUG("legacy handle of pid %u: %s: kept within IPCBYVAL_CACHE_BYTES", pid, msg);
}
