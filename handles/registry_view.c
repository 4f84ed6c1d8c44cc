/* SPDX-License-Identifier: MIT */
/*
 * registry_view.c - importers' views of exporters' registries and the
 * watcher thread (see registry_view.h).
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
#include "handles/registry_view.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "handles/resolve.h"
#include "handles/resolve_internal.h"
#include "handles/transport.h"

#define REG_BYTES (sizeof(byval_reg_header_t) + BYVAL_REG_SLOTS * sizeof(byval_reg_slot_t))

struct byval_reg_view {
    struct byval_reg_view *next;
    unsigned refs; /* the list's one while listed, plus one per user */
    int gone;
    int pipe_fd;
    uint32_t pidns, pid;
    uint64_t identity;
    const byval_reg_header_t *hdr;
    const byval_reg_slot_t *slot;
};

static struct {
    pthread_mutex_t lock;
    byval_reg_view_t *head;
    unsigned count;
    int epfd;
    int started;
    byval_reg_event_fn on_event;
} w = {.lock = PTHREAD_MUTEX_INITIALIZER, .epfd = -1};

void byval_reg_on_event(byval_reg_event_fn fn)
{
    __atomic_store_n(&w.on_event, fn, __ATOMIC_RELEASE);
}

static void view_free(byval_reg_view_t *v)
{
    munmap((void *)v->hdr, REG_BYTES);
    close(v->pipe_fd); /* also takes it out of the epoll set */
    free(v);
}

void byval_reg_view_get(byval_reg_view_t *v)
{
    pthread_mutex_lock(&w.lock);
    v->refs++;
    pthread_mutex_unlock(&w.lock);
}

void byval_reg_view_put(byval_reg_view_t *v)
{
    if (!v)
        return;
    pthread_mutex_lock(&w.lock);
    int last = --v->refs == 0;
    pthread_mutex_unlock(&w.lock);
    if (last)
        view_free(v);
}

int byval_reg_view_gone(const byval_reg_view_t *v)
{
    return __atomic_load_n(&v->gone, __ATOMIC_ACQUIRE);
}

unsigned byval_reg_views(void)
{
    return __atomic_load_n(&w.count, __ATOMIC_RELAXED);
}

const uint64_t *byval_reg_find(byval_reg_view_t *v, uint64_t key, uint32_t ino,
                               uint64_t *serial_p)
{
    uint32_t high = __atomic_load_n(&v->hdr->high, __ATOMIC_ACQUIRE);
    if (high > BYVAL_REG_SLOTS)
        high = BYVAL_REG_SLOTS;
    for (uint32_t i = 0; i < high; i++) {
        const byval_reg_slot_t *s = &v->slot[i];
        /* Seqlock read: the serial, the fields, the serial again. The
         * fields' loads are acquires (not relaxed loads and a fence, which
         * TSan does not model): the second serial load stays after them. */
        uint64_t ser = __atomic_load_n(&s->serial, __ATOMIC_ACQUIRE);
        if (!ser || __atomic_load_n(&s->key, __ATOMIC_ACQUIRE) != key ||
            (ino && __atomic_load_n(&s->ino, __ATOMIC_ACQUIRE) != ino))
            continue;
        if (__atomic_load_n(&s->serial, __ATOMIC_RELAXED) != ser)
            continue;
        *serial_p = ser;
        return &s->serial;
    }
    return NULL;
}

