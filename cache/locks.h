/* SPDX-License-Identifier: MIT */
/*
 * locks.h - every lock of ipcbyval, its rank, and what fork() does to it.
 * It depends on nothing: handles/, cache/ and shim/ all use it.
 *
 * The lock order. BYVAL_RANKS below IS the order: a thread may take a
 * lock only while every lock it holds ranks strictly lower (was listed
 * earlier). Two locks of one rank are never held together (the LRU
 * caches, the pointer maps: a class of instances shares one rank). Built
 * with -DBYVAL_LOCK_DEBUG (make SAN=tsan, so make check-tsan), every
 * byval_lock() checks this against a per-thread stack of held ranks and
 * aborts with both names on a violation.
 *
 * Outside the order. ipcbyval never holds one of its locks while it calls
 * the GPU driver or the application, with these exceptions: the release
 * gate (first rank) and the VMM mirrors' (CU_MIRRORS, CU_MIRROR); and drivers and applications may call into ipcbyval while
 * holding their own locks (the driver's pidfd_getfd reaches the rescue).
 * So in the whole process's order, their locks rank before all of ours,
 * except the driver's, which also rank after the gate.
 *
 * fork(). One pthread_atfork, installed by this module's constructor (so
 * no lock can be taken before it exists). Its prepare handler takes every
 * registered lock in rank order, which cannot deadlock with any thread
 * that keeps the order; the parent handler releases them; the child
 * handler too (the forking thread, the child's only one, holds every one:
 * so they are as new; the gate is made anew) and then runs the modules'
 * child callbacks (BYVAL_FORK_CHILD),
 * which reset state the child must not inherit: each resets its own
 * module only, so their order does not matter, and they may take locks.
 * Handlers registered later (drivers at their init, the application)
 * run their prepare before ours: the gate is the one lock of ours held
 * across a driver call, so prepare waits for it only BYVAL_GATE_FORK_MS
 * (a driver's prepare may hold the lock the release in flight waits for).
 * ipcbyval's own threads start under the BGTHREAD lock (handles/bgthread.c)
 * so that no fork copies the C library's or a sanitizer's bookkeeping of a
 * thread mid-start; a thread's exit is not covered (only the fd closer's
 * threads exit, handles/fdcheck.c).
 *
 * Registration is static: a module names its lock with
 * BYVAL_LOCK_STATIC (or its class of run-time instances with
 * BYVAL_LOCK_CLASS) at file scope; the descriptor lands in the
 * byval_locks section, which the constructor reads. Nothing is registered
 * at first use, so there is no window in which a lock exists that fork
 * does not know about.
 */
#ifndef BYVAL_CACHE_LOCKS_H
#define BYVAL_CACHE_LOCKS_H

#include <pthread.h>

/* X(rank, name). Per rank: the lock, its owner, what it guards, and why
 * it sits there (what it is held across, i.e. what ranks after it). */
