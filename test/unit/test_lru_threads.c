/* SPDX-License-Identifier: MIT */
/* test_lru_threads.c - part of test_lru (main in test_lru.c): shared helpers,
 * bound under 1e6 inserts, bytes per entry, 16 threads, fork. LRU_TEST_SCALE=0.1 shortens the long loops; sanitizer builds
 * default to 0.2. */
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
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

#include "test/unit/test_lru.h"
unsigned char *mkb(unsigned char *b, uint64_t k)
{
    return memcpy(b, &k, sizeof(k)); /* the rest stays zero */
}

uint64_t key_of(const void *key)
{
    uint64_t k;
    memcpy(&k, key, sizeof(k));
    return k;
}

uint64_t rnd(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1DULL;
}

byval_lru_stats_t stats(byval_lru_t *lru)
{
    byval_lru_stats_t st;
    byval_lru_stats(lru, &st);
    return st;
}

void expect_stats(byval_lru_t *lru, const long *want, int line)
{
    static const char *name[] = {"size", "ref'd", "hits", "misses", "inserts", "evict", "rm"};
    byval_lru_stats_t st = stats(lru);
    const long got[7] = {(long)st.size, (long)st.referenced, (long)st.hits, (long)st.misses,
                         (long)st.inserts, (long)st.evictions, (long)st.removals};
    for (int i = 0; i < 7; i++)
        if (want[i] >= 0 && want[i] != got[i])
            fail_msg("line %d: stats.%s = %ld, expected %ld", line, name[i], got[i], want[i]);
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SCALE_DEFAULT 0.2
#else
#define SCALE_DEFAULT 1.0
#endif

long scaled(long n, long min)
{
    const char *e = getenv("LRU_TEST_SCALE");
    double f = e ? strtod(e, NULL) : SCALE_DEFAULT;
    long r = (long)((double)n * (f > 0 && f <= 1 ? f : 1.0));
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
    long released, bad;
} bound_t;

static void bound_evict(void *ctx, const void *key, void *value)
{
    bound_t *b = ctx;
    uint64_t k = key_of(key);
    b->bad += k >= BKEYS || (uintptr_t)value != k + 1 || b->held[k] != 0;
    b->released++;
}

void test_bound_1m_inserts_random_refs(void **state)
{
    bound_t *b = calloc(1, sizeof(*b));
    const long cap = 1000;
    byval_lru_t *lru = byval_lru_create((size_t)cap, KLEN, bound_evict, b);
    uint32_t hold[BHOLD] = {0}; /* keys referenced (1..BKEYS-1), 0 = free slot */
    uint64_t seed = 42;
    long n = scaled(1000000, 20000), stored = 0;
    for (long i = 0; i < n; i++) {
        uint32_t k = 1 + (uint32_t)(rnd(&seed) % (BKEYS - 1)), *slot = &hold[rnd(&seed) % BHOLD];
        int ref = rnd(&seed) % 8 == 0, rc = INS(lru, k, k + 1, ref, NULL);
        assert_true(rc == BYVAL_LRU_OK || rc == BYVAL_LRU_EXISTS); /* never FULL */
        stored += rc == BYVAL_LRU_OK;
        if (ref && *slot) { /* drop the reference held in the slot */
            b->held[*slot]--;
            assert_true(PUT(lru, *slot) >= 0);
        }
        if (ref)
            b->held[*slot = k]++;
        GET(lru, rnd(&seed) % BKEYS, 0, NULL); /* shuffles the LRU order */
        if ((i & 255) == 255)
            assert_true(stats(lru).size <= (size_t)cap && stats(lru).high_water <= (size_t)cap);
    }
    EXPECT(lru, cap, -1, -1, -1, stored, stored - cap, 0); /* every shard full */
    assert_int_equal(b->released, stored - cap);
    for (int j = 0; j < BHOLD; j++) {
        if (hold[j]) {
            b->held[hold[j]]--;
            assert_true(PUT(lru, hold[j]) >= 0);
        }
    }
    assert_int_equal(stats(lru).referenced, 0);
    byval_lru_destroy(lru);
    assert_int_equal(b->released, stored); /* every stored value released once */
    assert_int_equal(b->bad, 0);
    free(b);
}

/* ---- bound and bytes per entry --------------------------------------- */
/* bytes_per_entry of a cache of `cap` keys of key_len bytes, filled. */
static size_t full_bytes(size_t cap, size_t key_len)
{
    byval_lru_t *lru = byval_lru_create(cap, key_len, NULL, NULL);
    unsigned char key[128] = {0};
    for (size_t i = 0; i < cap; i++) {
        memcpy(key, &i, sizeof(i));
        assert_int_equal(byval_lru_insert(lru, key, NULL, 0, NULL), BYVAL_LRU_OK);
    }
    byval_lru_stats_t st = stats(lru);
    assert_int_equal(st.size, cap);
    byval_lru_destroy(lru);
    return st.bytes_per_entry;
}

void test_bound_and_bytes(void **state)
{
    const long cap = 100000, n = cap + scaled(50000, 20000);
    atomic_long released = 0;
    byval_lru_t *lru = byval_lru_create((size_t)cap, 48, count_evict, &released);
    unsigned char key[48] = {[47] = 0x5a};
    for (long i = 0; i < n; i++) {
        memcpy(key + 20, &i, sizeof(i));
        assert_int_equal(byval_lru_insert(lru, key, NULL, i < 1000, NULL), BYVAL_LRU_OK);
        if ((i & 4095) == 0)
            assert_true(stats(lru).size <= (size_t)cap);
    }
    byval_lru_stats_t st = stats(lru);
    printf("%zu entries, %zu bytes each\n", st.size, st.bytes_per_entry);
    EXPECT(lru, cap, 1000, 0, 0, n, n - cap, 0);
    assert_true(st.high_water <= (size_t)cap && st.capacity == (size_t)cap);
    assert_int_equal(released, n - cap);
    /* At least the slot (24 bytes + key) and a 4-byte bucket; at most 128. */
    assert_true(st.bytes_per_entry >= 24 + 48 + 4 && st.bytes_per_entry <= 128);
    for (long i = 0; i < 1000; i++) { /* the referenced ones survived */
        memcpy(key + 20, &i, sizeof(i));
        assert_int_equal(byval_lru_put(lru, key), 0);
    }
    byval_lru_set_capacity(lru, (size_t)cap / 10);
    EXPECT(lru, cap / 10, 0, -1, -1, -1, n - cap / 10, 0); /* trimmed exactly */
    byval_lru_destroy(lru);
    assert_int_equal(released, n);
    /* Full caches of the key sizes the shim uses (40 ze export, 48 ze
     * import, 80 CUDA): <= 128 bytes an entry, every chunk, bucket array
     * and directory counted. */
    const size_t caps[] = {16, 1000, 70000, 100000}, keys[] = {40, 48, 80};
    for (size_t c = 0; c < 4; c++)
        for (size_t k = 0; k < 3; k++) {
            size_t b = full_bytes(caps[c], keys[k]);
            if (b > 128 || b < 24 + keys[k])
                printf("capacity %zu, key %zu: %zu bytes an entry\n", caps[c], keys[k], b);
            assert_true(b <= 128 && b >= 24 + keys[k]);
        }
}

/* ---- 16 threads on a small key set --------------------------------------- */
#define TTHREADS 16
#define THOLD 4
typedef struct inst {
    atomic_int state; /* 0 in the cache, 1 released, 2 never stored */
    uint32_t key;
} inst_t;

typedef struct tshared {
    byval_lru_t *lru;
    inst_t *pool;
    long ops, nkeys;
    atomic_long next, stored, released;
    atomic_int bad;
} tshared_t;

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
    tshared_t *sh = p;
    uint64_t s = (uint64_t)pthread_self() | 1, *seed = &s;
    uint32_t hold[THOLD];
    int nh = 0;
    for (long i = 0; i < sh->ops || nh; i++) {
        uint32_t k = (uint32_t)(rnd(seed) % (uint64_t)sh->nkeys), op = rnd(seed) % 8;
        int got = 0;
        if (i >= sh->ops || (op >= 5 && op < 7 && nh)) { /* put a held reference */
            int j = (int)(rnd(seed) % (uint64_t)nh);
            atomic_fetch_add(&sh->bad, PUT(sh->lru, hold[j]) < 0); /* it must exist */
            hold[j] = hold[--nh];
        } else if (op < 3) {
            got = GET(sh->lru, k, op < 2, NULL) && op < 2;
        } else if (op < 5) {
            inst_t *in = &sh->pool[atomic_fetch_add(&sh->next, 1)];
            in->key = k;
            int rc = INS(sh->lru, k, in, op == 3, NULL);
            if (rc == BYVAL_LRU_OK)
                atomic_fetch_add(&sh->stored, 1);
            else
                atomic_store(&in->state, 2);
            got = op == 3 && rc >= 0; /* OK or EXISTS: referenced */
        } else if (op == 7) {
            RM(sh->lru, k);
        }
        if (got && nh == THOLD)
            atomic_fetch_add(&sh->bad, PUT(sh->lru, k) < 0);
        else if (got)
            hold[nh++] = k;
    }
    return NULL;
}