const uint64_t *byval_reg_find_serial(byval_reg_view_t *v, uint32_t serial32,
                                      byval_reg_slot_t *slot_p)
{
    uint32_t high = __atomic_load_n(&v->hdr->high, __ATOMIC_ACQUIRE);
    if (high > BYVAL_REG_SLOTS)
        high = BYVAL_REG_SLOTS;
    for (uint32_t i = 0; i < high; i++) {
        const byval_reg_slot_t *s = &v->slot[i];
        uint64_t ser = __atomic_load_n(&s->serial, __ATOMIC_ACQUIRE);
        if (!ser || (uint32_t)ser != serial32)
            continue;
        byval_reg_slot_t c;
        c.key = __atomic_load_n(&s->key, __ATOMIC_ACQUIRE); /* as in byval_reg_find */
        c.ino = __atomic_load_n(&s->ino, __ATOMIC_ACQUIRE);
        c.fd = __atomic_load_n(&s->fd, __ATOMIC_ACQUIRE);
        c.size = __atomic_load_n(&s->size, __ATOMIC_ACQUIRE);
        if (__atomic_load_n(&s->serial, __ATOMIC_RELAXED) != ser)
            continue; /* rewritten meanwhile: not the export named */
        c.serial = ser;
        *slot_p = c;
        return &s->serial;
    }
    return NULL;
}

byval_reg_view_t *byval_reg_lookup_id32(uint32_t pidns, uint32_t pid, uint32_t id32,
                                        uint64_t *identity_p)
{
    byval_reg_view_t *found = NULL;
    pthread_mutex_lock(&w.lock);
    for (byval_reg_view_t *v = w.head; v && !found; v = v->next)
        if (!byval_reg_view_gone(v) && v->pid == pid && v->pidns == pidns && (uint32_t)v->identity == id32) {
            v->refs++;
            *identity_p = v->identity;
            found = v;
        }
    pthread_mutex_unlock(&w.lock);
    return found;
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
                pthread_mutex_lock(&w.lock);
                for (byval_reg_view_t **pp = &w.head; *pp; pp = &(*pp)->next)
                    if (*pp == v) {
                        *pp = v->next;
                        w.count--;
                        epoll_ctl(w.epfd, EPOLL_CTL_DEL, v->pipe_fd, NULL);
                        break;
                    }
                pthread_mutex_unlock(&w.lock);
                byval_reg_view_put(v);
            }
        }
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
        munmap((void *)v->hdr, REG_BYTES);
        close(v->pipe_fd);
        free(v);
    }
    w.head = NULL;
    w.count = 0;
    if (w.epfd >= 0)
        close(w.epfd);
    w.epfd = -1;
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
    /* Signals stay with the application's threads. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&a, 64 * 1024);
    pthread_t t;
    int rc = pthread_create(&t, &a, watch_main, NULL);
    pthread_attr_destroy(&a);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        byval_msg(msg, msglen, "cannot start the release watcher: %s", strerror(rc));
        return -1;
    }
    pthread_setname_np(t, "ipcbyval-watch");
    w.started = 1;
    return 0;
}

/* ---- attach ------------------------------------------------------------- */

/* The exporter's pid in our pid namespace, from its pidfd's fdinfo. */
static int pidfd_local_pid(int pidfd)
{
    char path[64], line[128];
    snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", pidfd);
    FILE *f = fopen(path, "re");
    int pid = -1;
    if (!f)
        return -1;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "Pid:\t%d", &pid) == 1)
            break;
    fclose(f);
    return pid;
}

/* Its registry's fd number and inode: the fd whose link names our memfd
 * (readlink opens nothing; the stat that follows is of a memfd). */
static int find_registry_fd(int pid, uint32_t *fd_p, uint32_t *ino_p)
{
    char dir[64], link[128];
    static const char want[] = "/memfd:" BYVAL_REG_NAME " (deleted)";
    snprintf(dir, sizeof(dir), "/proc/%d/fd", pid);
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int rc = -1;
    for (struct dirent *e; rc != 0 && (e = readdir(d)) != NULL;) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        ssize_t n = readlinkat(dirfd(d), e->d_name, link, sizeof(link) - 1);
        if (n != (ssize_t)sizeof(want) - 1 || memcmp(link, want, (size_t)n) != 0)
            continue;
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, 0) != 0 || !S_ISREG(st.st_mode) || st.st_size < (off_t)REG_BYTES)
            continue;
        *fd_p = (uint32_t)atoi(e->d_name);
        *ino_p = (uint32_t)st.st_ino;
        rc = 0;
    }
    closedir(d);
    return rc;
}

