/* SPDX-License-Identifier: MIT */
/*
 * test_lru_ref.c - part of test_lru (main in test_lru.c): reference
 * handles (get_ref, insert_ref, put_ref). A handle names one entry, so its
 * put reaches that entry and no other: not a newer entry under the same
 * key, not a slot reused since. Then threads that hold handles while
 * others remove and re-insert their keys.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cache/lru.h"

#include "test/unit/test_lru.h"

typedef struct rlog {
    int n;
    uintptr_t val[MAXREL]; /* in release order */
} rlog_t;

static void rlog_evict(void *ctx, const void *key, void *value)
{
    rlog_t *l = ctx;
    if (l->n < MAXREL)
        l->val[l->n] = (uintptr_t)value;
    l->n++;
}

#define IDX(r) ((uint32_t)((r) >> 32))

void test_ref_basics(void **state)
{
    rlog_t l = {0};
    byval_lru_t *lru = byval_lru_create(2, KLEN, rlog_evict, &l);
    byval_lru_ref_t r1 = 77, r = 77, r2;
    void *v = NULL;
    /* A miss gives no handle; nothing is made up for bad arguments. */
    assert_true(byval_lru_get_ref(lru, KB(1), &v, &r1) == 0 && r1 == 0);
    assert_true(byval_lru_get_ref(NULL, KB(1), &v, &r) == 0 && r == 0);
    r = 77;
    assert_true(byval_lru_insert_ref(lru, NULL, V(1), NULL, &r) == BYVAL_LRU_NOENT && r == 0);
    assert_int_equal(byval_lru_put_ref(lru, 0), BYVAL_LRU_NOENT);
    assert_int_equal(byval_lru_put_ref(lru, UINT64_MAX), BYVAL_LRU_NOENT); /* no such slot */
    assert_int_equal(byval_lru_put_ref(lru, (uint64_t)1 << 32), BYVAL_LRU_NOENT);
    /* insert_ref: referenced, with the entry's handle; get_ref: the same. */
    assert_int_equal(byval_lru_insert_ref(lru, KB(1), V(1), NULL, &r1), BYVAL_LRU_OK);
    assert_true(r1 != 0 && IDX(r1) != 0);
    assert_int_equal(byval_lru_put_ref(NULL, r1), BYVAL_LRU_NOENT);
    EXPECT(lru, 1, 1, 0, 1, 1, 0, 0);
    assert_true(byval_lru_get_ref(lru, KB(1), &v, &r) == 1 && v == V(1) && r == r1);
    EXPECT(lru, 1, 1, 1, 1, 1, 0, 0);
    assert_int_equal(byval_lru_put_ref(lru, r1), 1);
    assert_int_equal(byval_lru_put_ref(lru, r1), 0);
    assert_int_equal(byval_lru_put_ref(lru, r1), BYVAL_LRU_NOENT); /* none held */
    EXPECT(lru, 1, 0, 1, 1, 1, 0, 0);
    /* EXISTS: the existing entry, referenced, and its handle. */
    v = NULL;
    assert_int_equal(byval_lru_insert_ref(lru, KB(1), V(9), &v, &r), BYVAL_LRU_EXISTS);
    assert_true(v == V(1) && r == r1);
    EXPECT(lru, 1, 1, 1, 1, 1, 0, 0);
    assert_int_equal(byval_lru_put(lru, KB(1)), 0); /* any put drops it */
    assert_int_equal(byval_lru_put_ref(lru, r1), BYVAL_LRU_NOENT);
    /* A reused slot has a new generation: the old handle names nothing. */
    assert_int_equal(RM(lru, 1), BYVAL_LRU_OK);
    assert_true(l.n == 1 && l.val[0] == (uintptr_t)V(1));
    assert_int_equal(byval_lru_insert_ref(lru, KB(2), V(2), NULL, &r2), BYVAL_LRU_OK);
    assert_true(IDX(r2) == IDX(r1) && r2 != r1); /* the freed slot, taken again */
    assert_int_equal(byval_lru_put_ref(lru, r1), BYVAL_LRU_NOENT);
    EXPECT(lru, 1, 1, -1, -1, 2, 0, 1); /* r2's reference untouched */
    /* FULL: no handle. Then a capacity shrunk under references is
     * reached when put_ref makes an entry evictable. */
    assert_int_equal(byval_lru_insert_ref(lru, KB(3), V(3), NULL, &r), BYVAL_LRU_OK);
    byval_lru_ref_t r3 = r;
    assert_true(byval_lru_insert_ref(lru, KB(4), V(4), NULL, &r) == BYVAL_LRU_FULL && r == 0);
    byval_lru_set_capacity(lru, 1);
    EXPECT(lru, 2, 2, -1, -1, 3, 0, 1);
    assert_int_equal(byval_lru_put_ref(lru, r2), 0);
    assert_true(l.n == 2 && l.val[1] == (uintptr_t)V(2)); /* trimmed at once */
    EXPECT(lru, 1, 1, -1, -1, 3, 1, 1);
    assert_int_equal(byval_lru_put_ref(lru, r3), 0);
    byval_lru_destroy(lru);
    assert_true(l.n == 3 && l.val[2] == (uintptr_t)V(3));
}

