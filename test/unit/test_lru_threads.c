/* SPDX-License-Identifier: MIT */
/*
 * test_lru_threads.c - the LRU cache at scale (bound under 1e6 inserts,
 * sharded capacity, bytes per entry), under 16 threads, across fork(), and
 * the pointer map. Part of the test_lru binary (main is in test_lru.c).
 * LRU_TEST_SCALE=0.1 shortens the long loops (sanitizer builds).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "cache/lru.h"
#include "cache/lru_internal.h"
#include "cache/ptrmap.h"

/* Defined in test_lru.c. */
#define KLEN 16
#define KB(k) mkb((unsigned char[KLEN]){0}, (uint64_t)(k))
#define INS(c, k, v, ref, ex) byval_lru_insert((c), KB(k), (void *)(uintptr_t)(v), (ref), (ex))
#define GET(c, k, ref, v) byval_lru_get((c), KB(k), (ref), (v))
#define PUT(c, k) byval_lru_put((c), KB(k))
#define RM(c, k) byval_lru_remove((c), KB(k))
unsigned char *mkb(unsigned char *b, uint64_t k);
uint64_t key_of(const void *key);
uint64_t rnd(uint64_t *s);
byval_lru_stats_t stats(byval_lru_t *lru);
void test_bound_1m_inserts_random_refs(void **state);
void test_sharded_bound_and_bytes(void **state);
void test_threads_16_shared_keys(void **state);
void test_fork_child_empty_no_callback(void **state);
void test_fork_while_hammered(void **state);
void test_ptrmap(void **state);

static long scaled(long n, long min)
{
    const char *s = getenv("LRU_TEST_SCALE");
    double f = s ? strtod(s, NULL) : 1.0;
    long r = (long)(n * (f > 0 && f <= 1 ? f : 1.0));
    return r < min ? min : r;
}

static void count_evict(void *ctx, const void *key, void *value)
{
    atomic_fetch_add((atomic_long *)ctx, 1);
}

/* ---- holds its bound under 1,000,000 inserts with random references --- */

#define BKEYS 5000
#define BHOLD 64

typedef struct bound {
    uint32_t held[BKEYS]; /* references the test holds, per key */
    long released;
    int bad;
} bound_t;

static void bound_evict(void *ctx, const void *key, void *value)
{
    bound_t *b = ctx;
    uint64_t k = key_of(key);
    if (k >= BKEYS || (uintptr_t)value != k + 1 || b->held[k] != 0)
        b->bad++; /* wrong value, or an entry the test holds */
    b->released++;
}

void test_bound_1m_inserts_random_refs(void **state)
{
    bound_t *b = calloc(1, sizeof(*b));
    const size_t cap = 1000;
    byval_lru_t *lru = byval_lru_create(cap, KLEN, bound_evict, b);
    uint32_t ring[BHOLD];
    size_t nheld = 0, head = 0;
    uint64_t seed = 42;
    long n = scaled(1000000, 20000), stored = 0;
    for (long i = 0; i < n; i++) {
        uint32_t k = (uint32_t)(rnd(&seed) % BKEYS);
        int ref = rnd(&seed) % 8 == 0;
        int rc = INS(lru, k, k + 1, ref, NULL);
        assert_true(rc == BYVAL_LRU_OK || rc == BYVAL_LRU_EXISTS); /* never FULL */
        stored += rc == BYVAL_LRU_OK;
        if (ref) {
            if (nheld == BHOLD) { /* drop the oldest reference */
                uint32_t o = ring[head];
                head = (head + 1) % BHOLD;
                nheld--;
                b->held[o]--;
                assert_true(PUT(lru, o) >= 0);
            }
            ring[(head + nheld++) % BHOLD] = k;
            b->held[k]++;
        }
        if (i % 3 == 0) /* touch another key: shuffles the LRU order */
            GET(lru, rnd(&seed) % BKEYS, 0, NULL);
        if ((i & 255) == 255) {
            byval_lru_stats_t st = stats(lru);
            assert_true(st.size <= cap);
            assert_true(st.high_water <= cap);
            assert_int_equal(b->bad, 0);
        }
    }
    byval_lru_stats_t st = stats(lru);
    assert_true(st.size <= cap && st.size >= cap * 9 / 10);
    assert_int_equal(st.inserts, stored);
    assert_int_equal(st.evictions, stored - (long)st.size);
    assert_int_equal(st.evictions, b->released);
    while (nheld--) {
        b->held[ring[head]]--;
        assert_true(PUT(lru, ring[head]) >= 0);
        head = (head + 1) % BHOLD;
    }
    assert_int_equal(stats(lru).referenced, 0);
    byval_lru_destroy(lru);
    assert_int_equal(b->released, stored); /* every stored value released once */
    assert_int_equal(b->bad, 0);
    free(b);
}

