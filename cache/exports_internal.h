/* SPDX-License-Identifier: MIT */
/* exports_internal.h - the export core's lock and its counted shared
 * objects (exports_items.c), for exports.c. */
#ifndef BYVAL_CACHE_EXPORTS_INTERNAL_H
#define BYVAL_CACHE_EXPORTS_INTERNAL_H

#include "cache/exports.h"

/* An item's registry entry is taken (beside BYVAL_EXPORT_OFFER/RESCUE). */
#define EXP_PUBLISHED 4u

/* The core's one lock: every table's list of live exports and the
 * counted objects. Taken before the registry's, the broker's and the
 * rescue registry's locks (the sink's), never under a cache lock, and
 * never held across fork (exports.c says why). */
void byval_exports_lock(void);
void byval_exports_unlock(void);

/* (locked) Take e's items' stages through the sink / give back those of
 * items from `from` on. */
int byval_exports_take_locked(byval_export_t *e);
void byval_exports_give_locked(byval_export_t *e, uint32_t from);

/* (locked) Is any registry entry of key held? */
int byval_exports_key_held_locked(uint64_t key);

/* Fork child: forget every counted object. */
void byval_exports_items_forget(void);

#endif
