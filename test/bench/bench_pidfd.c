/* SPDX-License-Identifier: MIT */
/*
 * bench_pidfd: what a cold open adds to the driver's own import, timed
 * against fork()ed exporters holding a memfd published in their registry
 * (as the library's exporters do), each next to the raw syscalls it is
 * made of (every row closes the duplicate, as the open does once the
 * driver imported it). The library's proof of export (the registry,
 * handles/registry_view.c) is installed, as the shim installs it:
 *  - resolve_us: the first open from an exporter whose registry is
 *    mapped already, byval_resolve_fd (host check, pidfd_open, identity,
 *    proof of export, pidfd_getfd, object check; the pidfd is kept) vs
 *    pidfd_raw_us (pidfd_open + pidfd_getfd + both closes);
 *  - known_us: every later cold open from that exporter, through its kept
 *    pidfd, byval_transport_fetch_more_fd (proof, pidfd_getfd, object
 *    check) vs getfd_raw_us (pidfd_getfd + close);
 *  - attach_us: the one-time attach of an exporter's registry (find it at
 *    /proc/PID/fd/1000, fetch and check it and its pipe, map it, watch
 *    it), over ATTACHES exporters, beside attach_raw_us: the system calls
 *    it cannot do without (one statx of that link, pidfd_getfd of the
 *    page and of its pipe, mmap of the page, close);
 *  - free_notify_us: how long after an exporter frees an export an idle
 *    importer's watcher learns of it (the exporter's command pipe
 *    included), over NOTIFIES frees 10 ms apart: the 10 ms target of a
 *    free reaching importers that call nothing (test_registry checks
 *    that it arrives); free_burst_us the same for frees back to back,
 *    which the watcher's bound on what one exporter costs it
 *    (registry_watch.c) reports once per 5 ms interval.
 * Needs no GPU and no driver: make bench and make bench-gpu run it on
 * each machine. Prints "key value" lines (medians, microseconds). No
 * timing asserts.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "handles/registry.h"
#include "handles/registry_view.h"
#include "handles/resolve.h"
#include "handles/transport.h"

#define RUNS 2000
#define ATTACHES 24
#define NOTIFIES 200

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return v[n / 2];
}

typedef struct exporter {
    pid_t pid;
    int go; /* closed (and a kill): it exits */
    byval_record_t rec;
} exporter_t;

/* Fork an exporter: one memfd, published in its registry, its record
 * sent back; it waits until stopped. */
static int exporter_start(exporter_t *x)
{
    int rp[2], go[2];
    if (pipe(rp) != 0 || pipe(go) != 0)
        return -1;
    x->pid = fork();
    if (x->pid == 0) {
        byval_self_t s;
        char c;
        close(go[1]);
        byval_self_reset(); /* as the library's fork handler does */
        int fd = memfd_create("bench", MFD_CLOEXEC);
        if (fd < 0 || ftruncate(fd, 65536) != 0 || byval_self_get(&s) != 0)
            _exit(1);
        byval_record_t rec = {.kind = BYVAL_KIND_ZE_MEM, .fd = (uint32_t)fd, .size = 65536,
                              .alloc_id = 7};
        byval_record_set_exporter(&rec, &s);
        rec.fd_ino = (uint32_t)byval_fd_inode(fd);
        if (byval_reg_add(byval_record_key(&rec, rec.fd), rec.fd_ino, rec.fd, rec.size) != 0 ||
            write(rp[1], &rec, sizeof(rec)) != (ssize_t)sizeof(rec))
            _exit(1);
        _exit(read(go[0], &c, 1) >= 0 ? 0 : 2);
    }
    close(rp[1]);
    close(go[0]);
    x->go = go[1];
    int ok = x->pid > 0 && read(rp[0], &x->rec, sizeof(x->rec)) == (ssize_t)sizeof(x->rec);
    close(rp[0]);
    return ok ? 0 : -1;
}

static void exporter_stop(exporter_t *x)
{
    /* Later exporters inherited this one's pipe: a kill, not an EOF. */
    close(x->go);
    kill(x->pid, SIGKILL);
    waitpid(x->pid, NULL, 0);
}

/* What an attach cannot do without, on an exporter met for the first
 * time (its /proc entries cold, as the attach finds them). */