/* ---- sharded capacity, bytes per entry --------------------------------- */

#define SKLEN 48

void test_sharded_bound_and_bytes(void **state)
{
    const size_t cap = 100000;
    atomic_long released = 0;
    byval_lru_t *lru = byval_lru_create(cap, SKLEN, count_evict, &released);
    unsigned char key[SKLEN] = {0};
    size_t sum = 0;
    assert_true(lru->nshards > 1);
    for (unsigned i = 0; i < lru->nshards; i++)
        sum += lru->shards[i].capacity;
    assert_int_equal(sum, cap);
    long n = (long)cap + scaled(50000, 20000);
    key[SKLEN - 1] = 0x5a;
    for (long i = 0; i < n; i++) {
        memcpy(key + 20, &i, sizeof(i));
        assert_int_equal(byval_lru_insert(lru, key, NULL, i < 1000, NULL), BYVAL_LRU_OK);
        if ((i & 4095) == 0)
            assert_true(stats(lru).size <= cap);
    }
    byval_lru_stats_t st = stats(lru);
    printf("%u shards, %zu entries, %zu bytes per entry\n", lru->nshards, st.size,
           st.bytes_per_entry);
    assert_int_equal(st.size, cap); /* every shard saw more than its share */
    assert_true(st.high_water <= cap);
    assert_int_equal(st.evictions, n - (long)cap);
    assert_int_equal(released, n - (long)cap);
    assert_int_equal(st.referenced, 1000);
    assert_true(st.size >= 10000 && st.bytes_per_entry <= 128);
    for (long i = 0; i < 1000; i++) { /* the referenced ones survived */
        memcpy(key + 20, &i, sizeof(i));
        assert_int_equal(byval_lru_put(lru, key), 0);
    }
    byval_lru_set_capacity(lru, cap / 10);
    st = stats(lru);
    assert_int_equal(st.size, cap / 10); /* nothing referenced: trimmed exactly */
    byval_lru_destroy(lru);
    assert_int_equal(released, n);
}

/* ---- 16 threads -------------------------------------------------------- */

#define TTHREADS 16
#define THOLD 4

typedef struct inst {
    atomic_int state; /* 0 in the cache, 1 released, 2 never stored */
    uint32_t key;
} inst_t;

typedef struct tshared {
    byval_lru_t *lru;
    uint32_t nkeys;
    long ops;
    inst_t *pool;
    atomic_long next, stored, released;
    atomic_int bad;
} tshared_t;

typedef struct targ {
    tshared_t *sh;
    uint64_t seed;
} targ_t;

static void inst_evict(void *ctx, const void *key, void *value)
{
    tshared_t *sh = ctx;
    inst_t *in = value;
    if (in->key != key_of(key) || atomic_exchange(&in->state, 1) != 0)
        atomic_fetch_add(&sh->bad, 1); /* not its key, released twice, never stored */
    atomic_fetch_add(&sh->released, 1);
}

static void *hammer_refs(void *p)
{
    targ_t *a = p;
    tshared_t *sh = a->sh;
    uint32_t hold[THOLD];
    int nh = 0;
    for (long i = 0; i < sh->ops; i++) {
        uint32_t k = (uint32_t)(rnd(&a->seed) % sh->nkeys), op = rnd(&a->seed) % 8;
        int got = 0;
        if (op < 2) {
            got = GET(sh->lru, k, 1, NULL);
        } else if (op == 2) {
            GET(sh->lru, k, 0, NULL);
        } else if (op < 5) {
            inst_t *in = &sh->pool[atomic_fetch_add(&sh->next, 1)];
            in->key = k;
            int rc = INS(sh->lru, k, in, op == 3, NULL);
            if (rc == BYVAL_LRU_OK)
                atomic_fetch_add(&sh->stored, 1);
            else
                atomic_store(&in->state, 2);
            got = op == 3 && rc >= 0;
        } else if (op < 7 && nh) {
            int j = (int)(rnd(&a->seed) % (uint64_t)nh);
            if (PUT(sh->lru, hold[j]) < 0) /* a held reference must exist */
                atomic_fetch_add(&sh->bad, 1);
            hold[j] = hold[--nh];
        } else if (op == 7) {
            RM(sh->lru, k);
        }
        if (got && nh == THOLD && PUT(sh->lru, k) < 0)
            atomic_fetch_add(&sh->bad, 1);
        else if (got && nh < THOLD)
            hold[nh++] = k;
    }
    while (nh)
        if (PUT(sh->lru, hold[--nh]) < 0)
            atomic_fetch_add(&sh->bad, 1);
    return NULL;
}

