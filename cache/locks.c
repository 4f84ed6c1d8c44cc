/* SPDX-License-Identifier: MIT */
/*
 * locks.c - the registered locks in rank order, the one pthread_atfork, the
 * rank check of debug builds, the readers-writer lock and byval_once (see
 * locks.h).
 */
#include "cache/locks.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/* The section's bounds; weak: a program may link no lock at all. */
extern const byval_lock_desc_t *const __start_byval_locks[] __attribute__((weak));
extern const byval_lock_desc_t *const __stop_byval_locks[] __attribute__((weak));
extern const byval_fork_child_fn __start_byval_fork_child[] __attribute__((weak));
extern const byval_fork_child_fn __stop_byval_fork_child[] __attribute__((weak));

#define LOCKS_MAX 64

static const byval_lock_desc_t *order[LOCKS_MAX];
static unsigned norder;
/* Whether this fork's prepare got the gate (bounded wait): the handlers
 * of one fork run on the forking thread. */
static __thread int gate_held;

void (*byval_locks_test_hook)(const char *thread);

static const char *const rank_names[] = {"none",
#define BYVAL_RANK_NAME_(r, name) name,
                                         BYVAL_RANKS(BYVAL_RANK_NAME_)
#undef BYVAL_RANK_NAME_
};

const char *byval_rank_name(unsigned rank)
{
    return rank < BYVAL_RANK_COUNT ? rank_names[rank] : "?";
}

static unsigned desc_rank(const byval_lock_desc_t *d)
{
    return d->mutex ? d->mutex->rank : d->rw ? d->rw->rank : d->rank;
}

void byval_lock_init(byval_lock_t *l, byval_rank_t rank, int adaptive)
{
    l->rank = (unsigned short)rank;
    l->adaptive = (unsigned short)(adaptive != 0);
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    if (l->adaptive)
        pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ADAPTIVE_NP);
    pthread_mutex_init(&l->m, &attr);
    pthread_mutexattr_destroy(&attr);
}

void byval_lock_destroy(byval_lock_t *l)
{
    pthread_mutex_destroy(&l->m);
}

/* ---- the readers-writer lock -------------------------------------------- */

void byval_rdlock(byval_rwlock_t *l)
{
    byval_rank_enter(l->rank);
    pthread_mutex_lock(&l->m);
    while (l->writer || l->writers_waiting)
        pthread_cond_wait(&l->c, &l->m);
    l->readers++;
    pthread_mutex_unlock(&l->m);
}

void byval_rdunlock(byval_rwlock_t *l)
{
    pthread_mutex_lock(&l->m);
    if (--l->readers == 0 && l->writers_waiting)
        pthread_cond_broadcast(&l->c);
    pthread_mutex_unlock(&l->m);
    byval_rank_leave(l->rank);
}

/* With l->m held: wait to be the writer, until *deadline if given; 1 when
 * we are. */
static int wr_take_locked(byval_rwlock_t *l, const struct timespec *deadline)
{
    int rc = 0;
    l->writers_waiting++;
    while ((l->writer || l->readers) && rc == 0)
        rc = deadline ? pthread_cond_timedwait(&l->c, &l->m, deadline)
                      : pthread_cond_wait(&l->c, &l->m);
    l->writers_waiting--;
    if (!l->writer && !l->readers)
        return l->writer = 1;
    pthread_cond_broadcast(&l->c); /* readers we held back */
    return 0;
}

void byval_wrlock(byval_rwlock_t *l)
{
    byval_rank_enter(l->rank);
    pthread_mutex_lock(&l->m);
    wr_take_locked(l, NULL);
    pthread_mutex_unlock(&l->m);
}

void byval_wrunlock(byval_rwlock_t *l)
{
    pthread_mutex_lock(&l->m);
    l->writer = 0;
    pthread_cond_broadcast(&l->c);
    pthread_mutex_unlock(&l->m);
    byval_rank_leave(l->rank);
}

/* ---- the rank check ----------------------------------------------------- */

#ifdef BYVAL_LOCK_DEBUG
#define HELD_MAX 16
static __thread unsigned char held[HELD_MAX];
static __thread unsigned nheld;

