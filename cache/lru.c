/* SPDX-License-Identifier: MIT */
/*
 * lru.c - the bounded cache of lru.h, whole: slots and hash table, lock-free
 * hits and puts, eviction by the clock, zombies, and fork.
 *
 * Every change of the table, a slot or the counters is made under the
 * cache's one lock. Hits and the puts that leave an entry live take none:
 * they probe with atomic loads and move the reference count with one CAS on
 * the state word, whose generation (bumped when a slot is reused) proves the
 * key just compared still names the entry. Chunks, replaced tables and
 * directories are freed only with the cache: a reader never touches freed
 * memory. A lock-free miss is confirmed locked.
 *
 * The clock, not an LRU list (relinked on every hit, it needs the lock): a
 * hit sets CLOCK in the CAS that takes its reference; the hand (locked, at
 * insert) clears it, and evicts the first unreferenced entry without it.
 * The table: open addressing on hash << 32 | slot index (a probe reads
 * bucket lines, then the one slot whose hash matches), removal shifts back.
 */
#include "cache/lru.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cache/locks.h"
#include "cache/stripe.h"

#define CACHELINE 64
#define MAX_KEY 1024
#define MAX_PROBES 256     /* a probe this long races a writer: let the lock decide */
#define MAX_TABLE_SHIFT 24 /* initial table at most 16M buckets */

/* Every field a lock-free reader may see is accessed with these. */
#define LD(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define LD_ACQ(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define ST(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)
#define ST_REL(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define CAS(p, exp, des) \
    __atomic_compare_exchange_n((p), (exp), (des), 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)

/* The state word: generation << 32 | flags | references. */
#define ST_REFS 0x0FFFFFFFu  /* references held (2^28 - 1 at most) */
#define ST_CLOCK (1u << 28)  /* hit since the clock hand last passed */
#define ST_ZOMBIE (1u << 29) /* removed while referenced: out of lookups */
#define ST_DEAD (1u << 30)   /* free, being released, or being written */
#define ST_GEN(s) ((uint32_t)((s) >> 32))
#define GEN_BITS(s) ((s) & ~(uint64_t)UINT32_MAX)
#define REFS(s) ((uint32_t)(s)&ST_REFS)

typedef struct lru_slot {
    uint64_t state;
    uint32_t hash;
    uint32_t hnext; /* next slot of the free list or a release chain; 0: none */
    void *value;
    uint64_t key[]; /* key_len bytes, zero padded to a word */
} lru_slot_t;

/* The table (words: hash << 32 | slot index; 0: empty) or the chunk
 * directory (words: chunk pointers, 1 << chunk_shift slots each, index i at
 * position i - 1). Replaced ones are chained on retired (a reader may still
 * use one) and freed with the cache. */
typedef struct lru_arr {
    struct lru_arr *retired;
    size_t mask; /* words - 1 */
    uint64_t w[];
} lru_arr_t;

/* Slots released under the lock, linked through hnext: their callbacks run
 * after unlock, then they are freed. */
typedef struct lru_chain {
    uint32_t head, tail;
} lru_chain_t;

typedef struct lru_key {
    uint32_t h;
    uint64_t w[MAX_KEY / 8]; /* zero padded: what slots hold */
} lru_key_t;

struct byval_lru {
    /* Written at creation (capacity by set_capacity, table and dir locked). */
    struct byval_lru *reg_next;                  /* the list of caches (fork), reg_lock */
    size_t key_len, key_words, stride, capacity; /* stride: bytes per slot */
    byval_lru_evict_fn evict;
    void *ctx;
    lru_arr_t *table, *dir;
    unsigned chunk_shift;

    /* Written under the lock only. */
    byval_lock_t lock __attribute__((aligned(CACHELINE)));
    uint32_t next_new, free_head, hand; /* first never-used slot; free list (hnext); clock */
    /* Slots in the table (live + zombies), live entries (the bound), zombies
     * (these two read unlocked by put). */
    size_t nchunks, nodes, count, zombies, high_water;
    uint64_t misses, inserts, evictions, removals;

    struct { /* hit counters, one stripe a thread; two lines, as CPUs prefetch pairs */
        uint64_t hits;
    } __attribute__((aligned(2 * CACHELINE))) stripes[BYVAL_STRIPES];
};

/* ---- keys, slots and the table ---------------------------------------- */

/* Word-at-a-time multiply-xorshift in two lanes of alternate words: keys
 * are short and hashed on every hit, and one chain over an 80-byte key was
 * 10 dependent multiplies deep. Each round is a bijection of its lane, so
 * keys that differ in one word differ in the combined 64 bits. */
#define HASH_MUL 0xFF51AFD7ED558CCDull
#define HASH_ROUND(h, w) ((h) = ((h) ^ (w)) * HASH_MUL, (h) ^= (h) >> 29)