static void threads_run(size_t cap, uint32_t nkeys)
{
    tshared_t sh = {.nkeys = nkeys, .ops = scaled(20000, 2000)};
    pthread_t t[TTHREADS];
    targ_t a[TTHREADS];
    sh.pool = calloc((size_t)(sh.ops * TTHREADS), sizeof(inst_t));
    sh.lru = byval_lru_create(cap, KLEN, inst_evict, &sh);
    for (int i = 0; i < TTHREADS; i++) {
        a[i] = (targ_t){&sh, 0x1234567ULL * (uint64_t)(i + 1)};
        assert_int_equal(pthread_create(&t[i], NULL, hammer_refs, &a[i]), 0);
    }
    for (int i = 0; i < TTHREADS; i++)
        pthread_join(t[i], NULL);
    byval_lru_stats_t st = stats(sh.lru);
    assert_int_equal(st.referenced, 0);
    assert_true(st.size <= cap && st.high_water <= cap);
    assert_int_equal(st.inserts, sh.stored);
    byval_lru_destroy(sh.lru);
    assert_int_equal(sh.bad, 0);
    assert_int_equal(sh.released, sh.stored);
    long released = 0;
    for (long i = 0; i < sh.next; i++)
        released += atomic_load(&sh.pool[i].state) == 1;
    assert_int_equal(released, sh.stored); /* each stored instance exactly once */
    free(sh.pool);
}

void test_threads_16_shared_keys(void **state)
{
    threads_run(16, 32);   /* one shard, FULL happens */
    threads_run(128, 160); /* two shards */
}

/* ---- fork --------------------------------------------------------------- */

typedef struct forkctx {
    int fd, report, count;
} forkctx_t;

static void fork_evict(void *ctx, const void *key, void *value)
{
    forkctx_t *f = ctx;
    pid_t me = getpid();
    f->count++;
    if (f->report && write(f->fd, &me, sizeof(me)) != sizeof(me))
        f->count += 1000;
}

void test_fork_child_empty_no_callback(void **state)
{
    int p[2];
    assert_int_equal(pipe2(p, O_NONBLOCK | O_CLOEXEC), 0);
    forkctx_t f = {.fd = p[1], .report = 1};
    byval_lru_t *lru = byval_lru_create(16, KLEN, fork_evict, &f);
    for (int i = 0; i < 5; i++)
        INS(lru, i, 0x100 + i, i < 2, NULL);
    RM(lru, 1); /* zombie */
    GET(lru, 2, 0, NULL);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        alarm(10);
        int rc = 0;
        byval_lru_stats_t st = stats(lru);
        if (st.size || st.referenced || st.hits || st.inserts || st.removals || st.high_water)
            rc |= 1; /* not empty, stats not zeroed */
        if (st.capacity != 16 || GET(lru, 2, 0, NULL) || PUT(lru, 1) != BYVAL_LRU_NOENT)
            rc |= 2;
        if (f.count) /* a callback ran in the child at fork */
            rc |= 4;
        f.report = 0; /* from here the callbacks are the child's own */
        if (INS(lru, 9, 9, 0, NULL) || !GET(lru, 9, 0, NULL) || RM(lru, 9) || f.count != 1)
            rc |= 8; /* the child's cache is usable */
        _exit(rc);
    }
    int ws;
    pid_t me = getpid(), who = 0;
    assert_int_equal(waitpid(child, &ws, 0), child);
    assert_true(WIFEXITED(ws));
    assert_int_equal(WEXITSTATUS(ws), 0);
    assert_int_equal(read(p[0], &who, sizeof(who)), -1); /* nothing from the child */
    assert_int_equal(errno, EAGAIN);
    byval_lru_stats_t st = stats(lru); /* the parent's cache intact */
    assert_int_equal(st.size, 4);
    assert_int_equal(st.referenced, 1);
    void *v = NULL;
    assert_int_equal(GET(lru, 2, 0, &v), 1);
    assert_ptr_equal(v, (void *)0x102);
    assert_int_equal(PUT(lru, 1), 0); /* the zombie, released here */
    assert_int_equal(read(p[0], &who, sizeof(who)), sizeof(who));
    assert_int_equal(who, me);
    byval_lru_destroy(lru);
    assert_int_equal(f.count, 5);
    close(p[0]);
    close(p[1]);
}

