/* SPDX-License-Identifier: MIT */
/*
 * registry_watch.c - the importer's list of registry views and the one
 * thread that watches them (see registry_view.h).
 *
 * Why a thread: an importer that holds a closed mapping and makes no
 * further call (it computes while the producer re-allocates) must still
 * give the exporter's freed memory back at once, as natively. One thread
 * per importing process, started with the first view, sleeps in
 * epoll_wait on the views' pipes (edge-triggered: the exporter's every
 * write wakes every importer; a hang-up means the exporter's image is
 * gone) and costs nothing while nothing is freed. It only reports; what
 * to release is the cache's business (byval_reg_event_fn).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cache/locks.h"
#include "handles/bgthread.h"
#include "handles/registry_internal.h"
#include "handles/resolve_internal.h"

static struct {
    byval_lock_t lock;
    byval_reg_view_t *head;
    pidfd_watch_t *pidfds;
    unsigned count;
    int epfd;
    int started;
    byval_reg_event_fn on_event;
} w = {.lock = BYVAL_LOCK_INIT(REGISTRY_WATCH), .epfd = -1};
BYVAL_LOCK_STATIC(registry_watch, &w.lock);

void byval_reg_on_event(byval_reg_event_fn fn)
{
    __atomic_store_n(&w.on_event, fn, __ATOMIC_RELEASE);
}

void byval_reg_view_free(byval_reg_view_t *v)
{
    munmap((void *)v->hdr, REG_BYTES);
    close(v->pipe_fd); /* also takes it out of the epoll set */
    free(v);
}

static void w_lock(void);

void byval_reg_view_get(byval_reg_view_t *v)
{
    w_lock();
    v->refs++;
    byval_unlock(&w.lock);
}

void byval_reg_view_put(byval_reg_view_t *v)
{
    if (!v)
        return;
    w_lock();
    int last = --v->refs == 0;
    byval_unlock(&w.lock);
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
    return __atomic_load_n(&w.count, __ATOMIC_RELAXED);
}

/* ---- the watcher -------------------------------------------------------- */

static void *watch_main(void *arg)
{
    (void)arg;
    struct epoll_event ev[16];
    for (;;) {
        int n = epoll_wait(w.epfd, ev, 16, -1);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return NULL;
        }
        for (int i = 0; i < n; i++) {
            if (*(int *)ev[i].data.ptr == WATCH_PIDFD) {
                pidfd_watch_t *pw = ev[i].data.ptr;
                w_lock();
                for (pidfd_watch_t **pp = &w.pidfds; *pp; pp = &(*pp)->next)
                    if (*pp == pw) {
                        *pp = pw->next;
                        break;
                    }
                epoll_ctl(w.epfd, EPOLL_CTL_DEL, pw->fd, NULL);
                byval_unlock(&w.lock);
                close(pw->fd);
                pw->fn(pw->arg);
                free(pw);
                continue;
            }
            byval_reg_view_t *v = ev[i].data.ptr;
            char sink[256];
            while (read(v->pipe_fd, sink, sizeof(sink)) > 0) /* others may drain it too */
                ;
            int gone = (ev[i].events & (EPOLLHUP | EPOLLERR)) != 0;
            if (gone)
                __atomic_store_n(&v->gone, 1, __ATOMIC_RELEASE);
            byval_reg_event_fn fn = __atomic_load_n(&w.on_event, __ATOMIC_ACQUIRE);
            if (fn)
                fn(v, gone);
            if (gone) { /* unlist: no new attach finds it, the list's reference goes */
                w_lock();
                for (byval_reg_view_t **pp = &w.head; *pp; pp = &(*pp)->next)
                    if (*pp == v) {
                        *pp = v->next;
                        w.count--;
                        epoll_ctl(w.epfd, EPOLL_CTL_DEL, v->pipe_fd, NULL);
                        break;
                    }
                byval_unlock(&w.lock);
                byval_reg_view_put(v);
            }
        }
    }
}

static void fork_child(void)
{
    /* The child has no watcher and imports nothing yet (its caches empty
     * themselves at fork). The epoll instance is shared with the parent:
     * touching its interest list would change the parent's, so only our
     * copies of the fds go. The list's memory is the child's own. */
    for (byval_reg_view_t *v = w.head, *nx; v; v = nx) {
        nx = v->next;
        munmap((void *)v->hdr, REG_BYTES);
        close(v->pipe_fd);
        free(v);
    }
    w.head = NULL;
    w.count = 0;
    for (pidfd_watch_t *pw = w.pidfds, *nx; pw; pw = nx) {
        nx = pw->next;
        close(pw->fd);
        free(pw);
    }
    w.pidfds = NULL;
    if (w.epfd >= 0)
        close(w.epfd);
    w.epfd = -1;
    w.started = 0;
}
BYVAL_FORK_CHILD(registry_watch, fork_child);