static int attach_raw(const exporter_t *x, int pidfd, void **m_p)
{
    char path[64];
    struct statx stx;
    snprintf(path, sizeof(path), "/proc/%d/fd/%u", (int)x->pid, BYVAL_REG_FD_HINT);
    if (statx(AT_FDCWD, path, AT_STATX_DONT_SYNC, STATX_INO, &stx) != 0)
        return -1;
    int page = (int)syscall(SYS_pidfd_getfd, pidfd, BYVAL_REG_FD_HINT, 0);
    void *m = page < 0 ? MAP_FAILED : mmap(NULL, BYVAL_REG_BYTES, PROT_READ, MAP_SHARED, page, 0);
    if (m == MAP_FAILED)
        return -1;
    const byval_reg_header_t *h = m;
    int pipe_fd = (int)syscall(SYS_pidfd_getfd, pidfd, (int)h->pipe_fd, 0);
    close(page);
    close(pipe_fd);
    *m_p = m; /* unmapped untimed: the attach keeps its mapping */
    return pipe_fd < 0 ? -1 : 0;
}

/* The one-time registry attach, per exporter, and the raw system calls it
 * is made of, on as many other exporters (each met once). */
static int bench_attach(double *us, double *raw, char *msg, size_t len)
{
    exporter_t xs[2 * ATTACHES];
    int n = 0, rc = 0;
    for (; n < 2 * ATTACHES && rc == 0; n++)
        rc = exporter_start(&xs[n]);
    for (int i = 0; i < n && rc == 0; i++) {
        int pidfd = (int)syscall(SYS_pidfd_open, xs[i].pid, 0);
        double t0 = now_us();
        if (i % 2) {
            void *m = NULL;
            rc = attach_raw(&xs[i], pidfd, &m);
            raw[i / 2] = now_us() - t0;
            if (m)
                munmap(m, BYVAL_REG_BYTES);
            if (rc)
                snprintf(msg, len, "the raw attach failed");
        } else {
            byval_reg_view_t *v = byval_reg_attach(&xs[i].rec, BYVAL_MODE_PIDFD, pidfd, msg, len);
            us[i / 2] = now_us() - t0;
            if (!v)
                rc = -1;
            else
                byval_reg_view_put(v);
        }
        close(pidfd);
    }
    for (int i = 0; i < n; i++)
        exporter_stop(&xs[i]);
    return rc;
}

/* The watcher's report of a free (gone = 0), counted and timed. */
static volatile int frees_seen;
static volatile uint64_t free_seen_ns; /* now_us() * 1000 */

static void on_free(byval_reg_view_t *v, int gone)
{
    (void)v;
    if (gone)
        return;
    __atomic_store_n(&free_seen_ns, (uint64_t)(now_us() * 1e3), __ATOMIC_RELEASE);
    __atomic_add_fetch(&frees_seen, 1, __ATOMIC_RELEASE);
}

/* A free reaching an idle importer: an exporter publishes one export,
 * then on each 'r' frees it and publishes it again ('r' acked once both
 * are done); the importer's watcher reports each free. */
static int bench_free_notify(double *us, double *burst, char *msg, size_t len)
{
    int cmd[2], ack[2];
    if (pipe(cmd) != 0 || pipe(ack) != 0)
        return -1;
    const uint64_t key = BYVAL_REG_KEY(1, 77);
    pid_t pid = fork();
    if (pid == 0) {
        byval_self_t s;
        byval_record_t rec = {0};
        close(cmd[1]);
        close(ack[0]);
        byval_self_reset();
        if (byval_self_get(&s) != 0 || byval_reg_add(key, 5, 3, 4096) != 0)
            _exit(1);
        byval_record_set_exporter(&rec, &s);
        if (write(ack[1], &rec, sizeof(rec)) != (ssize_t)sizeof(rec))
            _exit(1);
        for (char c; read(cmd[0], &c, 1) == 1 && c == 'r';) {
            byval_reg_remove(key, 5);
            byval_reg_add(key, 5, 3, 4096);
            (void)!write(ack[1], &c, 1);
        }
        _exit(0);
    }
    close(cmd[0]);
    close(ack[1]);
    byval_record_t rec;
    int rc = pid > 0 && read(ack[0], &rec, sizeof(rec)) == (ssize_t)sizeof(rec) ? 0 : -1;
    int pidfd = rc ? -1 : (int)syscall(SYS_pidfd_open, pid, 0);
    byval_reg_on_event(on_free);
    byval_reg_view_t *v = pidfd < 0 ? NULL : byval_reg_attach(&rec, BYVAL_MODE_PIDFD, pidfd, msg, len);
    if (!v)
        rc = -1;
    for (int i = 0; i < 2 * NOTIFIES && rc == 0; i++) {
        if (i < NOTIFIES)
            usleep(10000); /* past the watcher's 5 ms interval: an idle importer */
        int before = __atomic_load_n(&frees_seen, __ATOMIC_ACQUIRE);
        char c = 'r';
        double t0 = now_us();
        if (write(cmd[1], &c, 1) != 1 || read(ack[0], &c, 1) != 1) {
            rc = -1;
            break;
        }
        /* Up to 1 s; a lost report fails the benchmark rather than
         * timing it as 1 s. */
        for (int k = 0; k < 100000 && __atomic_load_n(&frees_seen, __ATOMIC_ACQUIRE) == before; k++)
            usleep(10);
        if (__atomic_load_n(&frees_seen, __ATOMIC_ACQUIRE) == before) {
            snprintf(msg, len, "free %d never reached the watcher", i);
            rc = -1;
        }
        double d = (double)__atomic_load_n(&free_seen_ns, __ATOMIC_ACQUIRE) / 1e3 - t0;
        if (i < NOTIFIES)
            us[i] = d;
        else
            burst[i - NOTIFIES] = d;
    }
    if (v)
        byval_reg_view_put(v);
    close(cmd[1]); /* EOF: it exits */
    if (pid > 0)
        waitpid(pid, NULL, 0);
    close(ack[0]);
    if (pidfd >= 0)
        close(pidfd);
    return rc;
}