/* A zombie and a newer live entry share a key: each handle's put reaches
 * its own entry; the zombie goes at its last reference, the live one
 * stays cached. */
void test_ref_zombie(void **state)
{
    rlog_t l = {0};
    byval_lru_t *lru = byval_lru_create(8, KLEN, rlog_evict, &l);
    byval_lru_ref_t ra, ra2, rb;
    void *v = NULL;
    assert_int_equal(byval_lru_insert_ref(lru, KB(5), V(1), NULL, &ra), BYVAL_LRU_OK);
    assert_true(byval_lru_get_ref(lru, KB(5), &v, &ra2) == 1 && ra2 == ra);
    assert_int_equal(RM(lru, 5), BYVAL_LRU_OK); /* A: a zombie with 2 references */
    assert_true(byval_lru_get_ref(lru, KB(5), &v, &rb) == 0 && rb == 0);
    assert_int_equal(byval_lru_insert_ref(lru, KB(5), V(2), NULL, &rb), BYVAL_LRU_OK);
    assert_true(rb != ra && l.n == 0);
    assert_int_equal(byval_lru_put_ref(lru, rb), 0); /* B: not A's reference */
    assert_int_equal(l.n, 0);
    assert_int_equal(byval_lru_put_ref(lru, ra), 1);
    assert_int_equal(l.n, 0);
    assert_true(GET(lru, 5, 0, &v) == 1 && v == V(2));
    assert_int_equal(byval_lru_put_ref(lru, ra), 0); /* A's last: released now */
    assert_true(l.n == 1 && l.val[0] == (uintptr_t)V(1));
    assert_int_equal(byval_lru_put_ref(lru, ra), BYVAL_LRU_NOENT);
    assert_int_equal(byval_lru_put_ref(lru, rb), BYVAL_LRU_NOENT); /* B holds none */
    assert_true(GET(lru, 5, 0, &v) == 1 && v == V(2) && l.n == 1);
    EXPECT(lru, 1, 0, -1, -1, 2, 0, 1);
    /* The zombie's slot is free again: a new entry takes it, and neither
     * old handle names the new one. */
    byval_lru_ref_t rc;
    assert_int_equal(byval_lru_insert_ref(lru, KB(6), V(3), NULL, &rc), BYVAL_LRU_OK);
    assert_true(IDX(rc) == IDX(ra) && rc != ra);
    assert_int_equal(byval_lru_put_ref(lru, ra), BYVAL_LRU_NOENT);
    assert_int_equal(byval_lru_put_ref(lru, rc), 0);
    byval_lru_destroy(lru);
    assert_true(l.n == 3 && l.val[1] != (uintptr_t)V(1) && l.val[2] != (uintptr_t)V(1));
}

/* ---- threads hold handles while their keys are removed and re-inserted -- */
#define RHOLDERS 6
#define RCHURN 2
#define RHOLD 4

typedef struct rinst {
    atomic_int state;   /* 0 cached or held, 1 released, 2 never stored */
    atomic_int holders; /* handles held by the test now */
    atomic_ullong ref;  /* the handle insert_ref gave, 0 until known */
    uint32_t key;
} rinst_t;

typedef struct rshared {
    byval_lru_t *lru;
    rinst_t *pool;
    long ops, nkeys, npool;
    atomic_long next, stored, released, holds;
    atomic_int bad, stop;
} rshared_t;

static void rinst_evict(void *ctx, const void *key, void *value)
{
    rshared_t *sh = ctx;
    rinst_t *in = value;
    /* Released while a holder has it, twice, or with another key. */
    if (in->key != key_of(key) || atomic_load(&in->holders) != 0 ||
        atomic_exchange(&in->state, 1) != 0)
        atomic_fetch_add(&sh->bad, 1);
    atomic_fetch_add(&sh->released, 1);
}

static rinst_t *rinst_new(rshared_t *sh, uint32_t k)
{
    long i = atomic_fetch_add(&sh->next, 1);
    if (i >= sh->npool)
        return NULL;
    rinst_t *in = &sh->pool[i];
    in->key = k;
    return in;
}