static void die(const char *what, unsigned rank, unsigned other)
{
    char line[256];
    int n = snprintf(line, sizeof(line),
                     "ipcbyval: lock order violation: %s %s (rank %u) while holding %s "
                     "(rank %u); see cache/locks.h\n",
                     what, byval_rank_name(rank), rank, byval_rank_name(other), other);
    (void)!write(2, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
    abort();
}

void byval_rank_enter(unsigned rank)
{
    if (!rank)
        return;
    for (unsigned i = 0; i < nheld; i++)
        if (held[i] >= rank)
            die("taking", rank, held[i]);
    if (nheld == HELD_MAX)
        die("taking (too deep)", rank, held[nheld - 1]);
    held[nheld++] = (unsigned char)rank;
}

void byval_rank_leave(unsigned rank)
{
    if (!rank)
        return;
    for (unsigned i = nheld; i-- > 0;)
        if (held[i] == rank) {
            held[i] = held[--nheld];
            return;
        }
    die("releasing (not held)", rank, nheld ? held[nheld - 1] : 0);
}

static void fork_check(void)
{
    if (nheld) /* prepare would wait for the forking thread itself */
        die("fork() called", 0, held[nheld - 1]);
}
#else
#define fork_check() ((void)0)
#endif

/* ---- one lock of the order ---------------------------------------------- */

/* Fork holds every mutex, the gate's included, and takes the gate's writer's
 * place too if it comes within BYVAL_GATE_FORK_MS. */
static void take(const byval_lock_desc_t *d)
{
    if (d->mutex) {
        pthread_mutex_lock(&d->mutex->m);
    } else if (d->rw) {
        struct timespec dl; /* the condition variable's clock: CLOCK_REALTIME */
        clock_gettime(CLOCK_REALTIME, &dl);
        dl.tv_nsec += (long)BYVAL_GATE_FORK_MS * 1000000L;
        dl.tv_sec += dl.tv_nsec / 1000000000L;
        dl.tv_nsec %= 1000000000L;
        pthread_mutex_lock(&d->rw->m);
        gate_held = wr_take_locked(d->rw, &dl);
    } else {
        d->take();
    }
}

static void drop(const byval_lock_desc_t *d)
{
    if (d->rw && gate_held) {
        d->rw->writer = 0;
        pthread_cond_broadcast(&d->rw->c);
    }
    if (d->mutex || d->rw)
        pthread_mutex_unlock(d->mutex ? &d->mutex->m : &d->rw->m);
    else
        d->drop();
}

/* ---- byval_once ----------------------------------------------------------- *
 * A thread marks an init running (with the fork generation) under the lock,
 * runs it unlocked and marks it done; others wait on the condition
 * variable. A fork child starts a new generation: an init marked running in
 * an older one was left by a thread the child does not have, so its first
 * caller runs it again (what it had done is the parent's state, which each
 * module's fork handler resets). */

enum { ONCE_NEW = 0, ONCE_DONE = 1, ONCE_RUNNING = 2 }; /* running: | generation << 2 */

static byval_lock_t once_lock = BYVAL_LOCK_INIT(ONCE);
static pthread_cond_t once_cond = PTHREAD_COND_INITIALIZER;
static unsigned generation; /* forks since load, in this process's line (once_lock) */
BYVAL_LOCK_STATIC(once, &once_lock);

void byval_once(byval_once_t *o, void (*fn)(void))
{
    if (__atomic_load_n(&o->state, __ATOMIC_ACQUIRE) == ONCE_DONE)
        return;
    byval_lock(&once_lock);
    const int mine = (int)(ONCE_RUNNING | (generation & 0x1fffffffu) << 2);
    int s;
    while ((s = __atomic_load_n(&o->state, __ATOMIC_RELAXED)) == mine)
        pthread_cond_wait(&once_cond, &once_lock.m);
    if (s != ONCE_DONE) { /* new, or left running by a thread of the parent */
        __atomic_store_n(&o->state, mine, __ATOMIC_RELAXED);
        byval_unlock(&once_lock);
        fn();
        byval_lock(&once_lock);
        __atomic_store_n(&o->state, ONCE_DONE, __ATOMIC_RELEASE);
        pthread_cond_broadcast(&once_cond);
    }
    byval_unlock(&once_lock);
}

/* ---- fork --------------------------------------------------------------- */

static void fork_prepare(void)
{
    fork_check();
    for (unsigned i = 0; i < norder; i++)
        take(order[i]);
}

static void fork_parent(void)
{
    for (unsigned i = norder; i-- > 0;)
        drop(order[i]);
}

/* The forking thread holds every lock (prepare), and is the child's one
 * thread: releasing them is re-initialising them, and keeps a sanitizer's
 * model of who holds what true (ThreadSanitizer keeps a re-initialised
 * mutex's owner). The gate's count of readers is made anew: prepare may
 * not have got the writer's place, and the readers are not in the child;
 * so is its condition variable, whose waiters are not either. */
static void fork_child(void)
{
    for (unsigned i = 0; i < norder; i++)
        if (order[i]->rw) {
            order[i]->rw->readers = order[i]->rw->writers_waiting = 0;
            pthread_cond_init(&order[i]->rw->c, NULL);
            gate_held = 1; /* the writer's place is ours: released as such */
        }
    fork_parent();
    gate_held = 0;
    generation++;
    pthread_cond_init(&once_cond, NULL); /* its waiters are not in the child */
    for (const byval_fork_child_fn *f = __start_byval_fork_child; f && f < __stop_byval_fork_child;
         f++)
        (*f)();
}

/* Sorted by rank once; a rank registered twice keeps both, in link order
 * (test_locks checks that each rank has one owner). */
__attribute__((constructor)) static void locks_install(void)
{
    for (const byval_lock_desc_t *const *d = __start_byval_locks;
         d && d < __stop_byval_locks && norder < LOCKS_MAX; d++) {
        unsigned i = norder++;
        for (; i > 0 && desc_rank(order[i - 1]) > desc_rank(*d); i--)
            order[i] = order[i - 1];
        order[i] = *d;
    }
    if (norder)
        pthread_atfork(fork_prepare, fork_parent, fork_child);
}

/* ---- for tests ------------------------------------------------------------ */

unsigned byval_locks_count(void)
{
    return norder;
}

unsigned byval_locks_rank(unsigned i)
{
    return i < norder ? desc_rank(order[i]) : BYVAL_RANK_NONE;
}

void byval_locks_hold(unsigned i)
{
    if (i < norder && order[i]->rw) {
        byval_wrlock(order[i]->rw);
    } else if (i < norder) {
        byval_rank_enter(desc_rank(order[i]));
        take(order[i]);
    }
}

void byval_locks_unhold(unsigned i)
{
    if (i < norder && order[i]->rw) {
        byval_wrunlock(order[i]->rw);
    } else if (i < norder) {
        drop(order[i]);
        byval_rank_leave(desc_rank(order[i]));
    }
}