uint32_t byval_lru_hash(const void *key, size_t len)
{
    const unsigned char *p = key;
    uint64_t a = 0x9E3779B97F4A7C15ull ^ len, b = 0xC2B2AE3D27D4EB4Full, w0, w1;
    size_t i = 0;
    for (; i + 16 <= len; i += 16) {
        memcpy(&w0, p + i, 8);
        memcpy(&w1, p + i + 8, 8);
        HASH_ROUND(a, w0);
        HASH_ROUND(b, w1);
    }
    if (i + 8 <= len) {
        memcpy(&w0, p + i, 8);
        HASH_ROUND(a, w0);
        i += 8;
    }
    if (i < len) {
        w1 = 0;
        memcpy(&w1, p + i, len - i);
        HASH_ROUND(b, w1);
    }
    uint64_t h = a ^ (b << 32 | b >> 32);
    h ^= h >> 32;
    h *= 0xC4CEB9FE1A85EC53ull;
    h ^= h >> 29;
    return (uint32_t)h;
}

/* 0 when there is no cache or key to look for. */
static int key_prep(const byval_lru_t *lru, const void *key, lru_key_t *k)
{
    if (!lru || !key)
        return 0;
    k->w[lru->key_words - 1] = 0;
    memcpy(k->w, key, lru->key_len);
    k->h = byval_lru_hash(key, lru->key_len);
    return 1;
}

static inline lru_slot_t *slot_at(const byval_lru_t *lru, uint32_t idx)
{
    const lru_arr_t *d = LD_ACQ(&lru->dir);
    unsigned char *chunk = (unsigned char *)(uintptr_t)LD(&d->w[(idx - 1) >> lru->chunk_shift]);
    return (lru_slot_t *)(chunk + ((idx - 1) & ((1u << lru->chunk_shift) - 1)) * lru->stride);
}

/* The slot a handle names; NULL when it names no slot of a chunk (it comes
 * from outside: no read out of bounds). */
static inline lru_slot_t *ref_slot(const byval_lru_t *lru, byval_lru_ref_t ref)
{
    uint32_t idx = (uint32_t)(ref >> 32);
    if (!lru || !idx)
        return NULL;
    const lru_arr_t *d = LD_ACQ(&lru->dir);
    uint32_t c = (idx - 1) >> lru->chunk_shift;
    return c <= d->mask && LD(&d->w[c]) ? slot_at(lru, idx) : NULL;
}

static size_t pow2_at_least(size_t n, size_t min, unsigned max_shift)
{
    size_t p = min;
    while (p < n && p < ((size_t)1 << max_shift))
        p *= 2;
    return p;
}

static lru_arr_t *arr_new(size_t words)
{
    lru_arr_t *a = calloc(1, sizeof(*a) + words * sizeof(uint64_t));
    if (a)
        a->mask = words - 1;
    return a;
}

/* Bytes of the chunks and of every table and directory, replaced ones too;
 * free_them: frees them. */
static size_t bytes_held(byval_lru_t *lru, int free_them)
{
    size_t bytes = lru->nchunks * (lru->stride << lru->chunk_shift);
    for (size_t c = 0; free_them && lru->dir && c < lru->nchunks; c++)
        free((void *)(uintptr_t)lru->dir->w[c]);
    lru_arr_t *heads[2] = {lru->table, lru->dir};
    for (int h = 0; h < 2; h++)
        for (lru_arr_t *a = heads[h], *nx; a; a = nx) {
            nx = a->retired;
            bytes += sizeof(*a) + (a->mask + 1) * sizeof(a->w[0]);
            if (free_them)
                free(a);
        }
    return bytes;
}

/* (locked) A slot (state DEAD, not in the table), 0 on ENOMEM. */
static uint32_t slot_alloc(byval_lru_t *lru)
{
    uint32_t idx = lru->free_head;
    if (idx) {
        lru->free_head = LD(&slot_at(lru, idx)->hnext);
        return idx;
    }
    if (lru->next_new == UINT32_MAX)
        return 0;
    if (((lru->next_new - 1) >> lru->chunk_shift) >= lru->nchunks) {
        lru_arr_t *d = lru->dir;
        if (lru->nchunks == d->mask + 1) {
            lru_arr_t *n = arr_new(lru->nchunks * 2);
            if (!n)
                return 0;
            memcpy(n->w, d->w, lru->nchunks * sizeof(d->w[0]));
            n->retired = d;
            ST_REL(&lru->dir, n);
            d = n;
        }
        size_t bytes = lru->stride << lru->chunk_shift;
        unsigned char *c = NULL;
        if (posix_memalign((void **)&c, CACHELINE, bytes) != 0)
            return 0;
        memset(c, 0, bytes);
        for (size_t i = 0; i < ((size_t)1 << lru->chunk_shift); i++)
            ((lru_slot_t *)(c + i * lru->stride))->state = ST_DEAD; /* not yet a reader's */
        /* Published to readers by the release store of the first index in it. */
        ST(&d->w[lru->nchunks], (uintptr_t)c);
        lru->nchunks++;
    }
    return lru->next_new++;
}