typedef struct held {
    rinst_t *in;
    byval_lru_ref_t ref;
} held_t;

static void hold_check(rshared_t *sh, rinst_t *in, uint32_t k, byval_lru_ref_t ref)
{
    unsigned long long known = atomic_load(&in->ref);
    atomic_fetch_add(&in->holders, 1);
    if (in->key != k || atomic_load(&in->state) != 0 || !ref || (known && known != ref))
        atomic_fetch_add(&sh->bad, 1);
    atomic_fetch_add(&sh->holds, 1);
}

static void drop(rshared_t *sh, held_t *h)
{
    if (atomic_load(&h->in->state) != 0) /* released while held */
        atomic_fetch_add(&sh->bad, 1);
    atomic_fetch_sub(&h->in->holders, 1);
    if (byval_lru_put_ref(sh->lru, h->ref) < 0)
        atomic_fetch_add(&sh->bad, 1); /* the handle must still name it */
}

static void *holder(void *p)
{
    rshared_t *sh = p;
    uint64_t s = (uint64_t)pthread_self() | 1;
    held_t hold[RHOLD];
    int nh = 0;
    for (long i = 0; i < sh->ops || nh; i++) {
        uint32_t k = (uint32_t)(rnd(&s) % (uint64_t)sh->nkeys);
        if (i >= sh->ops || (nh && rnd(&s) % 2)) {
            int j = (int)(rnd(&s) % (uint64_t)nh);
            drop(sh, &hold[j]);
            hold[j] = hold[--nh];
            continue;
        }
        if (nh == RHOLD)
            continue;
        void *v = NULL;
        byval_lru_ref_t ref = 0;
        if (rnd(&s) % 4 == 0) { /* insert_ref: ours or the existing entry */
            rinst_t *in = rinst_new(sh, k);
            if (!in)
                continue;
            int rc = byval_lru_insert_ref(sh->lru, KB(k), in, &v, &ref);
            if (rc == BYVAL_LRU_OK) {
                atomic_store(&in->ref, ref);
                atomic_fetch_add(&sh->stored, 1);
                v = in;
            } else {
                atomic_store(&in->state, 2);
                if (rc != BYVAL_LRU_EXISTS)
                    continue;
            }
        } else if (!byval_lru_get_ref(sh->lru, KB(k), &v, &ref)) {
            continue;
        }
        hold_check(sh, v, k, ref);
        hold[nh++] = (held_t){v, ref};
    }
    return NULL;
}

static void *churn(void *p)
{
    rshared_t *sh = p;
    uint64_t s = (uint64_t)pthread_self() | 1;
    while (!atomic_load(&sh->stop)) {
        uint32_t k = (uint32_t)(rnd(&s) % (uint64_t)sh->nkeys);
        RM(sh->lru, k); /* referenced: a zombie the holders still put */
        rinst_t *in = rinst_new(sh, k);
        if (!in)
            break;
        if (byval_lru_insert(sh->lru, KB(k), in, 0, NULL) == BYVAL_LRU_OK)
            atomic_fetch_add(&sh->stored, 1);
        else
            atomic_store(&in->state, 2);
    }
    return NULL;
}

void test_ref_threads_churn(void **state)
{
    rshared_t sh = {.nkeys = 12, .ops = scaled(40000, 4000)};
    sh.npool = sh.ops * (RHOLDERS + 4);
    sh.pool = calloc((size_t)sh.npool, sizeof(rinst_t));
    sh.lru = byval_lru_create(16, KLEN, rinst_evict, &sh);
    pthread_t th[RHOLDERS], tc[RCHURN];
    for (int i = 0; i < RCHURN; i++)
        assert_int_equal(pthread_create(&tc[i], NULL, churn, &sh), 0);
    for (int i = 0; i < RHOLDERS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, holder, &sh), 0);
    for (int i = 0; i < RHOLDERS; i++)
        pthread_join(th[i], NULL);
    atomic_store(&sh.stop, 1);
    for (int i = 0; i < RCHURN; i++)
        pthread_join(tc[i], NULL);
    EXPECT(sh.lru, -1, 0, -1, -1, sh.stored, -1, -1); /* every reference dropped */
    byval_lru_stats_t st = stats(sh.lru);
    assert_true(st.removals > 0 && st.high_water <= 16 && sh.holds > sh.ops);
    byval_lru_destroy(sh.lru);
    assert_int_equal(sh.bad, 0);
    assert_int_equal(sh.released, sh.stored); /* each stored value released once */
    free(sh.pool);
}