#define BYVAL_RANKS(X)                                                                           \
    /* cache/imports.c g.gate (rwlock): releases of imported mappings run                      \
     * shared, across the driver's close; a context purge and fork take it                     \
     * exclusive to wait for them. First: it is held across the driver. */ \
    X(IMPORTS_GATE, "imports release gate")                                                      \
    /* shim/cu_export.c: the exporter's VMM pools (chunks exported once                        \
     * each). Held while a pool's exports start and end (EXPORTS). */ \
    X(CU_POOLS, "cuda vmm pools")                                                                \
    /* shim/cu_import.c: the list of live mirrors. Held while a dead                           \
     * mirror gives back what no open needs (CU_MIRROR; the driver's                            \
     * unmaps, like CU_MIRROR below). */ \
    X(CU_MIRRORS, "cuda vmm mirror list")                                                        \
    /* shim/cu_import.c: a mirror's growth (chunks mapped into a cached                        \
     * mirror). Held across the fetch and the driver's import and map, the                     \
     * second lock held across the driver (a driver never calls the                             \
     * application's cuIpcOpenMemHandle); nothing releases under it. */ \
    X(CU_MIRROR, "cuda vmm mirror growth")                                                       \
    /* cache/exports.c: the export core's tables. Held while an export is                      \
     * published and withdrawn in handles/ (registry, broker offers,                          \
     * registry by fd) and while its LRU is used: all rank after. */ \
    X(EXPORTS, "export core")                                                                    \
    /* handles/broker_serve.c: the socket server's listener and connection                     \
     * table. Held while the server thread starts (BGTHREAD). */ \
    X(BROKER_SERVE, "broker server")                                                             \
    /* handles/broker_offers.c: the fds offered over the socket, the uid                       \
     * rule. A leaf (fstat, fcntl under it). */ \
    X(BROKER_OFFERS, "broker offers")                                                            \
    /* handles/registry.c: the exporter's registry page, memfd and pipe. A                     \
     * leaf (the page, one pipe write). */ \
    X(REGISTRY, "export registry")                                                               \
    /* handles/registry_fds.c: the exported fd numbers and their proofs. A                     \
     * leaf (raw fstat, fcntl, epoll_ctl). */ \
    X(REGISTRY_FDS, "export registry by fd")                                                     \
    /* handles/registry_watch.c: the importer's registry views and pidfd                       \
     * watches. Held while the watcher thread starts (BGTHREAD). */ \
    X(REGISTRY_WATCH, "registry watcher")                                                        \
    /* handles/peers.c: how each exporter was reached. A leaf. */                                \
    X(TRANSPORT, "transport peers")                                                              \
    /* shim/exporters.c: kept exporter pidfds and their loans. A leaf. */                        \
    X(EXPORTERS, "exporters table")                                                              \
    /* shim/ze_fdconv.c: duplicates handed out as fds. A leaf. */                                \
    X(ZE_FDCONV, "fd conversion duplicates")                                                     \
    /* cache/imports.c g.lock: the list of import caches, the uncached                         \
     * mappings. Held while the open-pointer map is made (PTRMAP_LIST). */ \
    X(IMPORTS, "imports lists")                                                                  \
    /* cache/lru_fork.c: the list of live LRU caches (class LRU). */                             \
    X(LRU_LIST, "LRU cache list")                                                                \
    /* cache/lru*.c: each cache's lock (a class; never two at once).                           \
     * Predicates run under it take no lock; callbacks run after it. */ \
    X(LRU, "LRU cache")                                                                          \
    /* cache/ptrmap.c: the list of live pointer maps (class PTRMAP). */                          \
    X(PTRMAP_LIST, "pointer map list")                                                           \
    /* cache/ptrmap.c: each map's spin lock (a class). A leaf. */                                \
    X(PTRMAP, "pointer map")                                                                     \
    /* handles/bgthread.c: background thread starts: held across                               \
     * pthread_create; fork's prepare also waits under it until every new                      \
     * thread runs our code, so that no fork copies a sanitizer's or                           \
     * libc's thread bookkeeping mid-start. Last: only pthread_create's                        \
     * own locks are taken under it. */ \
    /* cache/once.c: once-only initialisations (byval_once). Held only to                      \
     * mark an init running or done, never across the init: an init may be                     \
     * asked for under any lock above (the export core's, publishing).                          \
     * Nothing is taken under it. */ \
    X(ONCE, "once-only initialisation")                                                          \
    X(BGTHREAD, "background thread start")

typedef enum byval_rank {
    BYVAL_RANK_NONE = 0,
#define BYVAL_RANK_ENUM_(r, name) BYVAL_RANK_##r,
    BYVAL_RANKS(BYVAL_RANK_ENUM_)
#undef BYVAL_RANK_ENUM_
        BYVAL_RANK_COUNT
} byval_rank_t;

/* How long fork's prepare waits for releases in flight (see above). */
#define BYVAL_GATE_FORK_MS 200

typedef struct byval_lock {
    pthread_mutex_t m;
    unsigned short rank;
    unsigned short adaptive; /* spins a while before sleeping */
} byval_lock_t;

/* A readers-writer lock, writers first (a purge waits for the releases
 * running, not for those queued behind them). Not a pthread_rwlock_t:
 * fork must hand the child a write-locked one released, and glibc
 * releases a write lock only for the thread id that took it (the
 * parent's), while a re-initialised one keeps its writer in
 * ThreadSanitizer's model. */
typedef struct byval_rwlock {
    pthread_mutex_t m;
    pthread_cond_t c;
    unsigned readers, writers_waiting;
    int writer;
    unsigned short rank;
} byval_rwlock_t;

#define BYVAL_LOCK_INIT(r)                           \
    {                                                \
        PTHREAD_MUTEX_INITIALIZER, BYVAL_RANK_##r, 0 \
    }
#define BYVAL_RWLOCK_INIT(r)                                                         \
    {                                                                                \
        PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, BYVAL_RANK_##r \
    }

/* Once-only initialisation with a fork story (cache/locks.c). pthread_once
 * has one in glibc only (not in ThreadSanitizer's interceptor, not in
 * musl): a child forked while another thread ran an init waited for that
 * thread for ever (test_stress, a fork child's first open). Here, as in
 * glibc, an init left running by a thread the child does not have is run
 * again by the child's first caller. fn runs with no lock of byval_once
 * held: it may run other onces, never its own. */