static void slot_free(byval_lru_t *lru, uint32_t idx)
{
    ST(&slot_at(lru, idx)->hnext, lru->free_head);
    lru->free_head = idx;
}

static void table_put(lru_arr_t *t, uint32_t h, uint32_t idx)
{
    size_t p = h & t->mask;
    while (LD(&t->w[p]))
        p = (p + 1) & t->mask;
    ST_REL(&t->w[p], ((uint64_t)h << 32) | idx);
}

/* (locked) Fill slot idx (state = refs, a new generation), add it to the
 * table, which doubles past a load of 7/8 (zombies, a capacity raised), and
 * count it; -1 (idx freed) when the table is full and cannot grow. */
static int publish(byval_lru_t *lru, uint32_t idx, const lru_key_t *k, void *value, uint32_t refs)
{
    lru_arr_t *o = lru->table, *n;
    if ((lru->nodes + 1) * 8 > (o->mask + 1) * 7 && (n = arr_new((o->mask + 1) * 2))) {
        for (size_t b = 0; b <= o->mask; b++) {
            uint64_t e = LD(&o->w[b]);
            if (e)
                table_put(n, (uint32_t)(e >> 32), (uint32_t)e);
        }
        n->retired = o;
        ST_REL(&lru->table, n);
    }
    if (lru->nodes + 1 > lru->table->mask) {
        slot_free(lru, idx);
        return -1;
    }
    lru_slot_t *s = slot_at(lru, idx);
    uint64_t old = LD(&s->state);
    /* Release stores, read with acquire loads: a reader that reads any of
     * them and then the state sees the DEAD state this slot got before (or a
     * later one), never the generation whose key it compared - the seqlock
     * read, without fences (which TSan cannot follow). */
    ST_REL(&s->hash, k->h);
    for (size_t i = 0; i < lru->key_words; i++)
        ST_REL(&s->key[i], k->w[i]);
    ST_REL(&s->value, value);
    ST_REL(&s->state, ((uint64_t)(ST_GEN(old) + 1) << 32) | refs);
    table_put(lru->table, k->h, idx);
    lru->nodes++;
    ST(&lru->count, lru->count + 1);
    if (lru->count > lru->high_water)
        ST(&lru->high_water, lru->count);
    lru->inserts++;
    return 0;
}

/* (locked) Remove idx, then shift back every later entry of the run that its
 * home bucket allows (Knuth's algorithm R). */
static void table_del(byval_lru_t *lru, uint32_t idx)
{
    lru_arr_t *t = lru->table;
    size_t i = LD(&slot_at(lru, idx)->hash) & t->mask;
    while ((uint32_t)LD(&t->w[i]) != idx)
        i = (i + 1) & t->mask;
    for (size_t j = i;;) {
        j = (j + 1) & t->mask;
        uint64_t e = LD(&t->w[j]);
        if (!e)
            break;
        size_t home = (uint32_t)(e >> 32) & t->mask;
        /* e stays when its home lies cyclically in (i, j]. */
        if (i <= j ? (i < home && home <= j) : (i < home || home <= j))
            continue;
        ST_REL(&t->w[i], e);
        i = j;
    }
    ST_REL(&t->w[i], 0);
    lru->nodes--;
}

/* ---- references, releases, the clock ---------------------------------- */

/* Add delta (+1, -1, or 0: only mark it used) to the references of a live
 * entry of generation gen with one CAS: the references left, or -1 when the
 * slot is no longer that entry (or the count would leave its range). */
static inline int ref_cas(lru_slot_t *s, uint32_t gen, int delta)
{
    uint64_t cur = LD(&s->state);
    for (;;) {
        uint32_t refs = REFS(cur);
        if (ST_GEN(cur) != gen || (cur & (ST_DEAD | ST_ZOMBIE)) || (delta > 0 && refs == ST_REFS) ||
            (delta < 0 && refs == 0))
            return -1;
        uint64_t nw = delta < 0 ? cur - 1 : (cur + (uint64_t)delta) | ST_CLOCK;
        if (nw == cur || CAS(&s->state, &cur, nw))
            return (int)refs + delta;
    }
}

static void chain_push(byval_lru_t *lru, lru_chain_t *c, uint32_t idx)
{
    ST(&slot_at(lru, idx)->hnext, 0);
    if (c->tail)
        ST(&slot_at(lru, c->tail)->hnext, idx);
    else
        c->head = idx;
    c->tail = idx;
}

