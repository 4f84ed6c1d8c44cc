/* SPDX-License-Identifier: MIT */
/*
 * bench_pidfd: what a cold open adds to the driver's own import, timed
 * against a fork()ed exporter holding a memfd, each next to the raw
 * syscalls it is made of (every row closes the duplicate, as the open
 * does once the driver imported it):
 *  - resolve_us: the first open from an exporter, byval_resolve_fd (host
 *    and namespace checks, pidfd_open, identity check, pidfd_getfd, inode
 *    and size check; the pidfd is kept) vs pidfd_raw_us (pidfd_open +
 *    pidfd_getfd + both closes);
 *  - known_us: every later cold open from that exporter, through its kept
 *    pidfd, byval_getfd_more (pidfd_getfd, inode and size check) vs
 *    getfd_raw_us (pidfd_getfd + close).
 * Needs no GPU and no driver: make bench and make bench-gpu run it on
 * each machine. Prints "key value" lines (medians, microseconds). No
 * timing asserts.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "handles/resolve.h"

#define RUNS 2000

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

int main(void)
{
    int rp[2], go[2];
    if (pipe(rp) != 0 || pipe(go) != 0)
        return 1;
    pid_t child = fork();
    if (child == 0) { /* the exporter: one memfd, its record, then wait */
        byval_self_t s;
        char c;
        int fd = memfd_create("bench", MFD_CLOEXEC);
        byval_self_reset();
        if (fd < 0 || ftruncate(fd, 65536) != 0 || byval_self_get(&s) != 0)
            _exit(1);
        byval_record_t rec = {.kind = BYVAL_KIND_ZE_MEM, .fd = (uint32_t)fd, .size = 65536};
        byval_record_set_exporter(&rec, &s);
        rec.fd_ino = (uint32_t)byval_fd_inode(fd);
        if (write(rp[1], &rec, sizeof(rec)) != (ssize_t)sizeof(rec))
            _exit(1);
        _exit(read(go[0], &c, 1) == 1 ? 0 : 2);
    }
    byval_record_t rec;
    byval_self_t self;
    if (child < 0 || read(rp[0], &rec, sizeof(rec)) != (ssize_t)sizeof(rec) ||
        byval_self_get(&self) != 0) {
        fprintf(stderr, "bench_pidfd: exporter setup failed\n");
        return 1;
    }
    static double full[RUNS], raw[RUNS], known[RUNS], known_raw[RUNS];
    char msg[512];
    int status = 0, kept = (int)syscall(SYS_pidfd_open, child, 0);
    for (int i = 0; i < RUNS && kept >= 0; i++) {
        int fd = -1, pidfd = -1;
        double t0 = now_us();
        byval_status_t st = byval_resolve_fd(&rec, &self, &fd, &pidfd, msg, sizeof(msg));
        close(fd);
        full[i] = now_us() - t0;
        close(pidfd); /* kept by the shim: not timed */
        if (st == BYVAL_OK) {
            t0 = now_us();
            st = byval_getfd_more(kept, rec.pid, rec.fd, rec.fd_ino, rec.size, &fd, msg,
                                  sizeof(msg));
            close(fd);
            known[i] = now_us() - t0;
        }
        if (st != BYVAL_OK) {
            fprintf(stderr, "bench_pidfd: %s\n", msg);
            status = 1;
            break;
        }
        t0 = now_us();
        pidfd = (int)syscall(SYS_pidfd_open, child, 0);
        int dup = pidfd < 0 ? -1 : (int)syscall(SYS_pidfd_getfd, pidfd, (int)rec.fd, 0);
        close(dup);
        close(pidfd);
        raw[i] = now_us() - t0;
        t0 = now_us();
        close((int)syscall(SYS_pidfd_getfd, kept, (int)rec.fd, 0));
        known_raw[i] = now_us() - t0;
    }
    if (kept < 0) {
        perror("bench_pidfd: pidfd_open");
        status = 1;
    }
    (void)!write(go[1], "x", 1);
    waitpid(child, NULL, 0);
    if (status)
        return status;
    printf("resolve_us %.3f\n", median(full, RUNS));
    printf("pidfd_raw_us %.3f\n", median(raw, RUNS));
    printf("known_us %.3f\n", median(known, RUNS));
    printf("getfd_raw_us %.3f\n", median(known_raw, RUNS));
    return 0;
}
