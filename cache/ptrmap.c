/* SPDX-License-Identifier: MIT */
/* ptrmap.c - uthash keyed by pointer value, one mutex (close is not a hot
 * path: the hot path is the import-cache hit, which lives in lru.c). */
#include "cache/ptrmap.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* uthash's default on ENOMEM is exit(): never in a host program. With
 * non-fatal OOM an element that could not be added is simply absent,
 * which ptrmap_ref_locked checks. */
#define HASH_NONFATAL_OOM 1
#include <uthash.h>

typedef struct ptrmap_entry {
    uintptr_t ptr;
    int count;
    void *value; /* the cache entry's value, for byval_lru_put_value */
    UT_hash_handle hh;
    unsigned char key[]; /* key_len bytes */
} ptrmap_entry_t;

/* Entries of closed pointers are kept for reuse (up to this many), so an
 * open/close cycle on a cached mapping does no malloc/free. */
#define PTRMAP_SPARE_MAX 64

struct byval_ptrmap {
    pthread_mutex_t lock;
    size_t key_len;
    ptrmap_entry_t *head;
    ptrmap_entry_t *spare; /* linked through hh.next */
    unsigned nspare;
};

byval_ptrmap_t *byval_ptrmap_create(size_t key_len)
{
    byval_ptrmap_t *m = calloc(1, sizeof(*m));
    if (!m)
        return NULL;
    pthread_mutex_init(&m->lock, NULL);
    m->key_len = key_len;
    return m;
}

static void ptrmap_free_all(byval_ptrmap_t *m)
{
    ptrmap_entry_t *e, *tmp;
    HASH_ITER(hh, m->head, e, tmp) {
        HASH_DEL(m->head, e);
        free(e);
    }
    while (m->spare) {
        e = m->spare;
        m->spare = e->hh.next;
        free(e);
    }
    m->nspare = 0;
}

void byval_ptrmap_destroy(byval_ptrmap_t *m)
{
    if (!m)
        return;
    ptrmap_free_all(m);
    pthread_mutex_destroy(&m->lock);
    free(m);
}

static int ptrmap_ref_locked(byval_ptrmap_t *m, uintptr_t ptr, const void *key, void *value)
{
    ptrmap_entry_t *e;
    HASH_FIND(hh, m->head, &ptr, sizeof(ptr), e);
    if (e) {
        if (memcmp(e->key, key, m->key_len) != 0 || e->value != value)
            return -1;
        return ++e->count;
    }
    if (m->spare) {
        e = m->spare;
        m->spare = e->hh.next;
        m->nspare--;
    } else {
        e = malloc(sizeof(*e) + m->key_len);
        if (!e)
            return -1;
    }
    e->ptr = ptr;
    e->count = 1;
    e->value = value;
    memcpy(e->key, key, m->key_len);
    HASH_ADD(hh, m->head, ptr, sizeof(e->ptr), e);
    ptrmap_entry_t *check;
    HASH_FIND(hh, m->head, &ptr, sizeof(ptr), check);
    if (check != e) {
        free(e);
        return -1;
    }
    return 1;
}

int byval_ptrmap_ref_value(byval_ptrmap_t *m, uintptr_t ptr, const void *key, void *value)
{
    if (!m || !key)
        return -1;
    pthread_mutex_lock(&m->lock);
    int n = ptrmap_ref_locked(m, ptr, key, value);
    pthread_mutex_unlock(&m->lock);
    return n;
}

int byval_ptrmap_ref(byval_ptrmap_t *m, uintptr_t ptr, const void *key)
{
    return byval_ptrmap_ref_value(m, ptr, key, NULL);
}

int byval_ptrmap_unref(byval_ptrmap_t *m, uintptr_t ptr, void *key_p)
{
    return byval_ptrmap_unref_value(m, ptr, key_p, NULL);
}

int byval_ptrmap_unref_value(byval_ptrmap_t *m, uintptr_t ptr, void *key_p, void **value_p)
{
    if (!m)
        return -1;
    int n = -1;
    ptrmap_entry_t *e;
    pthread_mutex_lock(&m->lock);
    HASH_FIND(hh, m->head, &ptr, sizeof(ptr), e);
    if (e) {
        if (key_p)
            memcpy(key_p, e->key, m->key_len);
        if (value_p)
            *value_p = e->value;
        n = --e->count;
        if (n == 0) {
            HASH_DEL(m->head, e);
            if (m->nspare < PTRMAP_SPARE_MAX) {
                e->hh.next = m->spare;
                m->spare = e;
                m->nspare++;
            } else {
                free(e);
            }
        }
    }
    pthread_mutex_unlock(&m->lock);
    return n;
}

size_t byval_ptrmap_size(byval_ptrmap_t *m)
{
    if (!m)
        return 0;
    pthread_mutex_lock(&m->lock);
    size_t n = HASH_COUNT(m->head);
    pthread_mutex_unlock(&m->lock);
    return n;
}

void byval_ptrmap_clear(byval_ptrmap_t *m)
{
    if (!m)
        return;
    /* Called in a fork child: the lock may have been held by a thread that
     * does not exist here, so re-initialise it rather than take it. */
    pthread_mutex_init(&m->lock, NULL);
    ptrmap_free_all(m);
}
