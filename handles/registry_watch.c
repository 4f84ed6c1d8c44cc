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
 *
 * Bounds (issue 22, defect 6): what one exporter can make us do is
 * bounded, whatever writes its pipe (any holder of the pipe can): after a
 * report, a view's further wake-ups within BYVAL_REG_RESCAN_NS disarm it
 * (EPOLL_CTL_MOD without EPOLLIN: a hang-up is still reported) and one
 * report follows at the end of the interval, so a pipe written in a loop
 * costs at most one wake-up and one rescan per interval. What the views
 * cost is bounded too: at most BYVAL_REG_VIEWS_MAX are listed (one fd
 * and a 256 KiB mapping each); publishing one more kicks this thread,
 * which evicts the least recently used (one no import tracks, where there
 * is one). An evicted view loses its pipe and its mapping is replaced by
 * zero pages: every export of it reads as freed from then on, so its
 * closed mappings are released at once (the eviction is reported as a
 * free) and its open ones at their last close. No later free of that
 * exporter can be missed, because nothing of it stays cached; the next
 * open of one of its handles attaches afresh.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "handles/bgthread.h"
#include "handles/registry_internal.h"
#include "handles/resolve_internal.h"

static struct {
    pthread_mutex_t lock;
    byval_reg_view_t *head;
    pidfd_watch_t *pidfds;
    unsigned count;
    uint64_t tick; /* LRU clock */
    int epfd;
    int kick_fd; /* our eventfd: views to evict */
    int kick_kind;
    int started;
    byval_reg_event_fn on_event;
} w = {.lock = PTHREAD_MUTEX_INITIALIZER, .epfd = -1, .kick_fd = -1, .kick_kind = WATCH_KICK};

void byval_reg_on_event(byval_reg_event_fn fn)
{
    __atomic_store_n(&w.on_event, fn, __ATOMIC_RELEASE);
}

void byval_reg_view_free(byval_reg_view_t *v)
{
    munmap((void *)v->hdr, BYVAL_REG_BYTES);
    if (v->pipe_fd >= 0)
        close(v->pipe_fd); /* also takes it out of the epoll set */
    free(v);
}

static void w_lock(void);

void byval_reg_view_get(byval_reg_view_t *v)
{
    w_lock();
    v->refs++;
    pthread_mutex_unlock(&w.lock);
}

