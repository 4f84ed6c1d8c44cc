// SPDX-License-Identifier: MIT
/*
 * pmuprof - a small sampling profiler for make bench-gpu, because the GPU
 * host has a PMU but no perf(1) (and no package manager to install it).
 *
 *   pmuprof [-e cycles|instructions|cpu-clock] [-c N] [-D MS] [-n TOP]
 *           [-m MODULE] -- COMMAND [ARG...]
 *
 * Runs COMMAND with one inherited sampling event (every N events, the
 * instruction pointer and pid), reads the ring buffer while it runs, and
 * prints the TOP symbols by share of samples, then the share of each
 * module. -D starts sampling MS milliseconds after the exec (to leave out
 * cuInit and similar start-up), -m counts only samples in modules whose
 * path contains MODULE. It also counts instructions and cycles (and, on
 * Intel, locked loads: MEM_INST_RETIRED.LOCK_LOADS) for the sampled window,
 * printed as totals so a benchmark can divide by its own iteration count.
 * The hardware events fall back to cpu-clock where the PMU is missing.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "pmuprof.h"

#define RING_PAGES 256 /* data pages (power of two): 1 MiB */

static int open_event(struct perf_event_attr *a, pid_t pid)
{
    return (int)syscall(SYS_perf_event_open, a, pid, -1, -1, PERF_FLAG_FD_CLOEXEC);
}

static void attr_init(struct perf_event_attr *a, uint32_t type, uint64_t config, int delayed)
{
    memset(a, 0, sizeof(*a));
    a->size = sizeof(*a);
    a->type = type;
    a->config = config;
    a->disabled = 1;
    a->inherit = 1;
    a->enable_on_exec = !delayed;
}

/* Counters for the window: instructions, cycles, locked loads (Intel's
 * MEM_INST_RETIRED.LOCK_LOADS, event 0xd0 umask 0x21). Missing ones are
 * left at -1. */
static void counters_open(int fd[3], pid_t pid, int delayed)
{
    static const struct { uint32_t type; uint64_t config; } ev[3] = {
        { PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS },
        { PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES },
        { PERF_TYPE_RAW, 0x21d0 },
    };
    for (int i = 0; i < 3; i++) {
        struct perf_event_attr a;
        attr_init(&a, ev[i].type, ev[i].config, delayed);
        fd[i] = open_event(&a, pid);
    }
}

struct ring {
    struct perf_event_mmap_page *meta;
    char *data;
    size_t size;
};

/* One record, copied out of the ring (it may wrap). */
static void ring_drain(struct ring *r, struct prof *p)
{
    uint64_t head = __atomic_load_n(&r->meta->data_head, __ATOMIC_ACQUIRE);
    uint64_t tail = r->meta->data_tail;
    union { struct perf_event_header h; char b[4096 + 256]; } rec;
    while (tail < head) {
        struct perf_event_header h;
        for (size_t i = 0; i < sizeof(h); i++)
            ((char *)&h)[i] = r->data[(tail + i) & (r->size - 1)];
        if (h.size < sizeof(h) || h.size > sizeof(rec))
            break;
        for (size_t i = 0; i < h.size; i++)
            rec.b[i] = r->data[(tail + i) & (r->size - 1)];
        tail += h.size;
        if (h.type == PERF_RECORD_SAMPLE) {
            const uint64_t *ip = (const uint64_t *)(rec.b + sizeof(h));
            const uint32_t *pt = (const uint32_t *)(ip + 1);
            prof_sample(p, (pid_t)pt[0], *ip);
        } else if (h.type == PERF_RECORD_MMAP2) {
            const char *q = rec.b + sizeof(h);
            uint32_t pid;
            uint64_t addr, len, pgoff;
            memcpy(&pid, q, 4);
            memcpy(&addr, q + 8, 8);
            memcpy(&len, q + 16, 8);
            memcpy(&pgoff, q + 24, 8);
            /* maj, min, ino, ino_generation, prot, flags, then the name */
            const char *name = q + 32 + 4 + 4 + 8 + 8 + 4 + 4;
            prof_map(p, (pid_t)pid, addr, len, pgoff, name);
        } else if (h.type == PERF_RECORD_LOST) {
            uint64_t lost;
            memcpy(&lost, rec.b + sizeof(h) + 8, 8);
            prof_lost(p, lost);
        }
    }
    __atomic_store_n(&r->meta->data_tail, tail, __ATOMIC_RELEASE);
}