/* No lock held: the callbacks, then free the slots (their keys were read). */
static void release(byval_lru_t *lru, lru_chain_t *c)
{
    if (!c->head)
        return;
    if (lru->evict)
        for (uint32_t i = c->head; i; i = LD(&slot_at(lru, i)->hnext))
            lru->evict(lru->ctx, slot_at(lru, i)->key, LD(&slot_at(lru, i)->value));
    byval_lock(&lru->lock);
    for (uint32_t i = c->head, nx; i; i = nx) {
        nx = LD(&slot_at(lru, i)->hnext);
        slot_free(lru, i);
    }
    byval_unlock(&lru->lock);
}

static void unlock_release(byval_lru_t *lru, lru_chain_t *c)
{
    byval_unlock(&lru->lock);
    release(lru, c);
}

/* (locked) Release entry idx, live or zombie, whose state is st: DEAD, out
 * of the table and the counts, onto the chain. 0 when its state moved (a
 * lock-free reader took or dropped a reference): the caller looks again. */
static int kill(byval_lru_t *lru, uint32_t idx, uint64_t st, lru_chain_t *c)
{
    if (!CAS(&slot_at(lru, idx)->state, &st, GEN_BITS(st) | ST_DEAD))
        return 0;
    table_del(lru, idx);
    if (st & ST_ZOMBIE)
        ST(&lru->zombies, lru->zombies - 1);
    else
        ST(&lru->count, lru->count - 1);
    chain_push(lru, c, idx);
    return 1;
}

/* (locked) Drop one reference of zombie idx, state st (zombies move only
 * under the lock); the last one releases it. The references left. */
static int zombie_put(byval_lru_t *lru, uint32_t idx, uint64_t st, lru_chain_t *c)
{
    if (REFS(st) == 1)
        kill(lru, idx, st, c);
    else
        ST(&slot_at(lru, idx)->state, st - 1);
    return (int)REFS(st) - 1;
}

enum out_mode { OUT_CLOCK, OUT_EVICT, OUT_DETACH, OUT_PURGE };

/* (locked) Take idx out, 1 when done. OUT_CLOCK and OUT_EVICT: a live
 * unreferenced entry is evicted (OUT_CLOCK: the clock's second chance, an
 * entry used since the hand passed only loses its mark). OUT_DETACH (a live
 * entry): out of lookups, released, or if referenced a zombie (out of the
 * bound, in the table for its last put to find). OUT_PURGE: released now
 * whatever its references (its holders' puts then fail). */
static int take_out(byval_lru_t *lru, uint32_t idx, enum out_mode mode, lru_chain_t *c)
{
    lru_slot_t *s = slot_at(lru, idx);
    for (uint64_t st = LD(&s->state); !(st & ST_DEAD); st = LD(&s->state)) {
        if (mode <= OUT_EVICT && ((st & ST_ZOMBIE) || REFS(st)))
            return 0;
        if (mode == OUT_CLOCK && (st & ST_CLOCK)) {
            if (CAS(&s->state, &st, st & ~(uint64_t)ST_CLOCK))
                return 0;
        } else if (mode == OUT_DETACH && REFS(st)) {
            if (CAS(&s->state, &st, st | ST_ZOMBIE)) {
                ST(&lru->count, lru->count - 1);
                ST(&lru->zombies, lru->zombies + 1);
                lru->removals++;
                return 1;
            }
        } else if (kill(lru, idx, st, c)) {
            (*(mode <= OUT_EVICT ? &lru->evictions : &lru->removals))++;
            return 1;
        }
    }
    return 0;
}

/* (locked) Evict one unreferenced entry by the clock: two turns, the first
 * may only clear marks. 0 when none can be. */
static int evict_one(byval_lru_t *lru, lru_chain_t *c)
{
    uint32_t n = lru->next_new;
    for (size_t visits = 0; n > 1 && visits <= 2 * (size_t)(n - 1); visits++) {
        uint32_t i = lru->hand;
        lru->hand = i + 1 < n ? i + 1 : 1;
        if (take_out(lru, i, OUT_CLOCK, c))
            return 1;
    }
    return 0;
}

/* (locked) Evict until room more entries fit, or none can be evicted. */
static void trim(byval_lru_t *lru, lru_chain_t *c, size_t room)
{
    while (lru->count + room > LD(&lru->capacity) && evict_one(lru, c))
        ;
}

/* ---- fork ------------------------------------------------------------------ *
 * Every cache is on one list, the class LRU of cache/locks.h: prepare takes
 * every cache's lock (no operation holds two or waits holding one), and the
 * child forgets every entry without callbacks (they would call the driver). */

