/* SPDX-License-Identifier: MIT */
/*
 * registry_watch.c - the importer's list of registry views and the one
 * thread that watches them (registry_view.h): an importer holding a
 * closed mapping and making no further call must still give the
 * exporter's freed memory back at once. It sleeps in epoll_wait on the
 * views' pipes (edge-triggered: every write of the exporter wakes every
 * importer; a hang-up: the exporter's image is gone), checks once a second
 * that each exporter it sees in /proc still holds its registry (exec
 * closes it; a peer holding the pipe may keep it open), and reports; what
 * to release is the cache's business.
 *
 * The pipe is a doorbell, never read: a byte one importer took would be a
 * wake-up another misses (epoll drops an event whose pipe is no longer
 * readable). The exporter empties a full pipe and writes again, and what
 * was freed is told by the header's seq.
 *
 * Bounds, whatever writes the pipe: after a report, a view's wake-ups
 * within BYVAL_REG_RESCAN_NS disarm it (a hang-up is still reported) and
 * one report follows at the end of the interval; wake-ups without a new
 * seq pass once, then disarm it likewise. At most BYVAL_REG_VIEWS_MAX
 * views are listed: one more evicts the least recently used, whose
 * mapping is replaced by zero pages (every export reads as freed, so
 * nothing of it stays cached).
 */
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <time.h>

#include "cache/locks.h"
#include "handles/bgthread.h"
#include "handles/registry_internal.h"
#include "handles/sys.h"

/* Reports of one exporter's frees at most once per this (a burst, or a
 * peer writing its pipe in a loop, coalesces into one rescan). */
#define BYVAL_REG_RESCAN_NS 5000000u

/* How often the watcher asks whether each exporter it can see in /proc
 * still holds its registry (registry_watch.c: the pipe's hang-up alone
 * depends on who else holds the pipe). */
#define BYVAL_REG_LIVE_NS 1000000000u

/* What a view's pipe is watched for (edge-triggered: every write). */
#define VIEW_EVENTS (EPOLLIN | EPOLLET | EPOLLRDHUP)

typedef struct pidfd_watch {
    int kind, fd; /* kind: WATCH_PIDFD */
    void (*fn)(void *arg);
    void *arg;
    struct pidfd_watch *next; /* w.pidfds, under w.lock */
} pidfd_watch_t;

/* The list of views and the watcher's state. kick_fd: our eventfd (views
 * to evict); started: the thread (atomic: read unlocked by
 * byval_reg_watch_need); on_demand: byval_reg_watch_on_demand. */
static struct {
    byval_lock_t lock;
    byval_reg_view_t *head;
    pidfd_watch_t *pidfds;
    unsigned count;
    uint64_t tick; /* LRU clock */
    int epfd, kick_fd, kick_kind, started, on_demand;
    uint32_t live_round; /* the watcher's liveness passes (the watcher's alone) */
    byval_reg_event_fn on_event;
} w = {.lock = BYVAL_LOCK_INIT(REGISTRY_WATCH), .epfd = -1, .kick_fd = -1, .kick_kind = WATCH_KICK};
BYVAL_LOCK_STATIC(registry_watch, &w.lock);

void byval_reg_on_event(byval_reg_event_fn fn)
{
    __atomic_store_n(&w.on_event, fn, __ATOMIC_RELEASE);
}

void byval_reg_view_free(byval_reg_view_t *v)
{
    munmap((void *)v->hdr, BYVAL_REG_BYTES);
    byval_close_fd(&v->pipe_fd); /* out of the epoll set already (unlist) */
    free(v);
}

