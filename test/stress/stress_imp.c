/* SPDX-License-Identifier: MIT */
/*
 * stress_imp.c - the importer: a receiver thread keeps the 16 newest
 * handles; 6 workers (4 in their own context, 2 sharing one; the backend
 * may make one of the own ones a device's primary context) each open one
 * of them, check 6 words, keep 1-4 open and check them again before
 * closing; 5% of closes are done twice, never while the pointer is held
 * by anyone (opens take a shared lock, a second close the exclusive one,
 * so no open can hand the pointer out again in between: natively a
 * second open of a mapping in a context returns the same pointer); 1% of
 * iterations destroy and recreate the worker's context (a quarter of
 * them with its mappings left open); and every ~100 ms a worker forks a
 * child that opens one handle.
 */
#include "test/stress/stress.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define RING 16
#define KEPT 4
#define HELD_MAX 256

static struct {
    pthread_mutex_t lock;
    struct stress_msg m[RING];
    int fd[RING];
    uint64_t n;
} ring = {.lock = PTHREAD_MUTEX_INITIALIZER};

static pthread_rwlock_t dc_lock = PTHREAD_RWLOCK_INITIALIZER;
static pthread_mutex_t held_lock = PTHREAD_MUTEX_INITIALIZER;
struct range {
    uintptr_t p, end;
};
static struct range held[HELD_MAX];
/* Mappings left open at a destroy that stay mapped natively (keep
 * semantics, VMM): never closed, so held for good. */
#define LEAK_MAX 65536
static struct range leaked[LEAK_MAX];
static int nleaked;
static int sock, closed_workers, phase2;
static struct stress_ctx shared_ctx;

struct kept {
    uintptr_t p;
    uint64_t serial, size;
};

static void held_add(uintptr_t p, uint64_t size)
{
    int i = 0;
    pthread_mutex_lock(&held_lock);
    while (i < HELD_MAX && held[i].p)
        i++;
    if (i < HELD_MAX) {
        held[i].p = p;
        held[i].end = p + ((size + 4095) & ~(uint64_t)4095);
    }
    pthread_mutex_unlock(&held_lock);
    if (i == HELD_MAX) {
        fprintf(stderr, "stress: more than %d mappings held\n", HELD_MAX);
        abort();
    }
}

static void held_leak(uintptr_t p)
{
    pthread_mutex_lock(&held_lock);
    for (int i = 0; i < HELD_MAX; i++)
        if (held[i].p == p && nleaked < LEAK_MAX) {
            leaked[nleaked++] = held[i];
            held[i].p = 0;
            break;
        }
    pthread_mutex_unlock(&held_lock);
}

static void held_del(uintptr_t p)
{
    pthread_mutex_lock(&held_lock);
    for (int i = 0; i < HELD_MAX; i++)
        if (held[i].p == p) {
            held[i].p = 0;
            break;
        }
    pthread_mutex_unlock(&held_lock);
}

/* A held mapping contains p: a second close of p could release it
 * (Level Zero's close, compute-runtime's freeMem, takes any pointer into
 * a mapping). */
static int held_any(uintptr_t p)
{
    int n = 0;
    pthread_mutex_lock(&held_lock);
    for (int i = 0; i < HELD_MAX; i++)
        n += held[i].p && held[i].p <= p && p < held[i].end;
    for (int i = 0; i < nleaked; i++)
        n += leaked[i].p <= p && p < leaked[i].end;
    pthread_mutex_unlock(&held_lock);
    return n;
}

static void *receiver(void *arg)
{
    (void)arg;
    struct stress_msg m;
    int fd;
    while (stress_backend.recv(sock, &m, &fd) == 0) {
        pthread_mutex_lock(&ring.lock);
        unsigned i = (unsigned)(ring.n++ % RING);
        if (ring.n > RING && ring.fd[i] >= 0)
            close(ring.fd[i]);
        ring.m[i] = m;
        ring.fd[i] = fd;
        pthread_mutex_unlock(&ring.lock);
    }
    return NULL;
}

/* One of the 16 newest handles (its fd dup'ed for a native ZE open). */
static int pick(uint64_t *rnd, struct stress_msg *m, int *fd_p)
{
    pthread_mutex_lock(&ring.lock);
    uint64_t n = ring.n;
    if (!n) {
        pthread_mutex_unlock(&ring.lock);
        return -1;
    }
    unsigned i = (unsigned)((n - 1 - stress_rand(rnd) % (n < RING ? n : RING)) % RING);
    *m = ring.m[i];
    *fd_p = ring.fd[i] >= 0 ? dup(ring.fd[i]) : -1;
    pthread_mutex_unlock(&ring.lock);
    return 0;
}

