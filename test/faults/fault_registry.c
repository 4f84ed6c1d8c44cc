/* SPDX-License-Identifier: MIT */
/*
 * fault_registry.c - a forked child's registry is offered over the socket
 * fallback (issue 22, defect 6): an exporter exports (its registry is
 * made and offered), forks, and the child exports and later frees its own
 * allocation. An importer that reaches exporters only through their
 * brokers (IPCBYVAL_TRANSPORT=socket) must learn of the child's free: its
 * closed, cached mapping is released within a second, as natively the
 * memory goes back. Before, the "offered once" flag survived the fork and
 * the child's registry was never offered: the mapping stayed cached.
 *
 * And 100 live exporters under RLIMIT_NOFILE 256: every handle opens, and
 * every closed mapping is released once its exporter frees it (at the
 * free, or earlier when the exporter's view was evicted to stay within
 * the bound). Before, each exporter met cost 2 fds for good and the
 * application's own socket to each made a third: EMFILE after about 80.
 */
#include "test/faults/fault.h"

#include <inttypes.h>
#include <sys/resource.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

void fault_result(const char *name, int ok, const char *detail);
extern struct zeapp app;
extern void *stage;

#define FORK_SEED 2201

static void die_exit(int code)
{
    _exit(code);
}

/* The exporter: exports one buffer, forks; the child exports another,
 * sends its handle, frees it on FAULT_OP_FREE, exits on anything else. */
static void fork_exporter(int sock)
{
    struct zeapp ex;
    ze_ipc_mem_handle_t h;
    zeapp_init(&ex, ZEAPP_ROUTE_SYMBOL, "exporter", die_exit);
    void *st = zeapp_alloc_host(&ex, FAULT_BUF);
    void *a = zeapp_alloc_device(&ex, FAULT_BUF);
    if (zeapp_ipc_get(&ex, a, &h) != ZE_RESULT_SUCCESS) /* the parent's registry, offered */
        _exit(2);
    pid_t c = fork();
    if (c != 0) {
        waitpid(c, NULL, 0);
        _exit(0);
    }
    struct fault_reply r = {.status = 0};
    void *b = zeapp_alloc_device(&ex, FAULT_BUF);
    zeapp_pattern(st, 0, FAULT_BUF, FORK_SEED);
    zeapp_copy(&ex, b, st, FAULT_BUF);
    r.status = zeapp_ipc_get(&ex, b, &r.handle) == ZE_RESULT_SUCCESS ? 0 : -1;
    if (fault_send(sock, &r, sizeof(r)) != 0)
        _exit(3);
    for (struct fault_cmd cmd; fault_recv(sock, &cmd, sizeof(cmd)) == 0;) {
        if (cmd.op != FAULT_OP_FREE)
            break;
        zeapp_free(&ex, b);
        if (fault_send(sock, &r, sizeof(r)) != 0)
            break;
    }
    _exit(0);
}

/* The inode of the file mapped at addr (0: none, or anonymous). An
 * address is reused by the next mapping once released: a mapping is
 * followed by its file's inode, unique per allocation of the driver. */
static unsigned long map_inode(const void *addr)
{
    FILE *f = fopen("/proc/self/maps", "re");
    char line[512];
    unsigned long ino = 0;
    uintptr_t a = (uintptr_t)addr, lo, hi;
    while (!ino && f && fgets(line, sizeof(line), f))
        if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR " %*s %*s %*s %lu", &lo, &hi, &ino) != 3 ||
            a < lo || a >= hi)
            ino = 0;
    if (f)
        fclose(f);
    return ino;
}

/* 1 while a file of inode ino is mapped here. */
static int mapped(unsigned long ino)
{
    FILE *f = fopen("/proc/self/maps", "re");
    char line[512];
    int in = 0;
    unsigned long i;
    while (!in && f && fgets(line, sizeof(line), f))
        in = sscanf(line, "%*s %*s %*s %*s %lu", &i) == 1 && i == ino;
    if (f)
        fclose(f);
    return in;
}

