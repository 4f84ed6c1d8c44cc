/* SPDX-License-Identifier: MIT */
/*
 * peers.c - what the resolution (resolve.c) learnt per exporter.
 *
 * A small table of exporters, keyed by (pidns, pid, identity),
 * that says how each was reached when the plain pidfd path did not do: its
 * pid translated into our namespace (so the /proc scan runs once per
 * exporter, not once per open) or its socket (so auto stops paying a
 * failing pidfd_getfd per open). The key includes the identity, so an
 * entry can never describe a later process that reuses the pid; and a
 * remembered translation is still verified on the pidfd at every use.
 * Fixed size, overwritten round robin: forgetting only costs one retry.
 */
#include <string.h>

#include "cache/locks.h"
#include "handles/resolve_internal.h"
#include "handles/transport.h"

#define PEERS 256

typedef struct peer {
    uint32_t pidns, pid;
    uint64_t identity;
    byval_via_t via; /* XLATED or SOCKET; NONE: empty slot */
    uint32_t local_pid;
} peer_t;

static struct {
    byval_lock_t lock;
    unsigned next; /* entries ever written (atomic: read unlocked) */
    peer_t p[PEERS];
} mem = {.lock = BYVAL_LOCK_INIT(TRANSPORT)};
/* The table stays true in a fork child (same exporters, same host): only
 * the lock must not be inherited held. */
BYVAL_LOCK_STATIC(transport, &mem.lock);

static peer_t peer_get(const byval_record_t *rec)
{
    peer_t found = {0};
    /* Nothing learnt yet (the common case: one namespace, pidfd allowed):
     * no lock, no scan on every resolution. */
    if (!__atomic_load_n(&mem.next, __ATOMIC_ACQUIRE))
        return found;
    byval_lock(&mem.lock);
    for (unsigned i = 0; i < PEERS; i++) {
        const peer_t *p = &mem.p[i];
        if (p->via != BYVAL_VIA_NONE && p->pid == rec->pid && p->pidns == rec->pidns &&
            p->identity == rec->identity) {
            found = *p;
            break;
        }
    }
    byval_unlock(&mem.lock);
    return found;
}

void byval_peer_put(const byval_record_t *rec, byval_via_t via, uint32_t local_pid)
{
    byval_lock(&mem.lock);
    peer_t *slot = NULL;
    for (unsigned i = 0; i < PEERS && !slot; i++)
        if (mem.p[i].via != BYVAL_VIA_NONE && mem.p[i].pid == rec->pid &&
            mem.p[i].pidns == rec->pidns && mem.p[i].identity == rec->identity)
            slot = &mem.p[i];
    int fresh = !slot;
    if (fresh)
        slot = &mem.p[__atomic_load_n(&mem.next, __ATOMIC_RELAXED) % PEERS];
    *slot = (peer_t){rec->pidns, rec->pid, rec->identity, via, local_pid};
    if (fresh) /* after the entry: an unlocked reader that sees it counted looks */
        __atomic_fetch_add(&mem.next, 1, __ATOMIC_RELEASE);
    byval_unlock(&mem.lock);
}

void byval_transport_remember_socket(const byval_record_t *rec)
{
    byval_peer_put(rec, BYVAL_VIA_SOCKET, 0);
}

void byval_transport_forget(void)
{
    byval_lock(&mem.lock);
    memset(mem.p, 0, sizeof(mem.p));
    __atomic_store_n(&mem.next, 0, __ATOMIC_RELEASE);
    byval_unlock(&mem.lock);
}

byval_peer_t byval_peer_get(const byval_record_t *rec)
{
    peer_t p = peer_get(rec);
    return (byval_peer_t){p.via, p.via == BYVAL_VIA_XLATED ? p.local_pid : 0};
}