/* (locked) the epoll set and the thread, once per process. */
static int watch_start_locked(char *msg, size_t msglen)
{
    if (w.started)
        return 0;
    if (w.epfd < 0)
        w.epfd = epoll_create1(EPOLL_CLOEXEC);
    if (w.epfd < 0) {
        byval_msg(msg, msglen, "epoll_create1 failed: %s", strerror(errno));
        return -1;
    }
    pthread_t t;
    int rc = byval_bgthread_start(watch_main, NULL, &t);
    if (rc != 0) {
        byval_msg(msg, msglen, "cannot start the release watcher: %s", strerror(rc));
        return -1;
    }
    pthread_setname_np(t, "ipcbyval-watch");
    w.started = 1;
    return 0;
}

byval_reg_view_t *byval_reg_lookup(uint32_t pidns, uint32_t pid, uint64_t identity)
{
    byval_reg_view_t *found = NULL;
    w_lock();
    for (byval_reg_view_t *v = w.head; v && !found; v = v->next)
        if (!byval_reg_view_gone(v) && v->pid == pid && v->pidns == pidns && v->identity == identity) {
            v->refs++;
            found = v;
        }
    byval_unlock(&w.lock);
    return found;
}

byval_reg_view_t *byval_reg_lookup_id32(uint32_t pidns, uint32_t pid, uint32_t id32,
                                        uint64_t *identity_p)
{
    byval_reg_view_t *found = NULL;
    w_lock();
    for (byval_reg_view_t *v = w.head; v && !found; v = v->next)
        if (!byval_reg_view_gone(v) && v->pid == pid && v->pidns == pidns && (uint32_t)v->identity == id32) {
            v->refs++;
            *identity_p = v->identity;
            found = v;
        }
    byval_unlock(&w.lock);
    return found;
}

static void w_lock(void)
{
    byval_lock(&w.lock);
}

/* List v and watch it (or use a twin another thread listed meanwhile). */
byval_reg_view_t *byval_reg_publish(byval_reg_view_t *v, char *msg, size_t msglen)
{
    w_lock();
    for (byval_reg_view_t *o = w.head; o; o = o->next)
        if (!byval_reg_view_gone(o) && o->pid == v->pid && o->pidns == v->pidns &&
            o->identity == v->identity) {
            o->refs++;
            byval_unlock(&w.lock);
            byval_reg_view_free(v);
            return o;
        }
    struct epoll_event ev = {.events = EPOLLIN | EPOLLET | EPOLLRDHUP, .data.ptr = v};
    if (watch_start_locked(msg, msglen) != 0 ||
        epoll_ctl(w.epfd, EPOLL_CTL_ADD, v->pipe_fd, &ev) != 0) {
        if (msg && !msg[0])
            byval_msg(msg, msglen, "epoll_ctl failed: %s", strerror(errno));
        byval_unlock(&w.lock);
        byval_reg_view_free(v);
        return NULL;
    }
    v->next = w.head;
    w.head = v;
    w.count++;
    v->refs++; /* the caller's */
    byval_unlock(&w.lock);
    return v;
}

int byval_reg_watch_exit(int pidfd, void (*fn)(void *arg), void *arg)
{
    pidfd_watch_t *pw = malloc(sizeof(*pw));
    if (!pw)
        return -1;
    *pw = (pidfd_watch_t){WATCH_PIDFD, fcntl(pidfd, F_DUPFD_CLOEXEC, 0), fn, arg, NULL};
    struct epoll_event ev = {.events = EPOLLIN | EPOLLONESHOT, .data.ptr = pw};
    w_lock();
    int rc = pw->fd >= 0 && w.started ? epoll_ctl(w.epfd, EPOLL_CTL_ADD, pw->fd, &ev) : -1;
    if (rc == 0) {
        pw->next = w.pidfds;
        w.pidfds = pw;
    }
    byval_unlock(&w.lock);
    if (rc != 0) {
        if (pw->fd >= 0)
            close(pw->fd);
        free(pw);
    }
    return rc;
}