static void threads_run(size_t cap, uint32_t nkeys)
{
    tshared_t sh = {.nkeys = (long)nkeys, .ops = scaled(20000, 2000)};
    pthread_t t[TTHREADS];
    sh.pool = calloc((size_t)(sh.ops * TTHREADS), sizeof(inst_t));
    sh.lru = byval_lru_create(cap, KLEN, inst_evict, &sh);
    for (int i = 0; i < TTHREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, hammer_refs, &sh), 0);
    for (int i = 0; i < TTHREADS; i++)
        pthread_join(t[i], NULL);
    EXPECT(sh.lru, -1, 0, -1, -1, sh.stored, -1, -1);
    assert_true(stats(sh.lru).high_water <= cap);
    byval_lru_destroy(sh.lru);
    assert_int_equal(sh.bad, 0); /* no double release, none of a value never stored */
    assert_int_equal(sh.released, sh.stored); /* so: each stored value exactly once */
    free(sh.pool);
}

void test_threads_16_shared_keys(void **state)
{
    threads_run(16, 32);   /* one shard, FULL happens */
    threads_run(32, 48);   /* FULL happens */
    threads_run(128, 160); /* evictions under contention */
}

/* ---- fork ----------------------------------------------------------------- */
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
    int p[2], ws;
    assert_int_equal(pipe2(p, O_NONBLOCK | O_CLOEXEC), 0);
    forkctx_t f = {.fd = p[1], .report = 1};
    byval_lru_t *lru = byval_lru_create(16, KLEN, fork_evict, &f);
    for (int i = 0; i < 5; i++)
        INS(lru, i, 0x100 + i, i < 2, NULL);
    RM(lru, 1); /* a zombie */
    GET(lru, 2, 0, NULL);
    pid_t child = fork(), me = getpid(), who = 0;
    assert_true(child >= 0);
    if (child == 0) { /* no cmocka asserts here: the exit code says it */
        alarm(10);
        byval_lru_stats_t st = stats(lru);
        int rc = (st.size || st.referenced || st.hits || st.inserts || st.high_water) << 0;
        rc |= (st.capacity != 16 || GET(lru, 2, 0, NULL) || PUT(lru, 1) != BYVAL_LRU_NOENT) << 1;
        rc |= (f.count != 0) << 2; /* a callback ran in the child */
        f.report = 0;              /* from here the callbacks are the child's own */
        rc |= (INS(lru, 9, 9, 0, NULL) || !GET(lru, 9, 0, NULL) || RM(lru, 9) || f.count != 1) << 3;
        _exit(rc);
    }
    assert_true(waitpid(child, &ws, 0) == child && WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
    assert_true(read(p[0], &who, sizeof(who)) == -1 && errno == EAGAIN); /* none from it */
    EXPECT(lru, 4, 1, 1, 0, 5, 0, 1); /* the parent's cache intact */
    void *v = NULL;
    assert_true(GET(lru, 2, 0, &v) == 1 && v == (void *)0x102);
    assert_int_equal(PUT(lru, 1), 0); /* the zombie, released here */
    assert_true(read(p[0], &who, sizeof(who)) == sizeof(who) && who == me);
    byval_lru_destroy(lru);
    assert_int_equal(f.count, 5);
    assert_true(close(p[0]) == 0 && close(p[1]) == 0);
}

