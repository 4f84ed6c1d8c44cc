/* SPDX-License-Identifier: MIT */
/*
 * ptrmap.c - open-addressing table keyed by pointer value, one spin lock
 * (cache/spin.h says why not a mutex).
 *
 * Every cached re-open and close goes through here, so it is built for
 * that: slots hold the entry inline (no malloc per open), linear probing
 * on a multiplicative hash of the pointer, deletion by backward shift (no
 * tombstones), doubling at half load. uthash cost a malloc-free but
 * hash-heavy add/delete per cycle and twice the time.
 */
#include "cache/ptrmap.h"

#include <stdlib.h>
#include <string.h>

#include "cache/spin.h"
#include "cache/vtally.h"

typedef struct slot {
    uintptr_t ptr; /* 0 = empty (no mapping lives at address 0) */
    int count;
    void *value;
    unsigned char key[]; /* key_len bytes */
} slot_t;

struct byval_ptrmap {
    byval_spin_t lock;
    struct byval_ptrmap *next; /* the list of maps (fork), maps.lock */
    size_t key_len;
    size_t slot_size;
    size_t nslots; /* power of two */
    size_t used;
    int keep; /* closed pointers stay, with count 0, until dropped */
    unsigned char *slots;
    /* How many slots hold each value (vtally.c's table, under lock): a
     * release finds its mapping's one pointer without scanning the map
     * (at 1M entries a scan per release was 1-3 ms with the lock held,
     * and tearing a cache down N^2 slot visits). */
    byval_vtally_t tally;
};

#define PTRMAP_MIN_SLOTS 64

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
        byval_spin_lock_raw(&m->lock);
}

static void maps_drop(void)
{
    for (byval_ptrmap_t *m = maps.head; m; m = m->next)
        byval_spin_unlock_raw(&m->lock);
    byval_lock_fork_drop(&maps.lock);
}

BYVAL_LOCK_CLASS(ptrmap, PTRMAP, maps_take, maps_drop);

static slot_t *slot_at(const byval_ptrmap_t *m, size_t i)
{
    return (slot_t *)(m->slots + i * m->slot_size);
}

static size_t home_of(const byval_ptrmap_t *m, uintptr_t ptr)
{
    return (size_t)(((uint64_t)ptr * 0x9E3779B97F4A7C15ull) >> 20) & (m->nslots - 1);
}

