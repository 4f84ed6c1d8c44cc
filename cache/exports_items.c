/* SPDX-License-Identifier: MIT */
/*
 * exports_items.c - the shared objects exports hold, counted (see
 * exports.h): a registry entry per (key, inode), a broker offer and a
 * rescue registration per (fd, inode). The first holder takes the object
 * through the sink, the last one gives it back; in between, further
 * holders only count. Under the core's lock (exports_internal.h).
 */
#include <stdlib.h>

#include "cache/exports_internal.h"

#define ITEM_BUCKETS 1024u

typedef struct held {
    struct held *next;
    unsigned stage; /* EXP_PUBLISHED, BYVAL_EXPORT_OFFER or BYVAL_EXPORT_RESCUE */
    uint64_t id;    /* registry key, or fd */
    uint32_t ino;
    uint32_t holders;
    uint64_t serial;
} held_t;

static held_t *bucket[ITEM_BUCKETS];
static size_t nheld[3]; /* published, offered, registered */
static const byval_exports_sink_t *sink;

void byval_exports_set_sink(const byval_exports_sink_t *s)
{
    byval_exports_lock();
    sink = s;
    byval_exports_unlock();
}

static unsigned stage_index(unsigned stage)
{
    return stage == EXP_PUBLISHED ? 0 : stage == BYVAL_EXPORT_OFFER ? 1 : 2;
}

/* Hashed on (stage, key or fd) alone: a registry key's entries, whatever
 * their inode, share one bucket (byval_exports_key_held_locked). */
static held_t **head(unsigned stage, uint64_t id)
{
    uint64_t h = (id ^ stage) * UINT64_C(0x9E3779B97F4A7C15);
    return &bucket[h >> 54 & (ITEM_BUCKETS - 1)];
}

static held_t **find(unsigned stage, uint64_t id, uint32_t ino)
{
    held_t **pp = head(stage, id);
    while (*pp && !((*pp)->stage == stage && (*pp)->id == id && (*pp)->ino == ino))
        pp = &(*pp)->next;
    return pp;
}

/* The sink's give-back of one stage. */
static void untake(unsigned stage, const byval_export_item_t *it)
{
    if (stage == EXP_PUBLISHED)
        sink->unpublish(it->key, it->ino); /* importers release their closed mappings */
    else if (stage == BYVAL_EXPORT_OFFER)
        sink->withdraw(it->fd);
    else
        sink->delist(it->fd);
}

/* Take one stage of item it: 1 when it is held (by it among others), with
 * the registry serial in *serial_p for EXP_PUBLISHED. */
static int take(unsigned stage, const byval_export_item_t *it, uint64_t *serial_p)
{
    uint64_t id = stage == EXP_PUBLISHED ? it->key : (uint64_t)(int64_t)it->fd, serial = 0;
    held_t **pp = find(stage, id, it->ino), *h = *pp;
    if (!sink)
        return 0;
    if (stage == EXP_PUBLISHED) {
        /* Every fd of a key is listed (a reservation's chunks share one
         * key and, on the real driver, one inode): the registry adds a
         * slot per fd and answers a live one's serial again. */
        serial = sink->publish(it->key, it->ino, it->fd >= 0 ? (uint32_t)it->fd : 0, it->size);
        if (!serial && !h)
            return 0;
        if (!serial)
            serial = h->serial;
        *serial_p = serial;
    } else if (!h &&
               (stage == BYVAL_EXPORT_OFFER ? sink->offer(it->fd, !!(it->flags & BYVAL_EXPORT_OPEN))
                                            : sink->enlist(it->fd)) != 0) {
        return 0;
    }
    if (!h) {
        h = calloc(1, sizeof(*h));
        if (!h) { /* cannot count it: give it back at once */
            untake(stage, it);
            return 0;
        }
        *h = (held_t){.stage = stage, .id = id, .ino = it->ino, .serial = serial};
        *pp = h;
        __atomic_add_fetch(&nheld[stage_index(stage)], 1, __ATOMIC_RELAXED);
    }
    h->holders++;
    return 1;
}

/* Give back one stage of item it (taken before). */
static void give(unsigned stage, const byval_export_item_t *it)
{
    uint64_t id = stage == EXP_PUBLISHED ? it->key : (uint64_t)(int64_t)it->fd;
    held_t **pp = find(stage, id, it->ino), *h = *pp;
    if (!h || --h->holders)
        return;
    *pp = h->next;
    __atomic_sub_fetch(&nheld[stage_index(stage)], 1, __ATOMIC_RELAXED);
    free(h);
    untake(stage, it);
}

int byval_exports_take_locked(byval_export_t *e)
{
    int rc = 0;
    for (uint32_t i = 0; i < e->nitems; i++) {
        byval_export_item_t *it = &e->items[i];
        it->taken = 0;
        it->serial = 0;
        if (it->key && take(EXP_PUBLISHED, it, &it->serial))
            it->taken |= EXP_PUBLISHED;
        else if (it->key && i == 0)
            rc = -1;
        if (it->fd >= 0 && (it->flags & BYVAL_EXPORT_OFFER) && take(BYVAL_EXPORT_OFFER, it, NULL))
            it->taken |= BYVAL_EXPORT_OFFER;
        if (it->fd >= 0 && (it->flags & BYVAL_EXPORT_RESCUE) && take(BYVAL_EXPORT_RESCUE, it, NULL))
            it->taken |= BYVAL_EXPORT_RESCUE;
    }
    return rc;
}

void byval_exports_give_locked(byval_export_t *e, uint32_t from)
{
    /* Everything that names an fd goes before the API's end can close it:
     * the registry entry first (importers release what they cached), then
     * the offer and the registration. Item 0's entry before all: an
     * importer that finds a later item unlisted and item 0 listed knows
     * the export was trimmed, not ended. */
    if (!from && e->nitems && (e->items[0].taken & EXP_PUBLISHED)) {
        give(EXP_PUBLISHED, &e->items[0]);
        e->items[0].taken &= ~EXP_PUBLISHED;
    }
    for (uint32_t i = e->nitems; i-- > from;) {
        byval_export_item_t *it = &e->items[i];
        if (it->taken & EXP_PUBLISHED)
            give(EXP_PUBLISHED, it);
        if (it->taken & BYVAL_EXPORT_OFFER)
            give(BYVAL_EXPORT_OFFER, it);
        if (it->taken & BYVAL_EXPORT_RESCUE)
            give(BYVAL_EXPORT_RESCUE, it);
        it->taken = 0;
    }
}

int byval_exports_key_held_locked(uint64_t key)
{
    for (const held_t *h = *head(EXP_PUBLISHED, key); h; h = h->next)
        if (h->stage == EXP_PUBLISHED && h->id == key)
            return 1;
    return 0;
}

void byval_exports_counts(size_t *published_p, size_t *offered_p, size_t *registered_p)
{
    /* No lock: the exit statistics must not wait for one (a fork child
     * may have inherited it held, before its handler runs). */
    *published_p = __atomic_load_n(&nheld[0], __ATOMIC_RELAXED);
    *offered_p = __atomic_load_n(&nheld[1], __ATOMIC_RELAXED);
    *registered_p = __atomic_load_n(&nheld[2], __ATOMIC_RELAXED);
}

void byval_exports_items_forget(void)
{
    /* Fork child: the parent's objects are the parent's (the child's
     * registry, broker and rescue registry start empty). Dropped, not
     * freed: no allocation in a fork child. */
    for (unsigned b = 0; b < ITEM_BUCKETS; b++)
        bucket[b] = NULL;
    nheld[0] = nheld[1] = nheld[2] = 0;
}