static byval_lock_t reg_lock = BYVAL_LOCK_INIT(LRU_LIST);
static byval_lru_t *reg_head;

static void fork_prepare(void)
{
    byval_lock_fork_take(&reg_lock);
    for (byval_lru_t *c = reg_head; c; c = c->reg_next)
        byval_lock_fork_take(&c->lock);
}

static void fork_parent(void)
{
    for (byval_lru_t *c = reg_head; c; c = c->reg_next)
        byval_lock_fork_drop(&c->lock);
    byval_lock_fork_drop(&reg_lock);
}

BYVAL_LOCK_CLASS(lru, LRU, fork_prepare, fork_parent);

/* An empty table, no slot in use (the chunks stay), zeroed stats. Stores
 * that lock-free readers would race are atomic: those threads are gone in
 * the child, but the sanitizer's model still wants the discipline. */
static void fork_child(void)
{
    for (byval_lru_t *c = reg_head; c; c = c->reg_next) {
        for (size_t b = 0; b <= c->table->mask; b++)
            ST(&c->table->w[b], 0);
        c->next_new = c->hand = 1;
        c->nodes = c->free_head = 0;
        ST(&c->count, 0);
        ST(&c->zombies, 0);
        ST(&c->high_water, 0);
        c->misses = c->inserts = c->evictions = c->removals = 0;
        for (int i = 0; i < BYVAL_STRIPES; i++)
            ST(&c->stripes[i].hits, 0);
    }
}

BYVAL_FORK_CHILD(lru, fork_child);

/* ---- the API ---------------------------------------------------------------- */

byval_lru_t *byval_lru_create(size_t capacity, size_t key_len, byval_lru_evict_fn evict, void *ctx)
{
    if (capacity < 1 || key_len < 1 || key_len > MAX_KEY) {
        errno = EINVAL;
        return NULL;
    }
    byval_lru_t *lru = NULL;
    if (posix_memalign((void **)&lru, CACHELINE, sizeof(*lru)) != 0) {
        errno = ENOMEM;
        return NULL;
    }
    *lru = (byval_lru_t){.key_len = key_len,
                         .key_words = (key_len + 7) / 8,
                         .capacity = capacity,
                         .evict = evict,
                         .ctx = ctx};
    lru->stride = sizeof(lru_slot_t) + lru->key_words * 8;
    /* Chunks of capacity/64 slots (16..1024): small caches waste little,
     * large ones need few chunks. The table: load <= 7/8 when full. */
    lru->chunk_shift = (unsigned)__builtin_ctzll(pow2_at_least(capacity / 64, 16, 10));
    size_t want = capacity + capacity / 7;
    lru->table = arr_new(pow2_at_least(want > capacity ? want : capacity, 16, MAX_TABLE_SHIFT));
    lru->dir = arr_new(4);
    lru->next_new = lru->hand = 1;
    if (!lru->table || !lru->dir) {
        bytes_held(lru, 1);
        free(lru);
        errno = ENOMEM;
        return NULL;
    }
    /* Adaptive: critical sections last tens of ns. */
    byval_lock_init(&lru->lock, BYVAL_RANK_LRU, 1);
    byval_lock(&reg_lock);
    lru->reg_next = reg_head;
    reg_head = lru;
    byval_unlock(&reg_lock);
    return lru;
}

void byval_lru_destroy(byval_lru_t *lru)
{
    if (!lru)
        return;
    byval_lock(&reg_lock);
    byval_lru_t **pp = &reg_head;
    while (*pp != lru)
        pp = &(*pp)->reg_next;
    *pp = lru->reg_next;
    byval_unlock(&reg_lock);
    lru_chain_t c = {0, 0};
    byval_lock(&lru->lock);
    for (uint32_t i = 1; i < lru->next_new; i++)
        if (!(LD(&slot_at(lru, i)->state) & ST_DEAD))
            chain_push(lru, &c, i);
    unlock_release(lru, &c);
    bytes_held(lru, 1);
    byval_lock_destroy(&lru->lock);
    free(lru);
}

enum find_mode { FIND_LIVE, FIND_PUT, FIND_PUT_VALUE };

/* The entry for k (NULL, *idx_p 0: none found), its index and state.
 * FIND_LIVE: the live one, lock-free or locked (the table may change under
 * a lock-free probe, which then misses: only a locked miss says that the
 * key is absent). FIND_PUT (locked): one with references, holding value for
 * FIND_PUT_VALUE, a zombie first (a live entry under the same key can only
 * be newer, so the zombie is what an older reference points to). */
