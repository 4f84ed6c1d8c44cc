/* SPDX-License-Identifier: MIT */
/*
 * ptrmap.c - the pointer map: open addressing on the pointer, one spin lock,
 * and a tally of the slots that hold each value.
 *
 * Every cached re-open and close goes through here: entries inline (no
 * malloc per open), linear probing, deletion shifts back, doubling at half
 * load. The tally (value -> slots) lets a release find its mapping's pointer
 * without a scan (1-3 ms at 1M entries); once an allocation for it fails,
 * counts are unknown for good and the map scans.
 *
 * The lock spins (test-and-test-and-set, pause, then yield): one exchange
 * to take and a plain store to release, where a mutex costs a locked
 * instruction each way (most of a hit's cost on large virtual machines).
 */
#include "cache/ptrmap.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "cache/locks.h"

/* A table of slots that start with a nonzero word, the key (0: empty). */
typedef struct ptab {
    unsigned char *slots;
    size_t slot_size, nslots, used; /* nslots: a power of two, 0 before the first slot */
} ptab_t;

typedef struct slot {
    uintptr_t ptr; /* no mapping lives at address 0 */
    int count;
    void *value;
    unsigned char key[]; /* key_len bytes */
} slot_t;

typedef struct tally_slot {
    uintptr_t value;
    size_t n;
} tally_slot_t;

struct byval_ptrmap {
    int locked;
    struct byval_ptrmap *next; /* the list of maps (fork), maps.lock */
    size_t key_len;
    int keep, tally_lost; /* keep: closed pointers stay, with count 0, until dropped */
    ptab_t tab, tally;
};

static uintptr_t *ptab_at(const ptab_t *t, size_t i)
{
    return (uintptr_t *)(t->slots + i * t->slot_size);
}

static size_t ptab_home(const ptab_t *t, uintptr_t key)
{
    return (size_t)(((uint64_t)key * 0x9E3779B97F4A7C15ull) >> 20) & (t->nslots - 1);
}

/* Index of key's slot, or of the empty slot where it would go. */
static size_t ptab_find(const ptab_t *t, uintptr_t key)
{
    size_t i = ptab_home(t, key);
    while (*ptab_at(t, i) && *ptab_at(t, i) != key)
        i = (i + 1) & (t->nslots - 1);
    return i;
}

/* Room for one more slot (doubling at half load); -1 on ENOMEM. */
static int ptab_room(ptab_t *t)
{
    if ((t->used + 1) * 2 <= t->nslots)
        return 0;
    ptab_t big = {.slot_size = t->slot_size, .nslots = t->nslots ? t->nslots * 2 : 64};
    big.slots = calloc(big.nslots, big.slot_size);
    if (!big.slots)
        return -1;
    for (size_t i = 0; i < t->nslots; i++)
        if (*ptab_at(t, i))
            memcpy(ptab_at(&big, ptab_find(&big, *ptab_at(t, i))), ptab_at(t, i), t->slot_size);
    free(t->slots);
    big.used = t->used;
    *t = big;
    return 0;
}

/* Remove slot i, shifting back the entries of its probe run. */
static void ptab_erase(ptab_t *t, size_t i)
{
    size_t mask = t->nslots - 1;
    for (size_t j = (i + 1) & mask; *ptab_at(t, j); j = (j + 1) & mask) {
        size_t h = ptab_home(t, *ptab_at(t, j));
        /* j may move to i if its home is not in (i, j] cyclically. */
        if ((j > i && (h <= i || h > j)) || (j < i && h <= i && h > j)) {
            memcpy(ptab_at(t, i), ptab_at(t, j), t->slot_size);
            i = j;
        }
    }
    memset(ptab_at(t, i), 0, t->slot_size);
    t->used--;
}

/* ---- the tally (under the map's lock) ----------------------------------- */

static void tally_add(byval_ptrmap_t *m, const void *value)
{
    if (!value || m->tally_lost)
        return;
    if (ptab_room(&m->tally) != 0) { /* counts unknown from now on: the map scans */
        free(m->tally.slots);
        m->tally = (ptab_t){.slot_size = sizeof(tally_slot_t)};
        m->tally_lost = 1;
        return;
    }
    tally_slot_t *s = (tally_slot_t *)ptab_at(&m->tally, ptab_find(&m->tally, (uintptr_t)value));
    if (!s->value) {
        s->value = (uintptr_t)value;
        m->tally.used++;
    }
    s->n++;
}