void byval_reg_view_put(byval_reg_view_t *v)
{
    if (!v)
        return;
    w_lock();
    int last = --v->refs == 0;
    pthread_mutex_unlock(&w.lock);
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

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void report(byval_reg_view_t *v, int gone)
{
    byval_reg_event_fn fn = __atomic_load_n(&w.on_event, __ATOMIC_ACQUIRE);
    if (fn)
        fn(v, gone);
}

static void arm(byval_reg_view_t *v, uint32_t events)
{
    struct epoll_event ev = {.events = events, .data.ptr = v};
    epoll_ctl(w.epfd, EPOLL_CTL_MOD, v->pipe_fd, &ev);
}

#define VIEW_EVENTS (EPOLLIN | EPOLLET | EPOLLRDHUP)

/* Unlist v (no new attach finds it) and drop the list's reference. */
static void unlist(byval_reg_view_t *v)
{
    int listed = 0;
    w_lock();
    for (byval_reg_view_t **pp = &w.head; *pp; pp = &(*pp)->next)
        if (*pp == v) {
            *pp = v->next;
            w.count--;
            listed = 1;
            break;
        }
    if (listed && v->pipe_fd >= 0) {
        epoll_ctl(w.epfd, EPOLL_CTL_DEL, v->pipe_fd, NULL);
        close(v->pipe_fd);
        v->pipe_fd = -1;
    }
    pthread_mutex_unlock(&w.lock);
    if (listed)
        byval_reg_view_put(v);
}

/* A wake-up of v: drain our own file of its pipe, then report now, or
 * once at the end of its interval when it reported less than
 * BYVAL_REG_RESCAN_NS ago. */
static void on_view(byval_reg_view_t *v, uint32_t events, uint64_t now)
{
    char sink[256];
    for (int n = 0; v->drain && n < 64 && read(v->pipe_fd, sink, sizeof(sink)) > 0; n++)
        ;
    if (events & (EPOLLHUP | EPOLLERR)) {
        __atomic_store_n(&v->gone, 1, __ATOMIC_RELEASE);
        report(v, 1);
        unlist(v);
        return;
    }
    if (v->held)
        return;
    if (now - v->last_ns < BYVAL_REG_RESCAN_NS) {
        v->held = 1;
        v->due_ns = v->last_ns + BYVAL_REG_RESCAN_NS;
        arm(v, EPOLLET | EPOLLRDHUP); /* hang-ups only */
        return;
    }
    v->last_ns = now;
    report(v, 0);
}

/* Held views whose interval ended: report and re-arm (an edge-triggered
 * re-arm reports data already waiting: a pipe still written is held again
 * at once). The time until the next one is due, in ms (-1: none). */
static int due_views(uint64_t now)
{
    int timeout = -1;
    for (;;) {
        byval_reg_view_t *v = NULL;
        w_lock();
        for (byval_reg_view_t *x = w.head; x && !v; x = x->next) {
            if (!x->held)
                continue;
            if (x->due_ns <= now) {
                v = x;
                v->refs++;
            } else {
                int ms = (int)((x->due_ns - now) / 1000000u) + 1;
                timeout = timeout < 0 || ms < timeout ? ms : timeout;
            }
        }
        pthread_mutex_unlock(&w.lock);
        if (!v)
            return timeout;
        v->held = 0;
        v->last_ns = now;
        report(v, 0);
        if (v->pipe_fd >= 0)
            arm(v, VIEW_EVENTS);
        byval_reg_view_put(v);
    }
}

/* Evict down to BYVAL_REG_VIEWS_MAX listed views (see the top). */
static void evict_views(void)
{
    for (;;) {
        byval_reg_view_t *victim = NULL;
        w_lock();
        if (w.count > BYVAL_REG_VIEWS_MAX)
            for (byval_reg_view_t *x = w.head; x; x = x->next)
                if (!victim || (x->refs == 1) > (victim->refs == 1) ||
                    ((x->refs == 1) == (victim->refs == 1) && x->used < victim->used))
                    victim = x;
        if (victim)
            victim->refs++;
        pthread_mutex_unlock(&w.lock);
        if (!victim)
            return;
        unlist(victim);
        /* Zero pages where the registry was: every serial reads 0 (freed)
         * to the hit path, atomically for a concurrent reader. */
        mmap((void *)victim->hdr, BYVAL_REG_BYTES, PROT_READ,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
        report(victim, 0);
        byval_reg_view_put(victim);
    }
}

static void *watch_main(void *arg)
{
    (void)arg;
    struct epoll_event ev[16];
    int timeout = -1;
    for (;;) {
        int n = epoll_wait(w.epfd, ev, 16, timeout);
        if (n < 0 && errno != EINTR)
            return NULL;
        uint64_t now = mono_ns();
        for (int i = 0; i < n; i++) {
            int kind = *(int *)ev[i].data.ptr;
            if (kind == WATCH_KICK) {
                uint64_t k;
                (void)!read(w.kick_fd, &k, sizeof(k));
                continue;
            }
            if (kind == WATCH_VIEW) {
                on_view(ev[i].data.ptr, ev[i].events, now);
                continue;
            }
            pidfd_watch_t *pw = ev[i].data.ptr;
            w_lock();
            for (pidfd_watch_t **pp = &w.pidfds; *pp; pp = &(*pp)->next)
                if (*pp == pw) {
                    *pp = pw->next;
                    break;
                }
            epoll_ctl(w.epfd, EPOLL_CTL_DEL, pw->fd, NULL);
            pthread_mutex_unlock(&w.lock);
            close(pw->fd);
            pw->fn(pw->arg);
            free(pw);
        }
        /* Between batches only: a batch's events may name a view. */
        evict_views();
        timeout = due_views(mono_ns());
    }
}

static void atfork_prepare(void)
{
    pthread_mutex_lock(&w.lock);
}

static void atfork_parent(void)
{
    pthread_mutex_unlock(&w.lock);
}

static void atfork_child(void)
{
    /* The child has no watcher and imports nothing yet (its caches empty
     * themselves at fork). The epoll instance is shared with the parent:
     * touching its interest list would change the parent's, so only our
     * copies of the fds go. The list's memory is the child's own. */
    pthread_mutex_init(&w.lock, NULL);
    for (byval_reg_view_t *v = w.head, *nx; v; v = nx) {
        nx = v->next;
        munmap((void *)v->hdr, BYVAL_REG_BYTES);
        if (v->pipe_fd >= 0)
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
    if (w.kick_fd >= 0)
        close(w.kick_fd);
    w.epfd = w.kick_fd = -1;
    w.started = 0;
}

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
    if (w.kick_fd < 0) {
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &w.kick_kind};
        w.kick_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (w.kick_fd < 0 || epoll_ctl(w.epfd, EPOLL_CTL_ADD, w.kick_fd, &ev) != 0) {
            byval_msg(msg, msglen, "eventfd for the release watcher failed: %s", strerror(errno));
            if (w.kick_fd >= 0)
                close(w.kick_fd);
            w.kick_fd = -1;
            return -1;
        }
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
            v->used = ++w.tick;
            found = v;
        }
    pthread_mutex_unlock(&w.lock);
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
            v->used = ++w.tick;
            *identity_p = v->identity;
            found = v;
        }
    pthread_mutex_unlock(&w.lock);
    return found;
}