void byval_reg_view_put(byval_reg_view_t *v)
{
    if (!v)
        return;
    byval_lock(&w.lock);
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

static void fork_child(void)
{
    /* The epoll instance is shared with the parent: only our copies of
     * the fds go, its interest list stays the parent's. */
    for (byval_reg_view_t *v = w.head, *nx; v; v = nx) {
        nx = v->next;
        byval_reg_view_free(v);
    }
    w.head = NULL;
    w.count = 0;
    for (pidfd_watch_t *pw = w.pidfds, *nx; pw; pw = nx) {
        nx = pw->next;
        close(pw->fd);
        free(pw);
    }
    w.pidfds = NULL;
    byval_close_fd(&w.epfd);
    byval_close_fd(&w.kick_fd);
    __atomic_store_n(&w.started, 0, __ATOMIC_RELAXED);
}
BYVAL_FORK_CHILD(registry_watch, fork_child);

/* (locked) v may serve a lookup: its exporter's image is not known to be
 * gone. Without a watcher yet (on demand) the pipe is asked (one poll):
 * a hang-up marks v gone and *wake_p asks for the watcher to report it. */
static int view_usable(byval_reg_view_t *v, int *wake_p)
{
    if (byval_reg_view_gone(v))
        return 0;
    if (__atomic_load_n(&w.started, __ATOMIC_RELAXED) || v->pipe_fd < 0)
        return 1;
    struct pollfd p = {.fd = v->pipe_fd, .events = 0};
    if (poll(&p, 1, 0) != 1 || !(p.revents & (POLLHUP | POLLERR)))
        return 1;
    __atomic_store_n(&v->gone, 1, __ATOMIC_RELEASE);
    *wake_p = 1;
    return 0;
}

byval_reg_view_t *byval_reg_lookup(uint32_t pidns, uint32_t pid, uint64_t identity, uint64_t mask)
{
    byval_reg_view_t *found = NULL;
    int wake = 0;
    byval_lock(&w.lock);
    for (byval_reg_view_t *v = w.head; v && !found; v = v->next)
        if (v->pid == pid && v->pidns == pidns && (v->identity & mask) == (identity & mask) &&
            view_usable(v, &wake)) {
            v->refs++;
            v->used = ++w.tick;
            found = v;
        }
    byval_unlock(&w.lock);
    if (wake) /* the watcher reports it (-1: the view stays gone, unreported) */
        (void)byval_reg_watch_need(NULL, 0);
    return found;
}

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

/* Unlist v (no new attach finds it) and drop the list's reference. */
static void unlist(byval_reg_view_t *v)
{
    int listed = 0;
    byval_lock(&w.lock);
    for (byval_reg_view_t **pp = &w.head; *pp; pp = &(*pp)->next)
        if (*pp == v) {
            *pp = v->next;
            __atomic_store_n(&w.count, w.count - 1, __ATOMIC_RELAXED);
            listed = 1;
            break;
        }
    if (listed && v->pipe_fd >= 0)
        epoll_ctl(w.epfd, EPOLL_CTL_DEL, v->pipe_fd, NULL);
    if (listed)
        byval_close_fd(&v->pipe_fd);
    byval_unlock(&w.lock);
    if (listed)
        byval_reg_view_put(v);
}

/* v's exporter image is gone (exit or exec): report and unlist it. */
static void image_gone(byval_reg_view_t *v)
{
    __atomic_store_n(&v->gone, 1, __ATOMIC_RELEASE);
    report(v, 1);
    unlist(v);
}

/* Disarm v until `due` (hang-ups are still reported). */
static void hold(byval_reg_view_t *v, uint64_t due)
{
    v->held = 1;
    v->due_ns = due;
    arm(v, EPOLLET | EPOLLRDHUP);
}

/* Report v with the seq read before its scan (a later free wakes us again). */
static void rescan(byval_reg_view_t *v, uint64_t seq, uint64_t now)
{
    v->seen = seq;
    v->last_ns = now;
    v->idle = 0;
    report(v, 0);
}

/* The seq of v's exporter now (its value is hostile: only compared). */
#define VIEW_SEQ(v) __atomic_load_n(&(v)->hdr->seq, __ATOMIC_ACQUIRE)

/* A wake-up of v: report now, or at the end of its interval (the top).
 * Nothing freed since our last scan: once, the bytes left in the pipe
 * (re-armed views report them); again, a writer that frees nothing, held
 * off like a burst. */
static void on_view(byval_reg_view_t *v, uint32_t events, uint64_t now)
{
    uint64_t seq = VIEW_SEQ(v);
    if (events & (EPOLLHUP | EPOLLERR))
        image_gone(v);
    else if (v->held)
        return;
    else if (seq == v->seen && v->idle++)
        hold(v, now + BYVAL_REG_RESCAN_NS);
    else if (seq != v->seen && now - v->last_ns < BYVAL_REG_RESCAN_NS)
        hold(v, v->last_ns + BYVAL_REG_RESCAN_NS);
    else if (seq != v->seen)
        rescan(v, seq, now);
}

/* Held views whose interval ended: report what was freed meanwhile and
 * re-arm. The time until the next one is due, in ms (-1: none). */
static int due_views(uint64_t now)
{
    int timeout = -1;
    for (;;) {
        byval_reg_view_t *v = NULL;
        byval_lock(&w.lock);
        for (byval_reg_view_t *x = w.head; x && !v; x = x->next) {
            if (!x->held)
                continue;
            if (x->due_ns <= now)
                (v = x)->refs++;
            else {
                int ms = (int)((x->due_ns - now) / 1000000u) + 1;
                timeout = timeout < 0 || ms < timeout ? ms : timeout;
            }
        }
        byval_unlock(&w.lock);
        if (!v)
            return timeout;
        v->held = 0;
        uint64_t seq = VIEW_SEQ(v);
        if (seq != v->seen)
            rescan(v, seq, now);
        v->idle = 0;
        if (v->pipe_fd >= 0)
            arm(v, VIEW_EVENTS);
        byval_reg_view_put(v);
    }
}

/* The liveness pass, once per BYVAL_REG_LIVE_NS: each view whose exporter
 * we see in /proc must still hold its registry (views of exporters
 * outside our pid namespace have their pidfd and pipe only). The time
 * until the next pass, in ms. */
static int live_views(uint64_t now)
{
    static uint64_t next;
    if (now < next)
        return (int)((next - now) / 1000000u) + 1;
    next = now + BYVAL_REG_LIVE_NS;
    /* With no views the pass is a lock and a compare: cheaper than a kick
     * from the next publish, whose eventfd would be one more fd of ours. */
    uint32_t round = ++w.live_round;
    for (;;) {
        byval_reg_view_t *v = NULL;
        byval_lock(&w.lock);
        for (byval_reg_view_t *x = w.head; x && !v; x = x->next)
            if (x->live_pid > 0 && x->live_round != round)
                (v = x)->refs++;
        byval_unlock(&w.lock);
        if (!v)
            break;
        v->live_round = round;
        /* Dropped: the number closed by exit or exec, or another file
         * there (else no answer). */
        char path[64];
        struct stat st;
        snprintf(path, sizeof(path), "/proc/%d/fd/%u", v->live_pid, v->live_fd);
        if (!byval_reg_view_gone(v) &&
            (stat(path, &st) != 0
                 ? errno == ENOENT
                 : (uint64_t)st.st_dev != v->page_dev || (uint64_t)st.st_ino != v->page_ino))
            image_gone(v);
        byval_reg_view_put(v);
    }
    return (int)(BYVAL_REG_LIVE_NS / 1000000u);
}

/* Evict down to BYVAL_REG_VIEWS_MAX listed views (see the top). */
static void evict_views(void)
{
    for (;;) {
        byval_reg_view_t *victim = NULL;
        byval_lock(&w.lock);
        /* One no import tracks first, the least recently used of a kind;
         * never the one used last (just published: the open that made it
         * has yet to track it). */
        if (w.count > BYVAL_REG_VIEWS_MAX)
            for (byval_reg_view_t *x = w.head; x; x = x->next)
                if (x->used != w.tick &&
                    (!victim || (x->refs == 1) > (victim->refs == 1) ||
                     ((x->refs == 1) == (victim->refs == 1) && x->used < victim->used)))
                    victim = x;
        if (victim)
            victim->refs++;
        byval_unlock(&w.lock);
        if (!victim)
            return;
        unlist(victim);
        /* Zero pages where the registry was: every serial reads 0 (freed)
         * to the hit path, atomically for a concurrent reader (the range
         * stays mapped throughout). A raw call: a sanitizer's mmap
         * counts as a write of the range, which is exactly the race this
         * replacement is made to win. */
        (void)byval_sys6(SYS_mmap, (long)victim->hdr, BYVAL_REG_BYTES, PROT_READ,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
        report(victim, 0);
        byval_reg_view_put(victim);
    }
}

static void *watch_main(void *arg)
{
    (void)arg;
    /* Named here, off the first open's path. */
    pthread_setname_np(pthread_self(), "ipcbyval-watch");
    struct epoll_event ev[16];
    int timeout = (int)(BYVAL_REG_LIVE_NS / 1000000u); /* the first liveness pass */
    for (;;) {
        int n = epoll_wait(w.epfd, ev, 16, timeout);
        if (n < 0 && errno != EINTR)
            return NULL;
        uint64_t now = mono_ns();
        for (int i = 0; i < n; i++) {
            int kind = *(int *)ev[i].data.ptr;
            pidfd_watch_t *pw = ev[i].data.ptr;
            uint64_t k;
            /* The kick: ours alone; set before its first event (atomic:
             * TSan does not see epoll order them). */
            if (kind == WATCH_KICK)
                (void)!read(__atomic_load_n(&w.kick_fd, __ATOMIC_ACQUIRE), &k, sizeof(k));
            if (kind == WATCH_VIEW)
                on_view(ev[i].data.ptr, ev[i].events, now);
            if (kind != WATCH_PIDFD)
                continue;
            byval_lock(&w.lock);
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
        }
        /* Between batches only: a batch's events may name a view. */
        evict_views();
        now = mono_ns();
        int due = due_views(now), live = live_views(now); /* live: >= 0 */
        timeout = due >= 0 && due < live ? due : live;
    }
}

static int byval_reg_watch_setup(char *msg, size_t msglen)
{
    if (w.epfd < 0)
        w.epfd = epoll_create1(EPOLL_CLOEXEC);
    if (w.epfd < 0)
        return byval_fail(-1, msg, msglen, "epoll_create1 failed: %s", strerror(errno));
    return 0;
}

static int byval_reg_watch_start(char *msg, size_t msglen)
{
    if (__atomic_load_n(&w.started, __ATOMIC_RELAXED))
        return 0;
    if (byval_reg_watch_setup(msg, msglen) != 0)
        return -1;
    /* Not waited for: the thread's first epoll_wait reports whatever was
     * written meanwhile to pipes added before it (edge-triggered). */
    int rc = byval_bgthread_start(watch_main, NULL, NULL);
    if (rc != 0)
        return byval_fail(-1, msg, msglen, "cannot start the release watcher: %s", strerror(rc));
    __atomic_store_n(&w.started, 1, __ATOMIC_RELEASE);
    return 0;
}

void byval_reg_watch_on_demand(int on)
{
    byval_lock(&w.lock);
    w.on_demand = on;
    byval_unlock(&w.lock);
}

int byval_reg_watch_need(char *msg, size_t msglen)
{
    if (__atomic_load_n(&w.started, __ATOMIC_ACQUIRE))
        return 0;
    byval_lock(&w.lock);
    int was = __atomic_load_n(&w.started, __ATOMIC_RELAXED);
    int rc = byval_reg_watch_start(msg, msglen);
    byval_unlock(&w.lock);
    return rc != 0 ? -1 : !was;
}

int byval_reg_watch_exit(int pidfd, void (*fn)(void *arg), void *arg)
{
    pidfd_watch_t *pw = malloc(sizeof(*pw));
    if (!pw)
        return -1;
    *pw = (pidfd_watch_t){WATCH_PIDFD, fcntl(pidfd, F_DUPFD_CLOEXEC, 0), fn, arg, NULL};
    struct epoll_event ev = {.events = EPOLLIN | EPOLLONESHOT, .data.ptr = pw};
    byval_lock(&w.lock);
    int rc = pw->fd >= 0 && byval_reg_watch_start(NULL, 0) == 0
        ? epoll_ctl(w.epfd, EPOLL_CTL_ADD, pw->fd, &ev)
        : -1;
    if (rc == 0) {
        pw->next = w.pidfds;
        w.pidfds = pw;
    }
    byval_unlock(&w.lock);
    if (rc != 0) {
        byval_close_fd(&pw->fd);
        free(pw);
    }
    return rc;
}

/* List v and watch it (or use a twin another thread listed meanwhile). */
byval_reg_view_t *byval_reg_publish(byval_reg_view_t *v, char *msg, size_t msglen)
{
    byval_lock(&w.lock);
    for (byval_reg_view_t *o = w.head; o; o = o->next)
        if (!byval_reg_view_gone(o) && o->pid == v->pid && o->pidns == v->pidns &&
            o->identity == v->identity) {
            o->refs++;
            o->used = ++w.tick;
            byval_unlock(&w.lock);
            byval_reg_view_free(v);
            return o;
        }
    struct epoll_event ev = {.events = VIEW_EVENTS, .data.ptr = v};
    unsigned n = w.count + 1; /* read lock-free by byval_reg_views */
    int over = n > BYVAL_REG_VIEWS_MAX;
    /* The thread now, unless on demand; one too many views needs it (it evicts). */
    if ((w.on_demand && !over ? byval_reg_watch_setup(msg, msglen)
                              : byval_reg_watch_start(msg, msglen)) != 0 ||
        epoll_ctl(w.epfd, EPOLL_CTL_ADD, v->pipe_fd, &ev) != 0) {
        if (msg && !msg[0])
            byval_msg(msg, msglen, "epoll_ctl failed: %s", strerror(errno));
        byval_unlock(&w.lock);
        byval_reg_view_free(v);
        return NULL;
    }
    v->next = w.head;
    w.head = v;
    v->used = ++w.tick;
    __atomic_store_n(&w.count, n, __ATOMIC_RELAXED);
    v->refs++; /* the caller's */
    /* The watcher evicts, between its batches. Woken through an eventfd
     * made at the first need: most importers never meet 32 exporters, and
     * an fd of ours is one fewer for the application. Without it the
     * bound waits for the watcher's next wake-up. */
    if (over && w.kick_fd < 0) {
        struct epoll_event kev = {.events = EPOLLIN, .data.ptr = &w.kick_kind};
        int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (fd >= 0 && epoll_ctl(w.epfd, EPOLL_CTL_ADD, fd, &kev) != 0)
            byval_close_fd(&fd);
        __atomic_store_n(&w.kick_fd, fd, __ATOMIC_RELEASE);
    }
    if (over && w.kick_fd >= 0)
        (void)!write(w.kick_fd, &(uint64_t){1}, sizeof(uint64_t));
    byval_unlock(&w.lock);
    return v;
}