int main(void)
{
    exporter_t x;
    byval_self_t self;
    char msg[512];
    byval_resolve_set_prover(&byval_reg_prover);
    if (exporter_start(&x) != 0 || byval_self_get(&self) != 0) {
        fprintf(stderr, "bench_pidfd: exporter setup failed\n");
        return 1;
    }
    static double full[RUNS], raw[RUNS], known[RUNS], known_raw[RUNS], attach[ATTACHES],
        attach_raw_us[ATTACHES], notify[NOTIFIES], burst[NOTIFIES];
    const byval_record_t rec = x.rec;
    int status = 0, kept = (int)syscall(SYS_pidfd_open, x.pid, 0);
    /* The exporter met once: its registry is attached (timed below). */
    int fd = -1, pidfd = -1;
    if (kept < 0 || byval_resolve_fd(&rec, &self, &fd, &pidfd, msg, sizeof(msg)) != BYVAL_OK) {
        fprintf(stderr, "bench_pidfd: %s\n", kept < 0 ? "pidfd_open failed" : msg);
        status = 1;
    }
    close(fd);
    close(pidfd);
    for (int i = 0; i < RUNS && !status; i++) {
        fd = pidfd = -1;
        double t0 = now_us();
        byval_status_t st = byval_resolve_fd(&rec, &self, &fd, &pidfd, msg, sizeof(msg));
        close(fd);
        full[i] = now_us() - t0;
        close(pidfd); /* kept by the shim: not timed */
        if (st == BYVAL_OK) {
            t0 = now_us();
            st = byval_transport_fetch_more_fd(&rec, BYVAL_MODE_PIDFD, kept, rec.fd, rec.fd_ino,
                                               rec.size, &fd, msg, sizeof(msg));
            close(fd);
            known[i] = now_us() - t0;
        }
        if (st != BYVAL_OK) {
            fprintf(stderr, "bench_pidfd: %s\n", msg);
            status = 1;
            break;
        }
        t0 = now_us();
        pidfd = (int)syscall(SYS_pidfd_open, x.pid, 0);
        int dup = pidfd < 0 ? -1 : (int)syscall(SYS_pidfd_getfd, pidfd, (int)rec.fd, 0);
        close(dup);
        close(pidfd);
        raw[i] = now_us() - t0;
        t0 = now_us();
        close((int)syscall(SYS_pidfd_getfd, kept, (int)rec.fd, 0));
        known_raw[i] = now_us() - t0;
    }
    exporter_stop(&x);
    if (!status && bench_attach(attach, attach_raw_us, msg, sizeof(msg)) != 0) {
        fprintf(stderr, "bench_pidfd: attach: %s\n", msg);
        status = 1;
    }
    if (!status && bench_free_notify(notify, burst, msg, sizeof(msg)) != 0) {
        fprintf(stderr, "bench_pidfd: free notification: %s\n", msg);
        status = 1;
    }
    if (status)
        return status;
    printf("resolve_us %.3f\n", median(full, RUNS));
    printf("pidfd_raw_us %.3f\n", median(raw, RUNS));
    printf("known_us %.3f\n", median(known, RUNS));
    printf("getfd_raw_us %.3f\n", median(known_raw, RUNS));
    printf("attach_us %.3f\n", median(attach, ATTACHES));
    printf("attach_raw_us %.3f\n", median(attach_raw_us, ATTACHES));
    printf("free_notify_us %.3f\n", median(notify, NOTIFIES));
    printf("free_notify_max_us %.3f\n", notify[NOTIFIES - 1]); /* sorted by median() */
    printf("free_burst_us %.3f\n", median(burst, NOTIFIES));
    printf("free_burst_max_us %.3f\n", burst[NOTIFIES - 1]);
    return 0;
}