static inline lru_slot_t *find(byval_lru_t *lru, const lru_key_t *k, enum find_mode mode,
                               const void *value, uint32_t *idx_p, uint64_t *st_p)
{
    const lru_arr_t *t = LD_ACQ(&lru->table);
    lru_slot_t *found = NULL;
    *idx_p = 0;
    for (size_t n = 0, pos = k->h & t->mask; n <= t->mask && n < MAX_PROBES;
         n++, pos = (pos + 1) & t->mask) {
        uint64_t e = LD_ACQ(&t->w[pos]);
        if (!e)
            break;
        if ((uint32_t)(e >> 32) != k->h)
            continue;
        lru_slot_t *s = slot_at(lru, (uint32_t)e);
        uint64_t st = LD_ACQ(&s->state);
        if (mode == FIND_LIVE ? (st & (ST_DEAD | ST_ZOMBIE))
                              : !REFS(st) || (mode == FIND_PUT_VALUE && LD(&s->value) != value))
            continue;
        uint64_t diff = 0;
        for (size_t w = 0; w < lru->key_words; w++) /* acquire: see publish() */
            diff |= LD_ACQ(&s->key[w]) ^ k->w[w];
        if (diff)
            continue;
        found = s;
        *idx_p = (uint32_t)e;
        *st_p = st;
        if (mode == FIND_LIVE || (st & ST_ZOMBIE) || !LD(&lru->zombies))
            break;
    }
    return found;
}

/* Reference (take_ref), or only mark used, the live entry for k: its index,
 * 0 when there was none or no more reference fits. The value is read before
 * the CAS validates the generation (the seqlock read). */
static inline uint32_t get_live(byval_lru_t *lru, const lru_key_t *k, int take_ref, void **v_p,
                                uint32_t *gen_p)
{
    uint64_t st;
    uint32_t i;
    lru_slot_t *s = find(lru, k, FIND_LIVE, NULL, &i, &st);
    if (!s)
        return 0;
    *v_p = LD_ACQ(&s->value);
    *gen_p = ST_GEN(st);
    return ref_cas(s, ST_GEN(st), take_ref != 0) < 0 ? 0 : i;
}

/* get and get_ref: ref_p (take_ref only) gets the handle, 0 on a miss. */
static int lru_get(byval_lru_t *lru, const void *key, int take_ref, void **value_p,
                   byval_lru_ref_t *ref_p)
{
    if (ref_p)
        *ref_p = 0;
    lru_key_t k;
    if (!key_prep(lru, key, &k))
        return 0;
    void *v = NULL;
    uint32_t gen = 0, i = get_live(lru, &k, take_ref, &v, &gen);
    if (!i) { /* absent, or the probe raced a writer: ask under the lock */
        byval_lock(&lru->lock);
        i = get_live(lru, &k, take_ref, &v, &gen);
        lru->misses += !i;
        byval_unlock(&lru->lock);
        if (!i)
            return 0;
    }
    byval_stripe_bump(&lru->stripes[byval_stripe()].hits);
    if (value_p)
        *value_p = v;
    if (ref_p)
        *ref_p = (uint64_t)i << 32 | gen; /* i >= 1: never 0 */
    return 1;
}

int byval_lru_get(byval_lru_t *lru, const void *key, int take_ref, void **value_p)
{
    return lru_get(lru, key, take_ref, value_p, NULL);
}

int byval_lru_get_ref(byval_lru_t *lru, const void *key, void **value_p, byval_lru_ref_t *ref_p)
{
    return lru_get(lru, key, 1, value_p, ref_p);
}

/* insert and insert_ref: ref_p (take_ref only) gets the handle of the entry
 * referenced on OK and EXISTS, else 0. */
static int lru_insert(byval_lru_t *lru, const void *key, void *value, int take_ref,
                      void **existing_p, byval_lru_ref_t *ref_p)
{
    if (ref_p)
        *ref_p = 0;
    lru_key_t k;
    if (!key_prep(lru, key, &k))
        return BYVAL_LRU_NOENT;
    lru_chain_t c = {0, 0};
    uint64_t st;
    int rc = BYVAL_LRU_OK;
    uint32_t i;
    byval_lock(&lru->lock);
    lru_slot_t *s = find(lru, &k, FIND_LIVE, NULL, &i, &st);
    /* Make room first, so that the bound holds at every instant. */
    if (!s)
        trim(lru, &c, 1);
    if (s) {
        rc = take_ref && ref_cas(s, ST_GEN(st), 1) < 0 ? BYVAL_LRU_FULL : BYVAL_LRU_EXISTS;
        if (rc == BYVAL_LRU_EXISTS && existing_p)
            *existing_p = LD(&s->value);
    } else if (lru->count >= LD(&lru->capacity)) {
        rc = BYVAL_LRU_FULL;
    } else if (!(i = slot_alloc(lru)) || publish(lru, i, &k, value, take_ref ? 1 : 0) != 0) {
        rc = BYVAL_LRU_NOMEM;
    }
    if (ref_p && rc >= 0) /* the generation moves only under the lock */
        *ref_p = (uint64_t)i << 32 | ST_GEN(LD(&slot_at(lru, i)->state));
    unlock_release(lru, &c);
    return rc;
}