static int live(uint64_t serial)
{
    return __atomic_load_n(&stress_sh->live[serial % STRESS_LIVE], __ATOMIC_ACQUIRE) == serial;
}

/* 6 words: the first, the last, 4 anywhere. 0 when all are right. */
static int check(const struct stress_ctx *c, const struct kept *k, uint64_t *rnd)
{
    uint64_t words = k->size / 8;
    for (int i = 0; i < 6; i++) {
        uint64_t off = 8 * (i == 0 ? 0 : i == 1 ? words - 1 : stress_rand(rnd) % words), w = 0;
        uint64_t want = stress_word(k->serial, off);
        if (stress_backend.read(c, k->p + off, &w) != 0 || w != want) {
            if (ADD(wrong_reads, 1) <= 5)
                fprintf(stderr, "stress: serial %llu size %llu at %#lx: word at byte %llu is "
                        "%016llx, want %016llx\n", (unsigned long long)k->serial,
                        (unsigned long long)k->size, (unsigned long)k->p,
                        (unsigned long long)off, (unsigned long long)w, (unsigned long long)want);
            return -1;
        }
    }
    return 0;
}

static int open_one(const struct stress_ctx *c, uint64_t *rnd, struct kept *k)
{
    struct stress_msg m;
    int fd;
    if (pick(rnd, &m, &fd) < 0)
        return -1;
    pthread_rwlock_rdlock(&dc_lock);
    int was_live = live(m.serial);
    int rc = stress_backend.open(c, &m, fd, &k->p);
    if (rc == 0)
        held_add(k->p, m.size);
    pthread_rwlock_unlock(&dc_lock);
    if (fd >= 0)
        close(fd);
    if (rc != 0) {
        if (was_live && live(m.serial) && ADD(refused_live, 1) <= 5)
            fprintf(stderr, "stress: open of live serial %llu refused: %#x\n",
                    (unsigned long long)m.serial, (unsigned)rc);
        return -1;
    }
    ADD(opens, 1);
    k->serial = m.serial;
    k->size = m.size;
    check(c, k, rnd);
    return 0;
}

static int kept_has(const struct kept *kept, int n, uintptr_t p)
{
    for (int i = 0; i < n; i++)
        if (kept[i].p == p)
            return 1;
    return 0;
}

/* Closes kept[0] after checking it; sometimes twice. */
static void close_oldest(const struct stress_ctx *c, struct kept *kept, int *n, uint64_t *rnd)
{
    struct kept k = kept[0];
    memmove(kept, kept + 1, sizeof(kept[0]) * (size_t)(--*n));
    check(c, &k, rnd);
    if (stress_backend.close(c, k.p) != 0)
        fprintf(stderr, "stress: close of %#lx failed\n", (unsigned long)k.p);
    held_del(k.p);
    ADD(closes, 1);
    if (!stress_o.double_closes || stress_rand(rnd) % 100 >= 5 || kept_has(kept, *n, k.p))
        return;
    pthread_rwlock_wrlock(&dc_lock);
    if (!held_any(k.p)) {
        ADD(double_closes, 1);
        if (stress_backend.close(c, k.p) == 0 && ADD(double_close_ok, 1) <= 5)
            fprintf(stderr, "stress: second close of %#lx accepted\n", (unsigned long)k.p);
    }
    pthread_rwlock_unlock(&dc_lock);
}

/* The child takes none of this program's locks (another thread may hold
 * one at the fork): the handle is picked before. */
static void fork_child(const struct stress_ctx *c, uint64_t *rnd)
{
    struct stress_msg m;
    int fd;
    if (pick(rnd, &m, &fd) < 0)
        return;
    pid_t pid = fork();
    if (pid == 0) {
        struct kept k = {.serial = m.serial, .size = m.size};
        alarm(10);
        if (stress_backend.open(c, &m, fd, &k.p) == 0) {
            check(c, &k, rnd);
            stress_backend.close(c, k.p);
        }
        _exit(0);
    }
    if (fd >= 0)
        close(fd);
    int st = 0;
    if (pid > 0 && waitpid(pid, &st, 0) == pid && WIFSIGNALED(st)) {
        fprintf(stderr, "stress: fork child killed by signal %d\n", WTERMSIG(st));
        ADD(crashes, 1);
    }
    ADD(forks, 1);
}

