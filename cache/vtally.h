/* SPDX-License-Identifier: MIT */
/*
 * vtally.h - how many times each value is recorded in a table (for the
 * pointer map: how many pointers name each mapping), so that a release
 * knows when its mapping's pointers are all found without scanning the
 * map. Not thread-safe: the owner's lock covers it. Values are pointers;
 * NULL is not counted.
 */
#ifndef BYVAL_CACHE_VTALLY_H
#define BYVAL_CACHE_VTALLY_H

#include <stddef.h>
#include <stdint.h>

typedef struct byval_vtally {
    struct byval_vtally_slot *slot; /* NULL until the first add */
    size_t nslots, used;            /* nslots: a power of two */
    int lost;                       /* an add found no memory: counts unknown */
} byval_vtally_t;

/* One more / one less record of value (no-op for NULL). */
void byval_vtally_add(byval_vtally_t *t, const void *value);
void byval_vtally_sub(byval_vtally_t *t, const void *value);

/* The records of value; SIZE_MAX when unknown (NULL, or memory ran out
 * once: the owner then scans, as it did before the tally). */
size_t byval_vtally_count(const byval_vtally_t *t, const void *value);

/* Forget every count (a fork child's clear); free the table. */
void byval_vtally_clear(byval_vtally_t *t);
void byval_vtally_free(byval_vtally_t *t);

#endif