/* Map the registry behind mfd (closed here) and check that it describes
 * the exporter (pid, identity): a view with the list's reference, or
 * NULL. The pipe is fetched with fetch(arg, fd, ino, &fd). */
typedef byval_status_t (*fetch_fn)(void *arg, uint32_t fd, uint32_t ino, int *fd_p, char *msg,
                                   size_t msglen);

static byval_reg_view_t *view_map(int mfd, uint32_t pidns, uint32_t pid, const uint64_t *identity,
                                  fetch_fn fetch, void *arg, char *msg, size_t msglen)
{
    void *m = mmap(NULL, REG_BYTES, PROT_READ, MAP_SHARED, mfd, 0);
    close(mfd);
    if (m == MAP_FAILED) {
        byval_msg(msg, msglen, "mmap of pid %u's registry failed: %s", pid, strerror(errno));
        return NULL;
    }
    const byval_reg_header_t *h = m;
    int pfd = -1;
    if (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != BYVAL_REG_MAGIC ||
        h->version != BYVAL_REG_VERSION || h->nslots != BYVAL_REG_SLOTS || h->pid != pid ||
        (identity && h->identity != *identity)) {
        byval_msg(msg, msglen, "pid %u's registry does not describe it", pid);
        goto fail;
    }
    if (fetch(arg, h->pipe_fd, h->pipe_ino, &pfd, msg, msglen) != BYVAL_OK)
        goto fail;
    byval_reg_view_t *v = calloc(1, sizeof(*v));
    if (!v) {
        close(pfd);
        goto fail;
    }
    /* The exporter made the pipe O_NONBLOCK: so is our duplicate (one
     * open file), and the watcher never blocks draining it. */
    v->pipe_fd = pfd;
    v->pidns = pidns;
    v->pid = pid;
    v->identity = h->identity;
    v->hdr = h;
    v->slot = (const byval_reg_slot_t *)(h + 1);
    v->refs = 1; /* the list's */
    return v;
fail:
    munmap(m, REG_BYTES);
    return NULL;
}