static void tally_sub(byval_ptrmap_t *m, const void *value)
{
    if (!value || m->tally_lost || !m->tally.slots)
        return;
    size_t i = ptab_find(&m->tally, (uintptr_t)value);
    tally_slot_t *s = (tally_slot_t *)ptab_at(&m->tally, i);
    if (s->value && --s->n == 0)
        ptab_erase(&m->tally, i);
}

/* The slots of value; SIZE_MAX when unknown (NULL, or the tally lost). */
static size_t tally_count(const byval_ptrmap_t *m, const void *value)
{
    if (!value || m->tally_lost)
        return SIZE_MAX;
    if (!m->tally.slots)
        return 0;
    const tally_slot_t *s =
        (const tally_slot_t *)ptab_at(&m->tally, ptab_find(&m->tally, (uintptr_t)value));
    return s->value ? s->n : 0;
}

/* ---- the lock, and fork ---------------------------------------------------- */

static inline void spin_take(int *locked)
{
    for (unsigned spins = 0;; spins++) {
        if (!__atomic_load_n(locked, __ATOMIC_RELAXED) &&
            !__atomic_exchange_n(locked, 1, __ATOMIC_ACQUIRE))
            return;
        if (spins >= 64)
            sched_yield();
#if defined(__x86_64__) || defined(__i386__)
        else
            __builtin_ia32_pause();
#endif
    }
}

static void map_lock(byval_ptrmap_t *m)
{
    byval_rank_enter(BYVAL_RANK_PTRMAP);
    spin_take(&m->locked);
}

static void map_unlock(byval_ptrmap_t *m)
{
    __atomic_store_n(&m->locked, 0, __ATOMIC_RELEASE);
    byval_rank_leave(BYVAL_RANK_PTRMAP);
}

/* Every map, for fork (the class PTRMAP of cache/locks.h): prepare holds
 * every map's lock across fork, so the child's clear races nothing. */
static struct {
    byval_lock_t lock;
    byval_ptrmap_t *head;
} maps = {.lock = BYVAL_LOCK_INIT(PTRMAP_LIST)};

static void maps_take(void)
{
    byval_lock_fork_take(&maps.lock);
    for (byval_ptrmap_t *m = maps.head; m; m = m->next)
        spin_take(&m->locked);
}

static void maps_drop(void)
{
    for (byval_ptrmap_t *m = maps.head; m; m = m->next)
        __atomic_store_n(&m->locked, 0, __ATOMIC_RELEASE);
    byval_lock_fork_drop(&maps.lock);
}

BYVAL_LOCK_CLASS(ptrmap, PTRMAP, maps_take, maps_drop);

/* ---- the map ------------------------------------------------------------- */

/* ptr's slot, or the empty one where it would go; its index in *i_p. */
static slot_t *find(const byval_ptrmap_t *m, uintptr_t ptr, size_t *i_p)
{
    *i_p = ptab_find(&m->tab, ptr);
    return (slot_t *)ptab_at(&m->tab, *i_p);
}

static void erase(byval_ptrmap_t *m, size_t i)
{
    tally_sub(m, ((slot_t *)ptab_at(&m->tab, i))->value);
    ptab_erase(&m->tab, i);
}

byval_ptrmap_t *byval_ptrmap_create(size_t key_len)
{
    byval_ptrmap_t *m = calloc(1, sizeof(*m));
    if (!m)
        return NULL;
    m->key_len = key_len;
    m->tab.slot_size = (sizeof(slot_t) + key_len + 7) & ~(size_t)7;
    m->tally.slot_size = sizeof(tally_slot_t);
    if (ptab_room(&m->tab) != 0) {
        free(m);
        return NULL;
    }
    byval_lock(&maps.lock);
    m->next = maps.head;
    maps.head = m;
    byval_unlock(&maps.lock);
    return m;
}

byval_ptrmap_t *byval_ptrmap_create_keep(size_t key_len)
{
    byval_ptrmap_t *m = byval_ptrmap_create(key_len);
    if (m)
        m->keep = 1;
    return m;
}

void byval_ptrmap_destroy(byval_ptrmap_t *m)
{
    if (!m)
        return;
    byval_lock(&maps.lock);
    byval_ptrmap_t **pp = &maps.head;
    while (*pp != m)
        pp = &(*pp)->next;
    *pp = m->next;
    byval_unlock(&maps.lock);
    free(m->tab.slots);
    free(m->tally.slots);
    free(m);
}

