/* SPDX-License-Identifier: MIT */
/*
 * ptrmap.h - thread-safe map from a pointer the application holds (an
 * opened IPC mapping) to what names its cache entry (a fixed-size key:
 * the shim stores the entry's byval_lru_ref_t), with an open count. The
 * close call only has the pointer; this finds the cache entry.
 */
#ifndef BYVAL_CACHE_PTRMAP_H
#define BYVAL_CACHE_PTRMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct byval_ptrmap byval_ptrmap_t;

/* key_len: size of the keys stored (copied inline). NULL on ENOMEM. */
byval_ptrmap_t *byval_ptrmap_create(size_t key_len);
/* A map that keeps a pointer after its last close, with count 0, until
 * it is dropped: a close of such a pointer returns BYVAL_PTRMAP_CLOSED
 * (a double close), distinct from -1 (a pointer never handed out). A
 * ref of a kept pointer with another key or value replaces it. */
byval_ptrmap_t *byval_ptrmap_create_keep(size_t key_len);
void byval_ptrmap_destroy(byval_ptrmap_t *m);

#define BYVAL_PTRMAP_CLOSED (-2)

/* One more open of ptr from key. Returns the new count, or -1 on ENOMEM
 * or when ptr is already mapped from another key (caller's bug). */
int byval_ptrmap_ref(byval_ptrmap_t *m, uintptr_t ptr, const void *key);

/* One close of ptr: copies its key to key_p (may be NULL) and returns the
 * remaining count (the entry is gone at 0), or -1 when ptr is unknown. */
int byval_ptrmap_unref(byval_ptrmap_t *m, uintptr_t ptr, void *key_p);

/* The same, also recording (ref) and returning (unref) a value (the
 * cache entry's). A ref of a known ptr must name the same key and value. */
int byval_ptrmap_ref_value(byval_ptrmap_t *m, uintptr_t ptr, const void *key, void *value);
int byval_ptrmap_unref_value(byval_ptrmap_t *m, uintptr_t ptr, void *key_p, void **value_p);

/* Forget ptr whatever its count: returns the count it had, -1 if unknown. */
int byval_ptrmap_drop(byval_ptrmap_t *m, uintptr_t ptr);

/* Forget every pointer recorded with value. Returns how many. O(1) when
 * value has no pointer, or one and it is hint (a mapping's own address,
 * where it is opened as a rule); else O(size). */
size_t byval_ptrmap_drop_value_at(byval_ptrmap_t *m, const void *value, uintptr_t hint);

/* Mark every pointer recorded with value closed (count 0, kept: a close
 * of it is BYVAL_PTRMAP_CLOSED, a new ref with another value replaces it).
 * Returns how many were open; O(1) as drop_value_at. */
size_t byval_ptrmap_close_value_at(byval_ptrmap_t *m, const void *value, uintptr_t hint);
/* The open count of ptr when it is recorded with value, else -1. */
int byval_ptrmap_count_value(byval_ptrmap_t *m, uintptr_t ptr, const void *value);
/* Entries now (kept closed pointers included). */
size_t byval_ptrmap_size(byval_ptrmap_t *m);

/* Forget everything without callbacks (a fork child's owner). */
void byval_ptrmap_clear(byval_ptrmap_t *m);

#endif