static atomic_int hammer_stop;

static void *hammer_plain(void *lru)
{
    for (uint64_t seed = (uint64_t)pthread_self() | 1; !atomic_load(&hammer_stop);) {
        uint64_t k = rnd(&seed) % 256;
        if (GET(lru, k, 1, NULL))
            PUT(lru, k);
        INS(lru, k, k, 0, NULL);
        if (k % 7 == 0)
            RM(lru, k);
        (void)stats(lru);
    }
    return NULL;
}

void test_fork_while_hammered(void **state)
{
    static atomic_long released;
    byval_lru_t *lru = byval_lru_create(128, KLEN, count_evict, &released);
    pthread_t t[3];
    atomic_store(&hammer_stop, 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(pthread_create(&t[i], NULL, hammer_plain, lru), 0);
    for (long i = 0, forks = scaled(200, 20); i < forks; i++) {
        int ws;
        pid_t child = fork();
        assert_true(child >= 0);
        if (child == 0) {
            alarm(5); /* a deadlock in the child ends it with SIGALRM */
            byval_lru_t *other = byval_lru_create(4, KLEN, NULL, NULL); /* registry lock */
            int rc = stats(lru).size != 0 || stats(lru).inserts != 0 || !other;
            rc |= INS(lru, 1, 1, 1, NULL) != BYVAL_LRU_OK || PUT(lru, 1) != 0;
            byval_lru_destroy(other);
            _exit(rc);
        }
        assert_int_equal(waitpid(child, &ws, 0), child);
        if (!WIFEXITED(ws))
            fail_msg("fork %ld: child killed by signal %d", i, WTERMSIG(ws));
        assert_int_equal(WEXITSTATUS(ws), 0);
    }
    atomic_store(&hammer_stop, 1);
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    assert_true(stats(lru).size <= 128);
    byval_lru_destroy(lru);
}