static void usage(void)
{
    fprintf(stderr, "usage: pmuprof [-e cycles|instructions|cpu-clock] [-c N] [-D MS] "
                    "[-n TOP] [-m MODULE] -- COMMAND [ARG...]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    const char *ev = "cycles", *module = NULL;
    long period = 0, delay_ms = 0, top = 25;
    int opt;
    while ((opt = getopt(argc, argv, "+e:c:D:n:m:")) != -1) {
        switch (opt) {
        case 'e': ev = optarg; break;
        case 'c': period = atol(optarg); break;
        case 'D': delay_ms = atol(optarg); break;
        case 'n': top = atol(optarg); break;
        case 'm': module = optarg; break;
        default: usage();
        }
    }
    if (optind >= argc)
        usage();

    int go[2];
    if (pipe2(go, O_CLOEXEC) < 0)
        return perror("pipe2"), 1;
    pid_t child = fork();
    if (child < 0)
        return perror("fork"), 1;
    if (child == 0) {
        char c;
        close(go[1]);
        if (read(go[0], &c, 1) != 1)
            _exit(127);
        execvp(argv[optind], argv + optind);
        perror(argv[optind]);
        _exit(127);
    }
    close(go[0]);

    struct perf_event_attr a;
    int sw = !strcmp(ev, "cpu-clock");
    attr_init(&a, sw ? PERF_TYPE_SOFTWARE : PERF_TYPE_HARDWARE,
              sw ? PERF_COUNT_SW_CPU_CLOCK
                 : !strcmp(ev, "instructions") ? PERF_COUNT_HW_INSTRUCTIONS
                                              : PERF_COUNT_HW_CPU_CYCLES,
              delay_ms > 0);
    a.sample_period = period > 0 ? (uint64_t)period : sw ? 100000 : 200003;
    a.sample_type = PERF_SAMPLE_IP | PERF_SAMPLE_TID;
    a.mmap = 1;
    a.mmap2 = 1;
    a.wakeup_events = 64;
    /* Sampling events can only be mmapped per CPU when inherited (the
     * kernel refuses one ring for a whole task tree): one event and ring
     * on each online CPU. */
    int ncpu = (int)sysconf(_SC_NPROCESSORS_CONF);
    if (ncpu < 1 || ncpu > 1024)
        ncpu = 1;
    int *fd = calloc((size_t)ncpu, sizeof(*fd));
    struct ring *r = calloc((size_t)ncpu, sizeof(*r));
    long pg = sysconf(_SC_PAGESIZE);
    int nfd = 0;
    for (int pass = 0; pass < 2 && !nfd; pass++) {
        for (int c = 0; c < ncpu; c++) {
            int f = (int)syscall(SYS_perf_event_open, &a, child, c, -1, PERF_FLAG_FD_CLOEXEC);
            if (f < 0)
                continue;
            r[nfd].size = (size_t)RING_PAGES * (size_t)pg;
            void *m = mmap(NULL, r[nfd].size + (size_t)pg, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
            if (m == MAP_FAILED) {
                close(f);
                continue;
            }
            r[nfd].meta = m;
            r[nfd].data = (char *)m + pg;
            fd[nfd++] = f;
        }
        if (!nfd && !sw) {
            fprintf(stderr, "pmuprof: %s: %s; sampling cpu-clock instead\n", ev, strerror(errno));
            ev = "cpu-clock";
            sw = 1;
            a.type = PERF_TYPE_SOFTWARE;
            a.config = PERF_COUNT_SW_CPU_CLOCK;
            a.sample_period = period > 0 ? (uint64_t)period : 100000;
        }
    }
    if (!nfd) {
        fprintf(stderr, "pmuprof: perf_event_open: %s\n", strerror(errno));
        kill(child, SIGKILL);
        return 1;
    }
    int cnt[3];
    counters_open(cnt, child, delay_ms > 0);

    struct prof *p = prof_new();
    if (write(go[1], "g", 1) != 1)
        return perror("start"), 1;
    close(go[1]);
    if (delay_ms > 0) {
        struct timespec ts = { delay_ms / 1000, (delay_ms % 1000) * 1000000L };
        nanosleep(&ts, NULL);
        prof_maps_from_proc(p, child); /* mmap records only flow while enabled */
        for (int i = 0; i < nfd; i++)
            ioctl(fd[i], PERF_EVENT_IOC_ENABLE, 0);
        for (int i = 0; i < 3; i++)
            if (cnt[i] >= 0)
                ioctl(cnt[i], PERF_EVENT_IOC_ENABLE, 0);
    }
    int status = 0;
    for (;;) {
        struct pollfd pfd = { .fd = fd[0], .events = POLLIN };
        poll(&pfd, 1, 20);
        for (int i = 0; i < nfd; i++)
            ring_drain(&r[i], p);
        pid_t w = waitpid(child, &status, WNOHANG);
        if (w == child)
            break;
    }
    for (int i = 0; i < nfd; i++)
        ring_drain(&r[i], p);
    uint64_t v[3] = { 0, 0, 0 };
    for (int i = 0; i < 3; i++)
        if (cnt[i] < 0 || read(cnt[i], &v[i], sizeof(v[i])) != sizeof(v[i]))
            cnt[i] = -1;
    printf("pmuprof: event %s, every %llu; command exit %d\n", ev,
           (unsigned long long)a.sample_period,
           WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
    printf("pmuprof: counted instructions %s%llu cycles %s%llu locked-loads %s%llu\n",
           cnt[0] < 0 ? "n/a " : "", (unsigned long long)v[0], cnt[1] < 0 ? "n/a " : "",
           (unsigned long long)v[1], cnt[2] < 0 ? "n/a " : "", (unsigned long long)v[2]);
    prof_report(p, stdout, (int)top, module);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