int byval_ptrmap_ref_value(byval_ptrmap_t *m, uintptr_t ptr, const void *key, void *value)
{
    if (!m || !key || !ptr)
        return -1;
    int n = -1;
    size_t i;
    map_lock(m);
    slot_t *s = find(m, ptr, &i);
    int same = s->ptr && s->value == value && memcmp(s->key, key, m->key_len) == 0;
    if (!s->ptr && ptab_room(&m->tab) == 0) { /* a new slot: zeroes, as a closed one */
        s = find(m, ptr, &i);
        s->ptr = ptr;
        m->tab.used++;
    }
    if (s->ptr && !same && s->count == 0) {
        /* New, or a kept closed pointer of a mapping released without a
         * drop: the new one at that address replaces it. */
        memcpy(s->key, key, m->key_len);
        tally_sub(m, s->value);
        tally_add(m, value);
        s->value = value;
        same = 1;
    }
    if (same)
        n = ++s->count;
    map_unlock(m);
    return n;
}

int byval_ptrmap_ref(byval_ptrmap_t *m, uintptr_t ptr, const void *key)
{
    return byval_ptrmap_ref_value(m, ptr, key, NULL);
}

/* unref, or drop: forget ptr whatever its count (the count it had). */
static inline int unref(byval_ptrmap_t *m, uintptr_t ptr, void *key_p, void **value_p, int drop)
{
    if (!m || !ptr)
        return -1;
    int n = -1;
    size_t i;
    map_lock(m);
    slot_t *s = find(m, ptr, &i);
    if (s->ptr) {
        if (key_p)
            memcpy(key_p, s->key, m->key_len);
        if (value_p)
            *value_p = s->value;
        if (drop || s->count == 0)
            n = drop ? s->count : BYVAL_PTRMAP_CLOSED; /* kept, and closed already */
        else
            n = --s->count;
        if (drop || (n == 0 && !m->keep))
            erase(m, i);
    }
    map_unlock(m);
    return n;
}

int byval_ptrmap_unref_value(byval_ptrmap_t *m, uintptr_t ptr, void *key_p, void **value_p)
{
    return unref(m, ptr, key_p, value_p, 0);
}

int byval_ptrmap_unref(byval_ptrmap_t *m, uintptr_t ptr, void *key_p)
{
    return unref(m, ptr, key_p, NULL, 0);
}

int byval_ptrmap_drop(byval_ptrmap_t *m, uintptr_t ptr)
{
    return unref(m, ptr, NULL, NULL, 1);
}

/* Drop, or close (count 0, kept), every pointer recorded with value: how
 * many (close: how many were open). O(1) when the tally says value has no
 * pointer, or one and it is hint; else a scan. */
static size_t for_value(byval_ptrmap_t *m, const void *value, uintptr_t hint, int drop)
{
    size_t n = 0, i = 0;
    if (!m)
        return 0;
    map_lock(m);
    size_t count = tally_count(m, value);
    slot_t *h = count == 1 && hint ? find(m, hint, &i) : NULL;
    int one = h && h->ptr && h->value == value;
    size_t end = one ? i + 1 : count ? m->tab.nslots : 0;
    i = one ? i : 0;
    while (i < end) {
        slot_t *s = (slot_t *)ptab_at(&m->tab, i);
        if (s->ptr && s->value == value && (drop || s->count)) {
            n++;
            if (drop) {
                erase(m, i); /* shifts a later entry into i: look at i again */
                continue;
            }
            s->count = 0;
        }
        i++;
    }
    map_unlock(m);
    return n;
}

size_t byval_ptrmap_drop_value_at(byval_ptrmap_t *m, const void *value, uintptr_t hint)
{
    return for_value(m, value, hint, 1);
}

size_t byval_ptrmap_close_value_at(byval_ptrmap_t *m, const void *value, uintptr_t hint)
{
    return for_value(m, value, hint, 0);
}

int byval_ptrmap_count_value(byval_ptrmap_t *m, uintptr_t ptr, const void *value)
{
    if (!m || !ptr)
        return -1;
    size_t i;
    map_lock(m);
    slot_t *s = find(m, ptr, &i);
    int n = s->ptr && s->value == value ? s->count : -1;
    map_unlock(m);
    return n;
}

size_t byval_ptrmap_size(byval_ptrmap_t *m)
{
    if (!m)
        return 0;
    map_lock(m);
    size_t n = m->tab.used;
    map_unlock(m);
    return n;
}

/* In a fork child, after cache/locks.c released the lock. A lost tally
 * stays lost: counts made before are unknown still. */
void byval_ptrmap_clear(byval_ptrmap_t *m)
{
    if (!m)
        return;
    memset(m->tab.slots, 0, m->tab.nslots * m->tab.slot_size);
    m->tab.used = 0;
    if (m->tally.slots)
        memset(m->tally.slots, 0, m->tally.nslots * m->tally.slot_size);
    m->tally.used = 0;
}