/* Listed view of (pidns, pid, identity) not gone, referenced, or NULL. */
static byval_reg_view_t *lookup(uint32_t pidns, uint32_t pid, uint64_t identity)
{
    byval_reg_view_t *found = NULL;
    pthread_mutex_lock(&w.lock);
    for (byval_reg_view_t *v = w.head; v && !found; v = v->next)
        if (!byval_reg_view_gone(v) && v->pid == pid && v->pidns == pidns && v->identity == identity) {
            v->refs++;
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

/* List v and watch it (or use a twin another thread listed meanwhile). */
static byval_reg_view_t *publish(byval_reg_view_t *v, char *msg, size_t msglen)
{
    pthread_once(&atfork_once, atfork_register);
    pthread_mutex_lock(&w.lock);
    for (byval_reg_view_t *o = w.head; o; o = o->next)
        if (!byval_reg_view_gone(o) && o->pid == v->pid && o->pidns == v->pidns && o->identity == v->identity) {
            o->refs++;
            pthread_mutex_unlock(&w.lock);
            view_free(v);
            return o;
        }
    struct epoll_event ev = {.events = EPOLLIN | EPOLLET | EPOLLRDHUP, .data.ptr = v};
    if (watch_start_locked(msg, msglen) != 0 ||
        epoll_ctl(w.epfd, EPOLL_CTL_ADD, v->pipe_fd, &ev) != 0) {
        if (msg && !msg[0])
            byval_msg(msg, msglen, "epoll_ctl failed: %s", strerror(errno));
        pthread_mutex_unlock(&w.lock);
        view_free(v);
        return NULL;
    }
    v->next = w.head;
    w.head = v;
    w.count++;
    v->refs++; /* the caller's */
    pthread_mutex_unlock(&w.lock);
    return v;
}

typedef struct rec_fetch {
    const byval_record_t *rec;
    int mode, pidfd;
} rec_fetch_t;

static byval_status_t fetch_rec(void *arg, uint32_t fd, uint32_t ino, int *fd_p, char *msg,
                                size_t msglen)
{
    rec_fetch_t *f = arg;
    return byval_transport_fetch_more_fd(f->rec, f->mode, f->pidfd, fd, ino, 0, fd_p, msg,
                                         msglen);
}

typedef struct pid_fetch {
    int pidfd;
    uint32_t pid;
} pid_fetch_t;

static byval_status_t fetch_pid(void *arg, uint32_t fd, uint32_t ino, int *fd_p, char *msg,
                                size_t msglen)
{
    pid_fetch_t *f = arg;
    return byval_getfd_more(f->pidfd, f->pid, fd, ino, 0, fd_p, msg, msglen);
}

byval_reg_view_t *byval_reg_attach(const byval_record_t *rec, int mode, int pidfd, char *msg,
                                   size_t msglen)
{
    byval_reg_view_t *v = lookup(rec->pidns, rec->pid, rec->identity);
    if (v)
        return v;
    /* Unlocked from here: fetching fds may wait on the exporter's socket. */
    uint32_t rfd, rino;
    int pid = pidfd >= 0 ? pidfd_local_pid(pidfd) : -1;
    if (pid <= 0 || find_registry_fd(pid, &rfd, &rino) != 0) {
        byval_msg(msg, msglen, "pid %u publishes no registry that this process can see", rec->pid);
        return NULL;
    }
    rec_fetch_t f = {rec, mode, pidfd};
    int mfd = -1;
    if (fetch_rec(&f, rfd, rino, &mfd, msg, msglen) != BYVAL_OK)
        return NULL;
    v = view_map(mfd, rec->pidns, rec->pid, &rec->identity, fetch_rec, &f, msg, msglen);
    return v ? publish(v, msg, msglen) : NULL;
}

byval_reg_view_t *byval_reg_attach_pid(uint32_t pid, char *msg, size_t msglen)
{
    byval_self_t self;
    uint32_t rfd, rino;
    if (!pid || byval_self_get(&self) != 0)
        return NULL;
    int pidfd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
    if (pidfd < 0) {
        byval_msg(msg, msglen, "pidfd_open(%u) failed: %s", pid, strerror(errno));
        return NULL;
    }
    byval_reg_view_t *v = NULL;
    /* The registry must describe the process behind our pidfd: its
     * identity, checked against the pidfd (not the pid, which a new
     * process may hold by now). */
    byval_record_t rec;
    memset(&rec, 0, sizeof(rec));
    rec.pid = pid;
    rec.pidns = self.pidns;
    rec.boot = self.boot;
    rec.flags = byval_pidfd_is_pidfs(pidfd) ? BYVAL_FLAG_ID_PIDFS : 0;
    int mfd = -1;
    pid_fetch_t f = {pidfd, pid};
    if (find_registry_fd((int)pid, &rfd, &rino) != 0) {
        byval_msg(msg, msglen, "pid %u publishes no registry", pid);
    } else if (fetch_pid(&f, rfd, rino, &mfd, msg, msglen) == BYVAL_OK &&
               (v = view_map(mfd, self.pidns, pid, NULL, fetch_pid, &f, msg, msglen)) != NULL) {
        rec.identity = v->identity;
        if (byval_check_identity(&rec, pidfd, msg, msglen) != BYVAL_OK) {
            view_free(v);
            v = NULL;
        } else {
            byval_reg_view_t *o = lookup(self.pidns, pid, v->identity);
            if (o) {
                view_free(v);
                v = o;
            } else {
                v = publish(v, msg, msglen);
            }
        }
    }
    close(pidfd);
    return v;
}
