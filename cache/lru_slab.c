/* SPDX-License-Identifier: MIT */
/*
 * lru_slab.c - where entries live: fixed-size slots in chunks that are
 * only freed with the cache (so a lock-free reader never reads freed
 * memory), the free list, the key hash, and the hash table with its
 * lock-free probe. See lru_internal.h for the protocol.
 *
 * The table is open addressing with linear probing, each bucket one
 * 64-bit word (hash << 32 | slot index): a probe reads only bucket lines,
 * which hits leave alone, and then the one slot whose hash matches. With
 * chains, a walk read the hash of every slot before the one it wanted,
 * and those lines bounce between the CPUs whose hits write them (2
 * threads ran 1.1x one). Removal shifts later entries back (no
 * tombstones); a probe racing it may miss, and a lock-free miss is
 * always confirmed under the lock.
 *
 * Memory: a slot is 24 bytes plus the key; the table is sized for the
 * capacity at load <= 7/8 (9..18 bytes an entry when full: a hit still
 * reads one or two bucket lines), so a 48-byte key costs about 85 bytes
 * and an 80-byte key about 117, with no allocator header.
 */
#include <stdlib.h>
#include <string.h>

#include "cache/lru_internal.h"

#define MAX_PROBES 256 /* a probe this long races a writer: let the lock decide */
#define MIN_CHUNK_SHIFT 4
#define MAX_CHUNK_SHIFT 10
#define MAX_TABLE_SHIFT 24 /* initial table at most 16M buckets */

/* Word-at-a-time multiply-xorshift: keys are short, fixed-size and on the
 * hot path of every hit (byte-wise FNV of an 88-byte key costs ~90 ns).
 * Two lanes take alternate words: each round waits for the previous
 * multiply, and one chain over an 80-byte key was 10 rounds deep (~24 ns;
 * two lanes of 5: ~16 ns). Each round is a bijection of its lane, so keys
 * that differ in one word always differ in the combined 64 bits. Tail
 * bytes, if any, are folded in one word. */
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

void byval_lru_key_words(const byval_lru_t *lru, const void *key, uint64_t *w)
{
    w[lru->key_words - 1] = 0;
    memcpy(w, key, lru->key_len);
}

int byval_lru_key_eq(const byval_lru_t *lru, const lru_slot_t *s, const uint64_t *w)
{
    uint64_t diff = 0;
    for (size_t i = 0; i < lru->key_words; i++) /* acquire: see byval_lru_slot_publish */
        diff |= LD_ACQ(&s->key[i]) ^ w[i];
    return diff == 0;
}

static size_t pow2_at_least(size_t n, size_t min, unsigned max_shift)
{
    size_t p = min;
    while (p < n && p < ((size_t)1 << max_shift))
        p *= 2;
    return p;
}

static lru_table_t *table_new(size_t nbuckets)
{
    lru_table_t *t = calloc(1, sizeof(*t) + nbuckets * sizeof(uint64_t));
    if (t)
        t->mask = nbuckets - 1;
    return t;
}

static lru_dir_t *dir_new(size_t cap)
{
    lru_dir_t *d = calloc(1, sizeof(*d) + cap * sizeof(unsigned char *));
    if (d)
        d->cap = cap;
    return d;
}

int byval_lru_slab_init(byval_lru_t *lru)
{
    /* Chunks of capacity/64 slots (16..1024): small caches waste little,
     * large ones need few chunks. */
    size_t per = pow2_at_least(lru->capacity / 64, (size_t)1 << MIN_CHUNK_SHIFT, MAX_CHUNK_SHIFT);
    lru->chunk_shift = (unsigned)__builtin_ctzll(per);
    size_t want = lru->capacity + lru->capacity / 7; /* load <= 7/8 when full */
    lru->table =
        table_new(pow2_at_least(want > lru->capacity ? want : lru->capacity, 16, MAX_TABLE_SHIFT));
    lru->dir = dir_new(4);
    lru->next_new = 1;
    lru->hand = 1;
    if (!lru->table || !lru->dir) {
        byval_lru_slab_free(lru);
        return -1;
    }
    return 0;
}

void byval_lru_slab_free(byval_lru_t *lru)
{
    for (lru_table_t *t = lru->table, *nx; t; t = nx) {
        nx = t->retired;
        free(t);
    }
    lru->table = NULL;
    if (lru->dir)
        for (size_t c = 0; c < lru->nchunks; c++)
            free(lru->dir->chunk[c]);
    for (lru_dir_t *d = lru->dir, *nx; d; d = nx) {
        nx = d->retired;
        free(d);
    }
    lru->dir = NULL;
    lru->nchunks = 0;
}

/* Slot idx within chunk, the chunk idx lies in. */
static inline lru_slot_t *slot_in(const byval_lru_t *lru, unsigned char *chunk, uint32_t idx)
{
    uint32_t pos = idx - 1; /* index 0 means none */
    return (lru_slot_t *)(chunk + (pos & ((1u << lru->chunk_shift) - 1)) * lru->stride);
}

lru_slot_t *byval_lru_slot(const byval_lru_t *lru, uint32_t idx)
{
    const lru_dir_t *d = LD_ACQ(&lru->dir);
    return slot_in(lru, LD(&d->chunk[(idx - 1) >> lru->chunk_shift]), idx);
}

lru_slot_t *byval_lru_slot_checked(const byval_lru_t *lru, uint32_t idx)
{
    const lru_dir_t *d = LD_ACQ(&lru->dir);
    uint32_t c = (idx - 1) >> lru->chunk_shift;
    unsigned char *chunk = idx && c < d->cap ? LD(&d->chunk[c]) : NULL;
    return chunk ? slot_in(lru, chunk, idx) : NULL;
}