typedef struct hammer {
    byval_lru_t *lru;
    atomic_int *stop;
    uint64_t seed;
} hammer_t;

static void *hammer_plain(void *p)
{
    hammer_t *h = p;
    while (!atomic_load(h->stop)) {
        uint64_t k = rnd(&h->seed) % 256;
        if (GET(h->lru, k, 1, NULL))
            PUT(h->lru, k);
        INS(h->lru, k, k, 0, NULL);
        if (k % 7 == 0)
            RM(h->lru, k);
        (void)stats(h->lru);
    }
    return NULL;
}

void test_fork_while_hammered(void **state)
{
    atomic_long released = 0;
    atomic_int stop = 0;
    byval_lru_t *lru = byval_lru_create(128, KLEN, count_evict, &released);
    pthread_t t[3];
    hammer_t h[3];
    for (int i = 0; i < 3; i++) {
        h[i] = (hammer_t){lru, &stop, 77u + (uint64_t)i};
        assert_int_equal(pthread_create(&t[i], NULL, hammer_plain, &h[i]), 0);
    }
    long forks = scaled(200, 20);
    for (long i = 0; i < forks; i++) {
        pid_t child = fork();
        assert_true(child >= 0);
        if (child == 0) {
            alarm(5); /* a deadlock in the child ends it with SIGALRM */
            int rc = stats(lru).size != 0 || stats(lru).inserts != 0;
            byval_lru_t *other = byval_lru_create(4, KLEN, NULL, NULL); /* registry lock */
            rc |= INS(lru, 1, 1, 1, NULL) != BYVAL_LRU_OK || PUT(lru, 1) != 0 || !other;
            byval_lru_destroy(other);
            _exit(rc);
        }
        int ws;
        assert_int_equal(waitpid(child, &ws, 0), child);
        if (!WIFEXITED(ws))
            fail_msg("child %ld died with signal %d", i, WTERMSIG(ws));
        assert_int_equal(WEXITSTATUS(ws), 0);
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    assert_true(stats(lru).size <= 128);
    byval_lru_destroy(lru);
}

/* ---- ptrmap -------------------------------------------------------------- */

void test_ptrmap(void **state)
{
    byval_ptrmap_t *m = byval_ptrmap_create(KLEN);
    unsigned char out[KLEN];
    assert_non_null(m);
    assert_int_equal(byval_ptrmap_ref(m, 0x1000, KB(1)), 1);
    assert_int_equal(byval_ptrmap_ref(m, 0x1000, KB(1)), 2);
    assert_int_equal(byval_ptrmap_ref(m, 0x1000, KB(2)), -1); /* key mismatch */
    assert_int_equal(byval_ptrmap_ref(m, 0x2000, KB(2)), 1);
    assert_int_equal(byval_ptrmap_size(m), 2);
    assert_int_equal(byval_ptrmap_unref(m, 0x1000, out), 1); /* mismatch added none */
    assert_memory_equal(out, KB(1), KLEN);
    assert_int_equal(byval_ptrmap_unref(m, 0x3000, out), -1); /* unknown */
    assert_int_equal(byval_ptrmap_unref(m, 0x1000, NULL), 0);
    assert_int_equal(byval_ptrmap_unref(m, 0x1000, NULL), -1); /* gone at 0 */
    assert_int_equal(byval_ptrmap_size(m), 1);
    assert_int_equal(byval_ptrmap_ref(NULL, 0x1000, KB(1)), -1);
    assert_int_equal(byval_ptrmap_ref(m, 0x1000, NULL), -1);
    assert_int_equal(byval_ptrmap_unref(NULL, 0x1000, NULL), -1);
    for (uintptr_t p = 16; p < 10016; p++) /* 0x2000 is mapped already */
        assert_int_equal(byval_ptrmap_ref(m, p << 12, KB(p)), 1);
    assert_int_equal(byval_ptrmap_size(m), 10001);
    assert_int_equal(byval_ptrmap_unref(m, 77 << 12, out), 0);
    assert_memory_equal(out, KB(77), KLEN);
    byval_ptrmap_clear(m); /* forgets everything (entries freed: ASan) */
    assert_int_equal(byval_ptrmap_size(m), 0);
    assert_int_equal(byval_ptrmap_unref(m, 0x2000, NULL), -1);
    assert_int_equal(byval_ptrmap_ref(m, 0x2000, KB(3)), 1); /* usable after */
    byval_ptrmap_destroy(m);
}