typedef struct byval_once {
    int state;
} byval_once_t;
#define BYVAL_ONCE_INIT \
    {                   \
        0               \
    }
void byval_once(byval_once_t *o, void (*fn)(void));

/* A run-time instance (a class member); adaptive for short sections. */
void byval_lock_init(byval_lock_t *l, byval_rank_t rank, int adaptive);
void byval_lock_destroy(byval_lock_t *l);

const char *byval_rank_name(unsigned rank);

/* The rank check (debug builds): before taking, after releasing. */
#ifdef BYVAL_LOCK_DEBUG
void byval_rank_enter(unsigned rank);
void byval_rank_leave(unsigned rank);
#else
#define byval_rank_enter(rank) ((void)(rank))
#define byval_rank_leave(rank) ((void)(rank))
#endif

static inline void byval_lock(byval_lock_t *l)
{
    byval_rank_enter(l->rank);
    pthread_mutex_lock(&l->m);
}

static inline void byval_unlock(byval_lock_t *l)
{
    pthread_mutex_unlock(&l->m);
    byval_rank_leave(l->rank);
}

void byval_rdlock(byval_rwlock_t *l);
void byval_rdunlock(byval_rwlock_t *l);
void byval_wrlock(byval_rwlock_t *l);
void byval_wrunlock(byval_rwlock_t *l);

/* For a class's fork callbacks: no rank bookkeeping (fork holds all). */
static inline void byval_lock_fork_take(byval_lock_t *l)
{
    pthread_mutex_lock(&l->m);
}
static inline void byval_lock_fork_drop(byval_lock_t *l)
{
    pthread_mutex_unlock(&l->m);
}

/* ---- static registration ------------------------------------------------ */

typedef struct byval_lock_desc {
    byval_lock_t *mutex; /* one static mutex, or */
    byval_rwlock_t *rw;  /* one static rwlock (fork takes it exclusive), or */
    /* a class of run-time instances: its rank, and take / release every
     * instance. The class keeps their list under a lock of its own (rank
     * <CLASS>_LIST, just before), which take takes first and drop
     * releases last. */
    unsigned rank;
    void (*take)(void);
    void (*drop)(void);
} byval_lock_desc_t;

#define BYVAL_LOCK_SECTION_(sec, id, type, val) \
    static type const id __attribute__((used, section(sec), aligned(sizeof(void *)))) = val

#define BYVAL_LOCK_REGISTER_(id, ...)                             \
    static const byval_lock_desc_t id##_lockdesc = {__VA_ARGS__}; \
    BYVAL_LOCK_SECTION_("byval_locks", id##_lockent, const byval_lock_desc_t *, &id##_lockdesc)

/* At file scope: fork knows this static lock (its rank is the lock's). */
#define BYVAL_LOCK_STATIC(id, lockp) BYVAL_LOCK_REGISTER_(id, .mutex = (lockp))
#define BYVAL_RWLOCK_STATIC(id, lockp) BYVAL_LOCK_REGISTER_(id, .rw = (lockp))
#define BYVAL_LOCK_CLASS(id, r, take_fn, drop_fn) \
    BYVAL_LOCK_REGISTER_(id, .rank = BYVAL_RANK_##r, .take = (take_fn), .drop = (drop_fn))

/* At file scope: fn runs in every fork child, after every lock is
 * released (module state the child must not inherit). */
typedef void (*byval_fork_child_fn)(void);
#define BYVAL_FORK_CHILD(id, fn) \
    BYVAL_LOCK_SECTION_("byval_fork_child", id##_forkchild, byval_fork_child_fn, (fn))

/* ---- for tests ------------------------------------------------------------ */

/* The registered locks in rank order: how many, the i-th one's rank, and
 * taking / releasing it as a thread would (a class: every instance). */
unsigned byval_locks_count(void);
unsigned byval_locks_rank(unsigned i);
void byval_locks_hold(unsigned i);
void byval_locks_unhold(unsigned i);

/* Called by ipcbyval's background loops at each wake-up, holding no
 * lock, when a test set it ("broker"): how a test makes them hold one. */
extern void (*byval_locks_test_hook)(const char *thread);
static inline void byval_locks_test_point(const char *thread)
{
    void (*h)(const char *) = __atomic_load_n(&byval_locks_test_hook, __ATOMIC_ACQUIRE);
    if (h)
        h(thread);
}

#endif