static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void atfork_register(void)
{
    /* Never under w.lock: fork() holds glibc's handler lock while it runs
     * the prepare handlers, and ours takes w.lock. */
    pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

/* Our lock, the fork handlers registered first: a fork between a first
 * lock and a later registration would leave the child the lock held by a
 * thread it does not have. */
static void w_lock(void)
{
    pthread_once(&atfork_once, atfork_register);
    pthread_mutex_lock(&w.lock);
}

/* List v and watch it (or use a twin another thread listed meanwhile). */
byval_reg_view_t *byval_reg_publish(byval_reg_view_t *v, char *msg, size_t msglen)
{
    w_lock();
    for (byval_reg_view_t *o = w.head; o; o = o->next)
        if (!byval_reg_view_gone(o) && o->pid == v->pid && o->pidns == v->pidns &&
            o->identity == v->identity) {
            o->refs++;
            o->used = ++w.tick;
            pthread_mutex_unlock(&w.lock);
            byval_reg_view_free(v);
            return o;
        }
    struct epoll_event ev = {.events = VIEW_EVENTS, .data.ptr = v};
    if (watch_start_locked(msg, msglen) != 0 ||
        epoll_ctl(w.epfd, EPOLL_CTL_ADD, v->pipe_fd, &ev) != 0) {
        if (msg && !msg[0])
            byval_msg(msg, msglen, "epoll_ctl failed: %s", strerror(errno));
        pthread_mutex_unlock(&w.lock);
        byval_reg_view_free(v);
        return NULL;
    }
    v->next = w.head;
    w.head = v;
    v->used = ++w.tick;
    int over = ++w.count > BYVAL_REG_VIEWS_MAX;
    v->refs++; /* the caller's */
    if (over) /* the watcher evicts, between its batches */
        (void)!write(w.kick_fd, &(uint64_t){1}, sizeof(uint64_t));
    pthread_mutex_unlock(&w.lock);
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
    pthread_mutex_unlock(&w.lock);
    if (rc != 0) {
        if (pw->fd >= 0)
            close(pw->fd);
        free(pw);
    }
    return rc;
}
