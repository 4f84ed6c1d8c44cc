/* SPDX-License-Identifier: MIT */
/*
 * vtally.c - value -> count, open addressing on a multiplicative hash of
 * the pointer, linear probing, deletion by backward shift, doubling at
 * half load (as ptrmap.c). A failed allocation marks the tally lost for
 * good: every count is then unknown and the owner scans.
 */
#include "cache/vtally.h"

#include <stdlib.h>
#include <string.h>

struct byval_vtally_slot {
    const void *value; /* NULL: empty */
    size_t n;
};

#define MIN_SLOTS 64

static size_t home_of(size_t nslots, const void *value)
{
    return (size_t)(((uint64_t)(uintptr_t)value * 0x9E3779B97F4A7C15ull) >> 20) & (nslots - 1);
}

static size_t find(const struct byval_vtally_slot *slot, size_t nslots, const void *value)
{
    size_t i = home_of(nslots, value);
    while (slot[i].value && slot[i].value != value)
        i = (i + 1) & (nslots - 1);
    return i;
}

static int grow(byval_vtally_t *t)
{
    size_t n = t->nslots ? t->nslots * 2 : MIN_SLOTS;
    struct byval_vtally_slot *big = calloc(n, sizeof(*big));
    if (!big)
        return -1;
    for (size_t i = 0; i < t->nslots; i++)
        if (t->slot[i].value)
            big[find(big, n, t->slot[i].value)] = t->slot[i];
    free(t->slot);
    t->slot = big;
    t->nslots = n;
    return 0;
}

void byval_vtally_add(byval_vtally_t *t, const void *value)
{
    if (!value || t->lost)
        return;
    if ((t->used + 1) * 2 > t->nslots && grow(t) != 0) {
        byval_vtally_free(t);
        t->lost = 1; /* counts unknown from now on: the owner scans */
        return;
    }
    struct byval_vtally_slot *s = &t->slot[find(t->slot, t->nslots, value)];
    if (!s->value) {
        s->value = value;
        t->used++;
    }
    s->n++;
}

void byval_vtally_sub(byval_vtally_t *t, const void *value)
{
    if (!value || t->lost || !t->slot)
        return;
    size_t mask = t->nslots - 1, i = find(t->slot, t->nslots, value);
    if (!t->slot[i].value || --t->slot[i].n)
        return;
    /* The last record: remove the slot, shifting back its probe run. */
    for (size_t j = (i + 1) & mask; t->slot[j].value; j = (j + 1) & mask) {
        size_t h = home_of(t->nslots, t->slot[j].value);
        if ((j > i && (h <= i || h > j)) || (j < i && h <= i && h > j)) {
            t->slot[i] = t->slot[j];
            i = j;
        }
    }
    t->slot[i].value = NULL;
    t->slot[i].n = 0;
    t->used--;
}

size_t byval_vtally_count(const byval_vtally_t *t, const void *value)
{
    if (!value || t->lost)
        return SIZE_MAX;
    if (!t->slot)
        return 0;
    const struct byval_vtally_slot *s = &t->slot[find(t->slot, t->nslots, value)];
    return s->value ? s->n : 0;
}

void byval_vtally_clear(byval_vtally_t *t)
{
    if (t->slot)
        memset(t->slot, 0, t->nslots * sizeof(*t->slot));
    t->used = 0;
    /* a lost tally stays lost: counts made before are unknown still */
}

void byval_vtally_free(byval_vtally_t *t)
{
    free(t->slot);
    t->slot = NULL;
    t->nslots = t->used = 0;
}