int byval_lru_insert(byval_lru_t *lru, const void *key, void *value, int take_ref,
                     void **existing_p)
{
    return lru_insert(lru, key, value, take_ref, existing_p, NULL);
}

int byval_lru_insert_ref(byval_lru_t *lru, const void *key, void *value, void **existing_p,
                         byval_lru_ref_t *ref_p)
{
    return lru_insert(lru, key, value, 1, existing_p, ref_p);
}

/* Every put ends here: a live entry evictable again may let the cache down
 * to a capacity that shrank while every entry was referenced. */
static int put_finish(byval_lru_t *lru, int left, int zombie, lru_chain_t *c)
{
    if (left == 0 && !zombie && LD(&lru->count) > LD(&lru->capacity)) {
        byval_lock(&lru->lock);
        trim(lru, c, 0);
        byval_unlock(&lru->lock);
    }
    release(lru, c);
    return left;
}

int byval_lru_put_ref(byval_lru_t *lru, byval_lru_ref_t ref)
{
    lru_slot_t *s = ref_slot(lru, ref);
    if (!s)
        return BYVAL_LRU_NOENT;
    lru_chain_t c = {0, 0};
    int left = ref_cas(s, (uint32_t)ref, -1);
    if (left >= 0)
        return put_finish(lru, left, 0, &c);
    /* Not live: a zombie (a live entry we hold a reference of can only
     * become one), or a stale handle. */
    byval_lock(&lru->lock);
    uint64_t st = LD(&s->state);
    int zombie = ST_GEN(st) == (uint32_t)ref && (st & ST_ZOMBIE) && !(st & ST_DEAD) && REFS(st);
    left = zombie ? zombie_put(lru, (uint32_t)(ref >> 32), st, &c) : BYVAL_LRU_NOENT;
    byval_unlock(&lru->lock);
    return put_finish(lru, left, 1, &c);
}

/* put and put_value; the latter tries a lock-free put of the live entry. */
static int lru_put(byval_lru_t *lru, const void *key, const void *value, enum find_mode mode)
{
    lru_key_t k;
    if (!key_prep(lru, key, &k))
        return BYVAL_LRU_NOENT;
    uint64_t st;
    uint32_t i;
    int left = -1, zombie = 0;
    lru_slot_t *s = mode == FIND_PUT_VALUE ? find(lru, &k, FIND_LIVE, NULL, &i, &st) : NULL;
    if (s && LD_ACQ(&s->value) == value)
        left = ref_cas(s, ST_GEN(st), -1);
    lru_chain_t c = {0, 0};
    if (left < 0) {
        byval_lock(&lru->lock);
        for (;;) { /* until no lock-free put takes the last reference first */
            s = find(lru, &k, mode, value, &i, &st);
            if (!s || (st & ST_ZOMBIE)) {
                zombie = s != NULL;
                left = s ? zombie_put(lru, i, st, &c) : BYVAL_LRU_NOENT;
                break;
            }
            if ((left = ref_cas(s, ST_GEN(st), -1)) >= 0)
                break;
        }
        byval_unlock(&lru->lock);
    }
    return put_finish(lru, left, zombie, &c);
}

int byval_lru_put(byval_lru_t *lru, const void *key)
{
    return lru_put(lru, key, NULL, FIND_PUT);
}

int byval_lru_put_value(byval_lru_t *lru, const void *key, const void *value)
{
    return lru_put(lru, key, value, FIND_PUT_VALUE);
}

int byval_lru_remove(byval_lru_t *lru, const void *key)
{
    lru_key_t k;
    if (!key_prep(lru, key, &k))
        return BYVAL_LRU_NOENT;
    lru_chain_t c = {0, 0};
    uint64_t st;
    uint32_t i;
    byval_lock(&lru->lock);
    if (find(lru, &k, FIND_LIVE, NULL, &i, &st))
        take_out(lru, i, OUT_DETACH, &c);
    unlock_release(lru, &c);
    return i ? BYVAL_LRU_OK : BYVAL_LRU_NOENT;
}

int byval_lru_remove_ref(byval_lru_t *lru, byval_lru_ref_t ref)
{
    lru_slot_t *s = ref_slot(lru, ref);
    if (!s)
        return BYVAL_LRU_NOENT;
    lru_chain_t c = {0, 0};
    byval_lock(&lru->lock);
    uint64_t st = LD(&s->state);
    int live = ST_GEN(st) == (uint32_t)ref && !(st & (ST_DEAD | ST_ZOMBIE));
    if (live)
        take_out(lru, (uint32_t)(ref >> 32), OUT_DETACH, &c);
    unlock_release(lru, &c);
    return live ? BYVAL_LRU_OK : BYVAL_LRU_NOENT;
}

