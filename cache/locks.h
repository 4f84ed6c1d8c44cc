/* SPDX-License-Identifier: MIT */
/*
 * locks.h - every lock of ipcbyval, its rank, and what fork() does to it.
 * It depends on nothing: handles/, cache/ and shim/ all use it.
 *
 * BYVAL_RANKS IS the lock order: a thread takes a lock only while every
 * lock it holds ranks strictly lower; two locks of one rank (a class of
 * instances: the LRU caches, the pointer maps) are never held together.
 * Built with -DBYVAL_LOCK_DEBUG (make SAN=tsan), byval_lock() checks this
 * against a per-thread stack of held ranks and aborts naming both.
 *
 * ipcbyval holds none of its locks while it calls the GPU driver or the
 * application, except the release gate and the VMM mirrors' (CU_MIRRORS,
 * CU_MIRROR); drivers and applications may call in holding their own
 * locks (the driver's pidfd_getfd reaches the rescue). So their locks rank
 * before all of ours, except the driver's, which also rank after the gate.
 *
 * fork(): one pthread_atfork. Prepare takes every registered lock in rank
 * order; parent and child release them (the gate is made anew), then the
 * child runs the modules' BYVAL_FORK_CHILD callbacks (each resets its own
 * module; they may take locks). Handlers registered later (drivers, the
 * application) prepare before ours: the gate, held across a driver call,
 * is waited for only BYVAL_GATE_FORK_MS. Our threads start under BGTHREAD,
 * so no fork copies libc's or a sanitizer's bookkeeping of a thread
 * mid-start (only fdcheck.c's threads exit). Registration is static (at
 * file scope, in a section): no lock exists that fork does not know.
 */
#ifndef BYVAL_CACHE_LOCKS_H
#define BYVAL_CACHE_LOCKS_H

#include <pthread.h>

/* X(rank, name), in order. Owner: what it guards; what it is held across.
 * IMPORTS_GATE   cache/imports.c gate: shared by releases across the driver; exclusive: purge, fork
 * CU_POOLS       shim/cu_export.c: VMM pools; while a pool's exports start and end (EXPORTS)
 * CU_MIRRORS     shim/cu_import.c: live mirrors; while a dead one gives back (driver's unmaps)
 * CU_MIRROR      shim/cu_import.c: a mirror's growth; across the fetch, driver import and map
 * EXPORTS        cache/exports.c: the export core; while exports are (un)published, its LRU used
 * BROKER_SERVE   handles/broker_serve.c: listener, connections; while its thread starts
 * BROKER_OFFERS  handles/broker_serve.c: fds offered, the uid rule; a leaf
 * REGISTRY       handles/registry.c: registry page, memfd and pipe; a leaf
 * REGISTRY_FDS   handles/registry_fds.c: exported fds and their proofs; a leaf
 * REGISTRY_WATCH handles/registry_watch.c: views, pidfd watches; while its thread starts
 * TRANSPORT      handles/resolve.c: how each exporter was reached; a leaf
 * EXPORTERS      cache/exporters.c: exporter pidfds and their loans; a leaf
 * ZE_FDCONV      shim/ze_fdconv.c: duplicates handed out as fds; a leaf
 * IMPORTS        cache/imports.c g.lock: caches, uncached mappings; while a pointer map is made
 * LRU_LIST       cache/lru.c: live LRU caches (class LRU)
 * LRU            cache/lru.c: one cache (class); predicates under it take none, callbacks after
 * PTRMAP_LIST    cache/ptrmap.c: live pointer maps (class PTRMAP)
 * PTRMAP         cache/ptrmap.c: one map's spin lock (class); a leaf
 * ONCE           cache/locks.c: an init's running/done mark, never across the init; a leaf
 * BGTHREAD       handles/bgthread.c: across pthread_create; fork waits under it for new threads
 */
#define BYVAL_RANKS(X)                       \
    X(IMPORTS_GATE, "imports release gate")  \
    X(CU_POOLS, "cuda vmm pools")            \
    X(CU_MIRRORS, "cuda vmm mirror list")    \
    X(CU_MIRROR, "cuda vmm mirror growth")   \
    X(EXPORTS, "export core")                \
    X(BROKER_SERVE, "broker server")         \
    X(BROKER_OFFERS, "broker offers")        \
    X(REGISTRY, "export registry")           \
    X(REGISTRY_FDS, "export registry by fd") \
    X(REGISTRY_WATCH, "registry watcher")    \
    X(TRANSPORT, "transport peers")          \
    X(EXPORTERS, "exporters table")          \
    X(ZE_FDCONV, "fd conversion duplicates") \
    X(IMPORTS, "imports lists")              \
    X(LRU_LIST, "LRU cache list")            \
    X(LRU, "LRU cache")                      \
    X(PTRMAP_LIST, "pointer map list")       \
    X(PTRMAP, "pointer map")                 \
    X(ONCE, "once-only initialisation")      \
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

/* A readers-writer lock, writers first. Not a pthread_rwlock_t: the fork
 * child must release a write-locked one, which glibc allows only to the
 * parent's thread id (and TSan keeps a re-initialised one's writer). */
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

/* pthread_once with glibc's fork story everywhere (TSan, musl): an init
 * left running by a thread the child lacks is run again by the child's
 * first caller. fn runs with no lock held: it may run other onces. */
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
    /* a class: take / drop every instance, and the <CLASS>_LIST lock of
     * their list first / last. */
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

/* Called by the background loops at each wake-up, holding no lock, when a
 * test set it: how a test makes them hold one. */
extern void (*byval_locks_test_hook)(const char *thread);
static inline void byval_locks_test_point(const char *thread)
{
    void (*h)(const char *) = __atomic_load_n(&byval_locks_test_hook, __ATOMIC_ACQUIRE);
    if (h)
        h(thread);
}

#endif
