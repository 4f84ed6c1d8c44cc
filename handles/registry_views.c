/* SPDX-License-Identifier: MIT */
/*
 * registry_views.c - the importer's list of registry views (see
 * registry_view.h): references, lookups, publishing a new view (and
 * kicking the watcher when that makes one too many), fork. The thread
 * that watches them is registry_watch.c's.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cache/locks.h"
#include "handles/registry_internal.h"
#include "handles/resolve_internal.h"

struct byval_reg_watch byval_reg_w = {
    .lock = BYVAL_LOCK_INIT(REGISTRY_WATCH), .epfd = -1, .kick_fd = -1, .kick_kind = WATCH_KICK};
BYVAL_LOCK_STATIC(registry_watch, &byval_reg_w.lock);

void byval_reg_on_event(byval_reg_event_fn fn)
{
    __atomic_store_n(&byval_reg_w.on_event, fn, __ATOMIC_RELEASE);
}

void byval_reg_view_free(byval_reg_view_t *v)
{
    munmap((void *)v->hdr, BYVAL_REG_BYTES);
    if (v->pipe_fd >= 0)
        close(v->pipe_fd); /* never in the epoll set here: unlist took it
                            * out (closing alone would not: the open file
                            * is the exporter's too) */
    free(v);
}

void byval_reg_view_get(byval_reg_view_t *v)
{
    byval_reg_w_lock();
    v->refs++;
    byval_unlock(&byval_reg_w.lock);
}

void byval_reg_view_put(byval_reg_view_t *v)
{
    if (!v)
        return;
    byval_reg_w_lock();
    int last = --v->refs == 0;
    byval_unlock(&byval_reg_w.lock);
    if (last)
        byval_reg_view_free(v);
}

void byval_reg_view_id(const byval_reg_view_t *v, uint32_t *pidns_p, uint32_t *pid_p,
                       uint64_t *identity_p)
{
    *pidns_p = v->pidns;
    *pid_p = v->pid;
    *identity_p = v->identity;
}

int byval_reg_view_gone(const byval_reg_view_t *v)
{
    return __atomic_load_n(&v->gone, __ATOMIC_ACQUIRE);
}

unsigned byval_reg_views(void)
{
    return __atomic_load_n(&byval_reg_w.count, __ATOMIC_RELAXED);
}

static void fork_child(void)
{
    /* The child has no watcher and imports nothing yet (its caches empty
     * themselves at fork). The epoll instance is shared with the parent:
     * touching its interest list would change the parent's, so only our
     * copies of the fds go. The list's memory is the child's own. */
    for (byval_reg_view_t *v = byval_reg_w.head, *nx; v; v = nx) {
        nx = v->next;
        munmap((void *)v->hdr, BYVAL_REG_BYTES);
        if (v->pipe_fd >= 0)
            close(v->pipe_fd);
        free(v);
    }
    byval_reg_w.head = NULL;
    byval_reg_w.count = 0;
    for (pidfd_watch_t *pw = byval_reg_w.pidfds, *nx; pw; pw = nx) {
        nx = pw->next;
        close(pw->fd);
        free(pw);
    }
    byval_reg_w.pidfds = NULL;
    if (byval_reg_w.epfd >= 0)
        close(byval_reg_w.epfd);
    if (byval_reg_w.kick_fd >= 0)
        close(byval_reg_w.kick_fd);
    byval_reg_w.epfd = byval_reg_w.kick_fd = -1;
    __atomic_store_n(&byval_reg_w.started, 0, __ATOMIC_RELAXED);
}
BYVAL_FORK_CHILD(registry_watch, fork_child);

/* (locked) v may serve a lookup: its exporter's image is not known to be
 * gone. Where no watcher runs yet (on demand) nobody collects the pipe's
 * hang-up, so we ask the pipe (one poll, on a miss only): an image gone
 * is marked here, and *wake_p asks for the watcher, which reports it and
 * unlists the view (its epoll set kept the hang-up for it). */
