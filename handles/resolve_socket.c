/* SPDX-License-Identifier: MIT */
/*
 * resolve_socket.c - the fetch step (resolve.c's step 4) on the socket
 * routes, and step 5 after it.
 *
 * Two routes to the same broker (broker_serve.c), tried in this order:
 *   abstract   its abstract name "\0ipcbyval-...", in our network
 *              namespace; the listener is proven by SO_PEERPIDFD (pidfs
 *              records) or SO_PEERCRED (broker_fetch.c).
 *   directory  with IPCBYVAL_RENDEZVOUS_DIR, when nobody listens at the
 *              abstract name (the exporter is in another network
 *              namespace: another pod or container) or the listener
 *              there is not the exporter: its socket in the
 *              directory, named by its identity (rendezvous.h), with the
 *              pidfs proof mandatory.
 * The broker proves its identity and serves only what its exporter
 * offered (steps 2-4 on its side); the duplicate is proven here (step 5,
 * no registry proof: the broker checked its own registry).
 */
#include <stdio.h>

#include "handles/broker.h"
#include "handles/rendezvous.h"
#include "handles/resolve_internal.h"

/* One route: the fd into *fd_p; the listener's pidfd kept in x when x has
 * none yet and the listener proved the identity. */
static byval_status_t at_route(const byval_want_t *w, byval_exporter_t *x, byval_broker_at_t at,
                               int *fd_p, char *msg, size_t msglen)
{
    if (x->pidfd >= 0)
        return byval_broker_fetch_at(w->rec, at, w->fd, w->ino, w->tag, fd_p, NULL, msg, msglen);
    byval_status_t st =
        byval_broker_fetch_at(w->rec, at, w->fd, w->ino, w->tag, fd_p, &x->pidfd, msg, msglen);
    x->owned = x->pidfd >= 0;
    return st;
}

byval_status_t byval_fetch_socket(const byval_want_t *w, byval_exporter_t *x, int *fd_p,
                                  byval_fetch_info_t *info, char *msg, size_t msglen)
{
    x->pid = w->rec->pid; /* as the exporter named itself: the broker's name */
    byval_via_t via = BYVAL_VIA_SOCKET;
    byval_status_t st = at_route(w, x, BYVAL_BROKER_ABSTRACT, fd_p, msg, msglen);
    /* Any process of any uid in our network namespace can bind the
     * abstract name first: a listener that is not the exporter must not
     * keep the directory from being tried. */
    if ((st == BYVAL_E_GONE || st == BYVAL_E_IDENTITY) && byval_rendezvous_enabled()) {
        char first[512] = "";
        if (st == BYVAL_E_IDENTITY && msg)
            snprintf(first, sizeof(first), "%s", msg);
        via = BYVAL_VIA_RENDEZVOUS;
        st = at_route(w, x, BYVAL_BROKER_DIR, fd_p, msg, msglen);
        if (st != BYVAL_OK && first[0])
            byval_msg_prefix(msg, msglen, first);
    }
    if (st != BYVAL_OK)
        return st;
    info->via = via;
    byval_fd_seen_t none = {0};
    byval_proof_t no_proof = {0};
    st = byval_prove_object(w, x, &no_proof, &none, *fd_p, msg, msglen);
    if (st != BYVAL_OK) {
        byval_fd_release(*fd_p);
        *fd_p = -1;
    }
    return st;
}