byval_ptrmap_t *byval_ptrmap_create(size_t key_len)
{
    byval_ptrmap_t *m = calloc(1, sizeof(*m));
    if (!m)
        return NULL;
    m->lock.rank = BYVAL_RANK_PTRMAP;
    m->key_len = key_len;
    m->slot_size = (sizeof(slot_t) + key_len + 7) & ~(size_t)7;
    m->nslots = PTRMAP_MIN_SLOTS;
    m->slots = calloc(m->nslots, m->slot_size);
    if (!m->slots) {
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
    for (byval_ptrmap_t **pp = &maps.head; *pp; pp = &(*pp)->next)
        if (*pp == m) {
            *pp = m->next;
            break;
        }
    byval_unlock(&maps.lock);
    free(m->slots);
    byval_vtally_free(&m->tally);
    free(m);
}

/* Index of ptr's slot, or of the empty slot where it would go. */
static size_t find(const byval_ptrmap_t *m, uintptr_t ptr)
{
    size_t i = home_of(m, ptr);
    while (slot_at(m, i)->ptr && slot_at(m, i)->ptr != ptr)
        i = (i + 1) & (m->nslots - 1);
    return i;
}

static int grow(byval_ptrmap_t *m)
{
    /* Not a copy of *m: its lock word is read by spinning waiters. */
    byval_ptrmap_t big = {.slot_size = m->slot_size, .nslots = m->nslots * 2};
    big.slots = calloc(big.nslots, m->slot_size);
    if (!big.slots)
        return -1;
    for (size_t i = 0; i < m->nslots; i++) {
        slot_t *s = slot_at(m, i);
        if (s->ptr)
            memcpy(slot_at(&big, find(&big, s->ptr)), s, m->slot_size);
    }
    free(m->slots);
    m->slots = big.slots;
    m->nslots = big.nslots;
    return 0;
}

/* Remove slot i, shifting back the entries of its probe run. */
static void erase(byval_ptrmap_t *m, size_t i)
{
    size_t mask = m->nslots - 1;
    byval_vtally_sub(&m->tally, slot_at(m, i)->value);
    for (size_t j = (i + 1) & mask; slot_at(m, j)->ptr; j = (j + 1) & mask) {
        size_t h = home_of(m, slot_at(m, j)->ptr);
        /* j may move to i if its home is not in (i, j] cyclically. */
        if ((j > i && (h <= i || h > j)) || (j < i && h <= i && h > j)) {
            memcpy(slot_at(m, i), slot_at(m, j), m->slot_size);
            i = j;
        }
    }
    memset(slot_at(m, i), 0, m->slot_size);
    m->used--;
}

int byval_ptrmap_ref_value(byval_ptrmap_t *m, uintptr_t ptr, const void *key, void *value)
{
    if (!m || !key || !ptr)
        return -1;
    int n = -1;
    byval_spin_lock(&m->lock);
    size_t i = find(m, ptr);
    slot_t *s = slot_at(m, i);
    if (s->ptr) {
        int same = s->value == value && memcmp(s->key, key, m->key_len) == 0;
        if (!same && s->count == 0) {
            /* A kept closed pointer of a mapping released without a drop:
             * the new one at that address replaces it. */
            memcpy(s->key, key, m->key_len);
            byval_vtally_sub(&m->tally, s->value);
            byval_vtally_add(&m->tally, value);
            s->value = value;
            same = 1;
        }
        if (same)
            n = ++s->count;
    } else if ((m->used + 1) * 2 <= m->nslots || grow(m) == 0) {
        s = slot_at(m, find(m, ptr));
        s->ptr = ptr;
        s->count = n = 1;
        s->value = value;
        memcpy(s->key, key, m->key_len);
        m->used++;
        byval_vtally_add(&m->tally, value);
    }
    byval_spin_unlock(&m->lock);
    return n;
}

int byval_ptrmap_ref(byval_ptrmap_t *m, uintptr_t ptr, const void *key)
{
    return byval_ptrmap_ref_value(m, ptr, key, NULL);
}

int byval_ptrmap_unref_value(byval_ptrmap_t *m, uintptr_t ptr, void *key_p, void **value_p)
{
    if (!m || !ptr)
        return -1;
    int n = -1;
    byval_spin_lock(&m->lock);
    size_t i = find(m, ptr);
    slot_t *s = slot_at(m, i);
    if (s->ptr) {
        if (key_p)
            memcpy(key_p, s->key, m->key_len);
        if (value_p)
            *value_p = s->value;
        if (s->count == 0) {
            n = BYVAL_PTRMAP_CLOSED; /* kept, and closed already */
        } else {
            n = --s->count;
            if (n == 0 && !m->keep)
                erase(m, i);
        }
    }
    byval_spin_unlock(&m->lock);
    return n;
}

int byval_ptrmap_unref(byval_ptrmap_t *m, uintptr_t ptr, void *key_p)
{
    return byval_ptrmap_unref_value(m, ptr, key_p, NULL);
}

int byval_ptrmap_drop(byval_ptrmap_t *m, uintptr_t ptr)
{
    if (!m || !ptr)
        return -1;
    int n = -1;
    byval_spin_lock(&m->lock);
    size_t i = find(m, ptr);
    if (slot_at(m, i)->ptr) {
        n = slot_at(m, i)->count;
        erase(m, i);
    }
    byval_spin_unlock(&m->lock);
    return n;
}

/* (locked) The one slot recorded with value, found through hint, when
 * the tally says value has exactly one and hint is it: its index, else
 * -1 (scan). */
static long only_slot(const byval_ptrmap_t *m, const void *value, uintptr_t hint)
{
    if (!hint || byval_vtally_count(&m->tally, value) != 1)
        return -1;
    size_t i = find(m, hint);
    return slot_at(m, i)->ptr && slot_at(m, i)->value == value ? (long)i : -1;
}

size_t byval_ptrmap_drop_value_at(byval_ptrmap_t *m, const void *value, uintptr_t hint)
{
    size_t n = 0;
    if (!m)
        return 0;
    byval_spin_lock(&m->lock);
    long one = byval_vtally_count(&m->tally, value) == 0 ? -2 : only_slot(m, value, hint);
    if (one >= 0) {
        erase(m, (size_t)one);
        n = 1;
    }
    for (size_t i = 0; one == -1 && i < m->nslots;) {
        slot_t *s = slot_at(m, i);
        if (s->ptr && s->value == value) {
            erase(m, i); /* shifts a later entry into i: look at i again */
            n++;
        } else {
            i++;
        }
    }
    byval_spin_unlock(&m->lock);
    return n;
}

size_t byval_ptrmap_drop_value(byval_ptrmap_t *m, const void *value)
{
    return byval_ptrmap_drop_value_at(m, value, 0);
}

int byval_ptrmap_count_value(byval_ptrmap_t *m, uintptr_t ptr, const void *value)
{
    if (!m || !ptr)
        return -1;
    byval_spin_lock(&m->lock);
    slot_t *s = slot_at(m, find(m, ptr));
    int n = s->ptr && s->value == value ? (int)s->count : -1;
    byval_spin_unlock(&m->lock);
    return n;
}

size_t byval_ptrmap_close_value_at(byval_ptrmap_t *m, const void *value, uintptr_t hint)
{
    size_t n = 0;
    if (!m)
        return 0;
    byval_spin_lock(&m->lock);
    long one = byval_vtally_count(&m->tally, value) == 0 ? -2 : only_slot(m, value, hint);
    for (size_t i = one >= 0 ? (size_t)one : 0; one != -2 && i < m->nslots; i++) {
        slot_t *s = slot_at(m, i);
        if (s->ptr && s->value == value && s->count) {
            s->count = 0;
            n++;
        }
        if (one >= 0)
            break;
    }
    byval_spin_unlock(&m->lock);
    return n;
}

size_t byval_ptrmap_close_value(byval_ptrmap_t *m, const void *value)
{
    return byval_ptrmap_close_value_at(m, value, 0);
}

size_t byval_ptrmap_size(byval_ptrmap_t *m)
{
    if (!m)
        return 0;
    byval_spin_lock(&m->lock);
    size_t n = m->used;
    byval_spin_unlock(&m->lock);
    return n;
}

void byval_ptrmap_clear(byval_ptrmap_t *m)
{
    if (!m)
        return;
    /* Called in a fork child, after cache/locks.c released the lock. */
    memset(m->slots, 0, m->nslots * m->slot_size);
    m->used = 0;
    byval_vtally_clear(&m->tally);
}