static void *worker(void *arg)
{
    int id = (int)(intptr_t)arg;
    uint64_t rnd = (uint64_t)id * 104729 + 3;
    struct stress_ctx own = {.kind = id < 4 && !stress_o.one_context ? STRESS_CTX_OWN
                                                                       : STRESS_CTX_SHARED};
    if (id == 3 && !stress_o.one_context)
        own.kind = STRESS_CTX_PRIMARY; /* Level Zero has none: an own one */
    struct stress_ctx *c = own.kind == STRESS_CTX_SHARED ? &shared_ctx : &own;
    if (c == &own && stress_backend.ctx_new(&own) != 0)
        return NULL;
    stress_backend.ctx_bind(c);
    struct kept kept[KEPT + 1];
    int n = 0, target = 1;
    double next_fork = stress_now() + 0.1;
    while (!LOAD(stop)) {
        if (open_one(c, &rnd, &kept[n]) == 0)
            n++;
        while (n > target)
            close_oldest(c, kept, &n, &rnd);
        target = 1 + (int)(stress_rand(&rnd) % KEPT);
        if (stress_o.destroys && c == &own && stress_rand(&rnd) % 100 == 0) {
            int left = n && stress_rand(&rnd) % 4 == 0 ? n : 0;
            ADD(abandoned, (uint64_t)left);
            while (n && !left)
                close_oldest(c, kept, &n, &rnd);
            stress_backend.ctx_destroy(&own);
            /* Gone with the context, or still mapped (keep semantics). */
            while (n--)
                if (!stress_backend.destroy_keeps())
                    held_del(kept[n].p);
                else
                    held_leak(kept[n].p);
            n = 0;
            stress_backend.ctx_new(&own);
            stress_backend.ctx_bind(&own);
            ADD(destroys, 1);
        }
        if (stress_o.forks && stress_now() >= next_fork) {
            fork_child(c, &rnd);
            next_fork = stress_now() + 0.1;
        }
    }
    while (n)
        close_oldest(c, kept, &n, &rnd);
    __atomic_add_fetch(&closed_workers, 1, __ATOMIC_RELEASE);
    while (!__atomic_load_n(&phase2, __ATOMIC_ACQUIRE))
        stress_sleep_ms(5);
    if (c == &own)
        stress_backend.ctx_destroy(&own);
    return NULL;
}

static uint64_t live_imports(uint64_t *dead_closes)
{
    uint64_t n = 0;
    stress_backend.stats(&n, dead_closes);
    return n;
}

int stress_importer(int s)
{
    sock = s;
    shared_ctx.kind = STRESS_CTX_SHARED;
    if (stress_backend.init(1) != 0 || stress_backend.ctx_new(&shared_ctx) != 0) {
        fprintf(stderr, "stress: importer: init failed\n");
        return 1;
    }
    pthread_t rt, t[STRESS_IMP_THREADS];
    pthread_create(&rt, NULL, receiver, NULL);
    for (int i = 0; i < STRESS_IMP_THREADS; i++)
        pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i);
    while (__atomic_load_n(&closed_workers, __ATOMIC_ACQUIRE) < STRESS_IMP_THREADS ||
           !LOAD(exp_freed))
        stress_sleep_ms(10);
    stress_sleep_ms(stress_o.settle * 1000);
    uint64_t dead = 0, held1 = live_imports(&dead);
    __atomic_store_n(&phase2, 1, __ATOMIC_RELEASE);
    for (int i = 0; i < STRESS_IMP_THREADS; i++)
        pthread_join(t[i], NULL);
    stress_backend.ctx_destroy(&shared_ctx);
    STORE(imp_done, 1);
    pthread_join(rt, NULL);
    while (!LOAD(exp_exited))
        stress_sleep_ms(10);
    stress_sleep_ms(stress_o.settle * 1000);
    uint64_t held2 = live_imports(&dead), ok = stress_backend.destroy_keeps() ? LOAD(abandoned) : 0;
    uint64_t most = held1 > held2 ? held1 : held2;
    fprintf(stderr, "stress: %llu mappings held after the exporter freed everything, "
            "%llu after it exited and every context was destroyed (%llu left open natively)\n",
            (unsigned long long)held1, (unsigned long long)held2, (unsigned long long)ok);
    if (most > ok)
        ADD(held_after, most - ok);
    ADD(dead_ctx_closes, dead);
    return 0;
}