void byval_lru_probe_init(const byval_lru_t *lru, uint32_t h, lru_probe_t *p)
{
    p->t = LD_ACQ(&lru->table);
    p->pos = h & p->t->mask;
    p->n = 0;
}

uint32_t byval_lru_probe_next(lru_probe_t *p, uint32_t h)
{
    const lru_table_t *t = p->t;
    while (p->n <= t->mask && p->n < MAX_PROBES) {
        uint64_t e = LD_ACQ(&t->b[p->pos]);
        p->pos = (p->pos + 1) & t->mask;
        p->n++;
        if (!e)
            break;
        if ((uint32_t)(e >> 32) == h)
            return (uint32_t)e;
    }
    p->n = SIZE_MAX; /* done */
    return 0;
}

/* ---- locked: slots ------------------------------------------------------ */

static int chunk_add(byval_lru_t *lru)
{
    lru_dir_t *d = lru->dir;
    if (lru->nchunks == d->cap) {
        lru_dir_t *n = dir_new(d->cap * 2);
        if (!n)
            return -1;
        memcpy(n->chunk, d->chunk, d->cap * sizeof(d->chunk[0]));
        n->retired = d;
        ST_REL(&lru->dir, n);
        d = n;
    }
    size_t bytes = lru->stride << lru->chunk_shift;
    unsigned char *c = NULL;
    if (posix_memalign((void **)&c, BYVAL_LRU_CACHELINE, bytes) != 0)
        return -1;
    memset(c, 0, bytes);
    for (size_t i = 0; i < ((size_t)1 << lru->chunk_shift); i++)
        ((lru_slot_t *)(c + i * lru->stride))->state = ST_DEAD; /* not yet a reader's */
    /* Published to readers by the release store of the first index in it. */
    ST(&d->chunk[lru->nchunks], c);
    lru->nchunks++;
    return 0;
}

uint32_t byval_lru_slot_alloc(byval_lru_t *lru)
{
    uint32_t idx = lru->free_head;
    if (idx) {
        lru->free_head = LD(&byval_lru_slot(lru, idx)->hnext);
        return idx;
    }
    if (lru->next_new == UINT32_MAX)
        return 0;
    if (((lru->next_new - 1) >> lru->chunk_shift) >= lru->nchunks && chunk_add(lru) != 0)
        return 0;
    return lru->next_new++;
}

void byval_lru_slot_free(byval_lru_t *lru, uint32_t idx)
{
    ST(&byval_lru_slot(lru, idx)->hnext, lru->free_head);
    lru->free_head = idx;
}

/* ---- locked: the table --------------------------------------------------- */

static void table_put(lru_table_t *t, uint32_t h, uint32_t idx)
{
    size_t p = h & t->mask;
    while (LD(&t->b[p]))
        p = (p + 1) & t->mask;
    ST_REL(&t->b[p], ((uint64_t)h << 32) | idx);
}

/* Double the table when the load would pass 7/8 (zombies, or a capacity
 * raised by set_capacity); the old one is retired, not freed. Failure to
 * grow is tolerated until the table is full. */
static int table_grow(byval_lru_t *lru)
{
    lru_table_t *o = lru->table;
    lru_table_t *n = table_new((o->mask + 1) * 2);
    if (!n)
        return -1;
    for (size_t b = 0; b <= o->mask; b++) {
        uint64_t e = LD(&o->b[b]);
        if (e)
            table_put(n, (uint32_t)(e >> 32), (uint32_t)e);
    }
    n->retired = o;
    ST_REL(&lru->table, n);
    return 0;
}

int byval_lru_slot_publish(byval_lru_t *lru, uint32_t idx, uint32_t h, const uint64_t *w,
                           void *value, uint32_t refs)
{
    size_t size = lru->table->mask + 1;
    if ((lru->nodes + 1) * 8 > size * 7 && table_grow(lru) != 0 && lru->nodes + 1 >= size)
        return -1;
    lru_slot_t *s = byval_lru_slot(lru, idx);
    uint64_t old = LD(&s->state);
    /* Release stores, read with acquire loads: a reader that reads any of
     * them and then the state sees the DEAD state this slot got before
     * (or a later one), never the generation whose key it compared - the
     * seqlock read, without fences (which TSan cannot follow). On x86
     * both are plain moves. */
    ST_REL(&s->hash, h);
    for (size_t i = 0; i < lru->key_words; i++)
        ST_REL(&s->key[i], w[i]);
    ST_REL(&s->value, value);
    ST_REL(&s->state, ((uint64_t)(ST_GEN(old) + 1) << 32) | refs);
    table_put(lru->table, h, idx);
    lru->nodes++;
    return 0;
}

/* Remove idx, then shift back every later entry of the run that its home
 * bucket allows (Knuth's algorithm R): no tombstones to clean up. */
void byval_lru_table_del(byval_lru_t *lru, uint32_t idx)
{
    lru_table_t *t = lru->table;
    size_t i = LD(&byval_lru_slot(lru, idx)->hash) & t->mask;
    while ((uint32_t)LD(&t->b[i]) != idx)
        i = (i + 1) & t->mask;
    for (size_t j = i;;) {
        j = (j + 1) & t->mask;
        uint64_t e = LD(&t->b[j]);
        if (!e)
            break;
        size_t home = (uint32_t)(e >> 32) & t->mask;
        /* e stays when its home lies cyclically in (i, j]. */
        if (i <= j ? (i < home && home <= j) : (i < home || home <= j))
            continue;
        ST_REL(&t->b[i], e);
        i = j;
    }
    ST_REL(&t->b[i], 0);
    lru->nodes--;
}