void fault_forkoffer(void)
{
    int sv[2];
    struct fault_reply r;
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
        return fault_result("fork child's registry offered", 0, "socketpair failed");
    pid_t pid = fork();
    if (pid == 0) {
        close(sv[0]);
        fork_exporter(sv[1]);
    }
    close(sv[1]);
    void *p = NULL;
    int ok = fault_recv(sv[0], &r, sizeof(r)) == 0 && r.status == 0 &&
             zeapp_ipc_open(&app, &r.handle, &p) == ZE_RESULT_SUCCESS;
    unsigned got, want;
    if (ok) {
        zeapp_copy(&app, stage, p, FAULT_BUF);
        ok = zeapp_pattern_check(stage, 0, FAULT_BUF, FORK_SEED, &got, &want) < 0;
        zeapp_ipc_close(&app, p); /* closed: cached until the child frees it */
    }
    unsigned long ino = ok ? map_inode(p) : 0;
    int cached = ino && mapped(ino);
    struct fault_cmd c = {.op = FAULT_OP_FREE};
    ok = ok && fault_send(sv[0], &c, sizeof(c)) == 0 && fault_recv(sv[0], &r, sizeof(r)) == 0;
    int ms = 0;
    while (ok && mapped(ino) && ms < 2000) {
        usleep(1000);
        ms++;
    }
    char d[160];
    snprintf(d, sizeof(d), "%s; after the child's free: %s (%d ms)",
             cached ? "closed mapping cached" : "not cached",
             mapped(ino) ? "still mapped" : "released", ms);
    fault_result("fork child's registry offered: its free releases over the socket",
                 ok && cached && !mapped(ino), d);
    c.op = FAULT_OP_EXIT;
    fault_send(sv[0], &c, sizeof(c));
    close(sv[0]);
    waitpid(pid, NULL, 0);
}

void fault_exporters100(void)
{
    enum { N = 100 };
    static int sock[N];
    static pid_t pid[N];
    static unsigned long ino[N];
    struct fault_reply r;
    struct rlimit old, small = {256, 256};
    int started = 0, opened = 0, released = 0;
    /* The exporters first, under the usual limit: each child inherits the
     * sockets made before it. */
    while (started < N && (pid[started] = fault_exporter_start(&sock[started], 0)) > 0)
        started++;
    getrlimit(RLIMIT_NOFILE, &old);
    setrlimit(RLIMIT_NOFILE, &small);
    for (int i = 0; i < started; i++) {
        void *p = NULL;
        if (fault_exporter_cmd(sock[i], FAULT_OP_ALLOC, 0, 3000 + (uint64_t)i, &r) != 0 ||
            zeapp_ipc_open(&app, &r.handle, &p) != ZE_RESULT_SUCCESS)
            continue;
        unsigned got, want;
        ino[i] = map_inode(p);
        zeapp_copy(&app, stage, p, FAULT_BUF);
        opened += zeapp_pattern_check(stage, 0, FAULT_BUF, 3000 + (uint64_t)i, &got, &want) < 0;
        zeapp_ipc_close(&app, p); /* cached until its exporter frees it */
    }
    for (int i = 0; i < started; i++) {
        fault_exporter_cmd(sock[i], FAULT_OP_FREE, 0, 0, NULL);
        for (int ms = 0; ino[i] && mapped(ino[i]) && ms < 1000; ms++)
            usleep(1000);
        released += ino[i] && !mapped(ino[i]);
    }
    setrlimit(RLIMIT_NOFILE, &old);
    for (int i = 0; i < started; i++) {
        fault_exporter_cmd(sock[i], FAULT_OP_EXIT, 0, 0, NULL);
        close(sock[i]);
        waitpid(pid[i], NULL, 0);
    }
    char d[160];
    snprintf(d, sizeof(d), "%d exporters, %d opened and verified, %d released after their free",
             started, opened, released);
    fault_result("100 live exporters under RLIMIT_NOFILE 256: all open and release",
                 started == N && opened == N && released == N, d);
}