/* One pass over the slots under the lock, from the clock hand (so that
 * evict_if takes the entries the clock would take first). */
static size_t scan(byval_lru_t *lru, byval_lru_pred_fn pred, void *ctx, enum out_mode mode)
{
    size_t matched = 0;
    if (!lru || !pred)
        return 0;
    lru_chain_t c = {0, 0};
    byval_lock(&lru->lock);
    uint32_t n = lru->next_new, start = lru->hand >= 1 && lru->hand < n ? lru->hand : 1;
    for (uint32_t k = 1; k < n; k++) {
        uint32_t i = start + k - 1 < n ? start + k - 1 : start + k - n;
        lru_slot_t *s = slot_at(lru, i);
        uint64_t st = LD(&s->state);
        if ((st & ST_DEAD) || ((st & ST_ZOMBIE) && mode != OUT_PURGE) ||
            (mode == OUT_EVICT && REFS(st)))
            continue;
        int v = pred(ctx, s->key, LD(&s->value));
        if (v < 0)
            break;
        matched += v && take_out(lru, i, mode, &c); /* evict: 0 if referenced meanwhile */
    }
    unlock_release(lru, &c);
    return matched;
}

size_t byval_lru_remove_if(byval_lru_t *lru, byval_lru_pred_fn pred, void *ctx)
{
    return scan(lru, pred, ctx, OUT_DETACH);
}

size_t byval_lru_purge_if(byval_lru_t *lru, byval_lru_pred_fn pred, void *ctx)
{
    return scan(lru, pred, ctx, OUT_PURGE);
}

size_t byval_lru_evict_if(byval_lru_t *lru, byval_lru_pred_fn pred, void *ctx)
{
    return scan(lru, pred, ctx, OUT_EVICT);
}

void byval_lru_stats(byval_lru_t *lru, byval_lru_stats_t *st)
{
    if (!st)
        return;
    memset(st, 0, sizeof(*st));
    if (!lru)
        return;
    for (int i = 0; i < BYVAL_STRIPES; i++)
        st->hits += LD(&lru->stripes[i].hits);
    byval_lock(&lru->lock);
    st->misses = lru->misses;
    st->inserts = lru->inserts;
    st->evictions = lru->evictions;
    st->removals = lru->removals;
    st->size = lru->count;
    st->high_water = lru->high_water;
    for (uint32_t i = 1; i < lru->next_new; i++) {
        uint64_t s = LD(&slot_at(lru, i)->state);
        st->referenced += !(s & (ST_DEAD | ST_ZOMBIE)) && REFS(s);
    }
    /* What the entries cost: every chunk and table, shared over the
     * entries held (one slot and bucket when empty). */
    size_t bytes = bytes_held(lru, 0);
    byval_unlock(&lru->lock);
    st->capacity = LD(&lru->capacity);
    st->bytes_per_entry =
        st->size ? (bytes + st->size - 1) / st->size : lru->stride + sizeof(uint64_t);
}

/* Per entry once full at capacity: chunks full, the table and directory at
 * their final sizes (bytes_per_entry says little until the cache fills). */
void byval_lru_memory(byval_lru_t *lru, size_t *now_p, size_t *full_per_entry_p)
{
    byval_lock(&lru->lock);
    size_t per = (size_t)1 << lru->chunk_shift, cap = LD(&lru->capacity);
    size_t chunks_full = (cap + per - 1) / per, now = bytes_held(lru, 0), full = now;
    if (chunks_full > lru->nchunks)
        full += (chunks_full - lru->nchunks) * (lru->stride << lru->chunk_shift);
    for (size_t size = lru->table->mask + 1; cap * 8 > size * 7;) { /* doubles past 7/8 */
        size *= 2;
        full += sizeof(lru_arr_t) + size * sizeof(uint64_t);
    }
    for (size_t c = lru->dir->mask + 1; c < chunks_full; c *= 2)
        full += sizeof(lru_arr_t) + 2 * c * sizeof(uint64_t);
    byval_unlock(&lru->lock);
    *now_p = now;
    *full_per_entry_p = cap ? (full + cap / 2) / cap : 0;
}

void byval_lru_set_capacity(byval_lru_t *lru, size_t capacity)
{
    if (!lru || capacity < 1)
        return;
    lru_chain_t c = {0, 0};
    byval_lock(&lru->lock);
    ST(&lru->capacity, capacity);
    trim(lru, &c, 0);
    unlock_release(lru, &c);
}