static int view_usable(byval_reg_view_t *v, int *wake_p)
{
    if (byval_reg_view_gone(v))
        return 0;
    if (__atomic_load_n(&byval_reg_w.started, __ATOMIC_RELAXED) || v->pipe_fd < 0)
        return 1;
    struct pollfd p = {.fd = v->pipe_fd, .events = 0};
    if (poll(&p, 1, 0) != 1 || !(p.revents & (POLLHUP | POLLERR)))
        return 1;
    __atomic_store_n(&v->gone, 1, __ATOMIC_RELEASE);
    *wake_p = 1;
    return 0;
}

/* After a lookup that found a gone view: the watcher reports it. */
static void lookup_done(int wake)
{
    if (wake)
        (void)byval_reg_watch_need(NULL, 0); /* -1: the view stays gone, unreported */
}

byval_reg_view_t *byval_reg_lookup(uint32_t pidns, uint32_t pid, uint64_t identity)
{
    byval_reg_view_t *found = NULL;
    int wake = 0;
    byval_reg_w_lock();
    for (byval_reg_view_t *v = byval_reg_w.head; v && !found; v = v->next)
        if (v->pid == pid && v->pidns == pidns && v->identity == identity &&
            view_usable(v, &wake)) {
            v->refs++;
            v->used = ++byval_reg_w.tick;
            found = v;
        }
    byval_unlock(&byval_reg_w.lock);
    lookup_done(wake);
    return found;
}

byval_reg_view_t *byval_reg_lookup_id32(uint32_t pidns, uint32_t pid, uint32_t id32,
                                        uint64_t *identity_p)
{
    byval_reg_view_t *found = NULL;
    int wake = 0;
    byval_reg_w_lock();
    for (byval_reg_view_t *v = byval_reg_w.head; v && !found; v = v->next)
        if (v->pid == pid && v->pidns == pidns && (uint32_t)v->identity == id32 &&
            view_usable(v, &wake)) {
            v->refs++;
            v->used = ++byval_reg_w.tick;
            *identity_p = v->identity;
            found = v;
        }
    byval_unlock(&byval_reg_w.lock);
    lookup_done(wake);
    return found;
}

void byval_reg_w_lock(void)
{
    byval_lock(&byval_reg_w.lock);
}

/* List v and watch it (or use a twin another thread listed meanwhile). */
byval_reg_view_t *byval_reg_publish(byval_reg_view_t *v, char *msg, size_t msglen)
{
    byval_reg_w_lock();
    for (byval_reg_view_t *o = byval_reg_w.head; o; o = o->next)
        if (!byval_reg_view_gone(o) && o->pid == v->pid && o->pidns == v->pidns &&
            o->identity == v->identity) {
            o->refs++;
            o->used = ++byval_reg_w.tick;
            byval_unlock(&byval_reg_w.lock);
            byval_reg_view_free(v);
            return o;
        }
    struct epoll_event ev = {.events = VIEW_EVENTS, .data.ptr = v};
    unsigned n = byval_reg_w.count + 1; /* read lock-free by byval_reg_views */
    int over = n > BYVAL_REG_VIEWS_MAX;
    /* The thread now, unless on demand; one too many views needs it now
     * (it evicts). */
    if ((byval_reg_w.on_demand && !over ? byval_reg_watch_setup(msg, msglen)
                                        : byval_reg_watch_start(msg, msglen)) != 0 ||
        epoll_ctl(byval_reg_w.epfd, EPOLL_CTL_ADD, v->pipe_fd, &ev) != 0) {
        if (msg && !msg[0])
            byval_msg(msg, msglen, "epoll_ctl failed: %s", strerror(errno));
        byval_unlock(&byval_reg_w.lock);
        byval_reg_view_free(v);
        return NULL;
    }
    v->next = byval_reg_w.head;
    byval_reg_w.head = v;
    v->used = ++byval_reg_w.tick;
    __atomic_store_n(&byval_reg_w.count, n, __ATOMIC_RELAXED);
    v->refs++; /* the caller's */
    if (over)  /* the watcher evicts, between its batches */
        byval_reg_watch_kick();
    byval_unlock(&byval_reg_w.lock);
    return v;
}
