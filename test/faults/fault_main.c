/* SPDX-License-Identifier: MIT */
/*
 * fault_main.c - the importer side of the fault suite. Each scenario
 * prints "PASS: name (counts)" or "FAIL: name: why"; exit 1 on any FAIL.
 * Run under ipcbyval (scripts/ipcbyval-run): an ordinary Level Zero
 * program whose peer exits, gets killed, reuses addresses and fds, or is
 * another user.
 */
#include "test/faults/fault.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct zeapp app;
void *stage;
int failures;

static void die_exit(int code)
{
    exit(code);
}

void fault_result(const char *name, int ok, const char *detail)
{
    if (ok) {
        printf("PASS: %s%s%s%s\n", name, detail[0] ? " (" : "", detail, detail[0] ? ")" : "");
    } else {
        printf("FAIL: %s: %s\n", name, detail);
        failures++;
    }
    fflush(stdout);
}

/* Our open fds, less ipcbyval's release watcher's epoll instance: one per
 * importing process, for its lifetime (its per-exporter pipes are
 * counted: they must go when their exporter does). */
int fault_count_fds(void)
{
    int n = 0;
    char link[64];
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        ssize_t len = readlinkat(dirfd(d), e->d_name, link, sizeof(link) - 1);
        if (len > 0 && (size_t)len == strlen("anon_inode:[eventpoll]") &&
            memcmp(link, "anon_inode:[eventpoll]", (size_t)len) == 0)
            continue;
        n++;
    }
    closedir(d);
    return n - 3;
}

/* Open h, compare with seed's pattern, close. 1 data ok, 0 wrong data
 * (stale), -1 open refused (*r_p holds the result). */
int fault_open_check(const ze_ipc_mem_handle_t *h, uint64_t seed, ze_result_t *r_p)
{
    void *p = NULL;
    ze_result_t r = zeapp_ipc_open(&app, h, &p);
    if (r_p)
        *r_p = r;
    if (r != ZE_RESULT_SUCCESS)
        return -1;
    unsigned got, want;
    zeapp_copy(&app, stage, p, FAULT_BUF);
    long bad = zeapp_pattern_check(stage, 0, FAULT_BUF, seed, &got, &want);
    zeapp_ipc_close(&app, p);
    return bad < 0 ? 1 : 0;
}

static void reap(pid_t pid)
{
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
}

/* Exporter exits before the importer opens: a clean error, no hang. */
static void exit_before(void)
{
    int sock;
    struct fault_reply r;
    pid_t pid = fault_exporter_start(&sock, 0);
    int ok = fault_exporter_cmd(sock, FAULT_OP_ALLOC, 0, 11, &r) == 0;
    fault_exporter_cmd(sock, FAULT_OP_EXIT, 0, 0, NULL);
    reap(pid);
    close(sock);
    ze_result_t res = ZE_RESULT_SUCCESS;
    int c = ok ? fault_open_check(&r.handle, 11, &res) : 2;
    char d[128];
    snprintf(d, sizeof(d), "open returned 0x%x", (unsigned)res);
    fault_result("exporter exited before open: clean INVALID_ARGUMENT",
                 c == -1 && res == ZE_RESULT_ERROR_INVALID_ARGUMENT, d);
}

/* Exporter exits while the importer holds the mapping: still valid. */
static void exit_after(void)
{
    int sock;
    struct fault_reply r;
    pid_t pid = fault_exporter_start(&sock, 0);
    int ok = fault_exporter_cmd(sock, FAULT_OP_ALLOC, 0, 12, &r) == 0;
    void *p = NULL;
    ok = ok && zeapp_ipc_open(&app, &r.handle, &p) == ZE_RESULT_SUCCESS;
    fault_exporter_cmd(sock, FAULT_OP_EXIT, 0, 0, NULL);
    reap(pid);
    close(sock);
    unsigned got, want;
    long bad = -2;
    if (ok) {
        zeapp_copy(&app, stage, p, FAULT_BUF);
        bad = zeapp_pattern_check(stage, 0, FAULT_BUF, 12, &got, &want);
        zeapp_ipc_close(&app, p);
    }
    fault_result("exporter exited after open: mapping stays valid", ok && bad == -1,
                 ok ? "data checked after the exporter was reaped" : "open failed");
    /* The next open polls the exporters' pidfds (rate-limited to 1 ms):
     * the entry of the dead exporter is released (stats: exporter_exits). */
    usleep(5000);
    ze_result_t res;
    fault_open_check(&r.handle, 12, &res);
}

/* Exporters SIGKILLed at random points during an exchange. */
static void kills(unsigned rounds)
{
    int base = fault_count_fds(), crashes = 0, errors = 0, good = 0, stale = 0;
    srand(7);
    for (unsigned i = 0; i < rounds; i++) {
        int sock;
        struct fault_reply r;
        pid_t pid = fault_exporter_start(&sock, 0);
        if (fault_exporter_cmd(sock, FAULT_OP_ALLOC, 0, 1000 + i, &r) != 0) {
            kill(pid, SIGKILL);
            reap(pid);
            close(sock);
            continue;
        }
        int when = rand() % 3; /* before, racing, after the open */
        if (when == 0)
            kill(pid, SIGKILL);
        else if (when == 1 && fork() == 0) {
            usleep((useconds_t)(rand() % 200));
            kill(pid, SIGKILL);
            _exit(0);
        }
        ze_result_t res;
        int c = fault_open_check(&r.handle, 1000 + i, &res);
        if (c == 1)
            good++;
        else if (c == 0)
            stale++;
        else if (res == ZE_RESULT_ERROR_INVALID_ARGUMENT)
            errors++;
        else
            crashes++;
        kill(pid, SIGKILL);
        reap(pid);
        while (waitpid(-1, NULL, WNOHANG) > 0)
            ;
        close(sock);
    }
    usleep(5000);
    ze_result_t res;
    ze_ipc_mem_handle_t junk;
    memset(&junk, 0, sizeof(junk));
    fault_open_check(&junk, 0, &res); /* one more call: the last poll */
    int leaked = fault_count_fds() - base;
    char d[200];
    snprintf(d, sizeof(d), "%u rounds: %d verified, %d clean errors, 0 crashes, stale %d, fds leaked %d",
             rounds, good, errors, stale, leaked);
    fault_result("exporters SIGKILLed at random points", crashes == 0 && stale == 0 && leaked <= 0, d);
}

/* The exporter frees and reallocates (same size: often the same address
 * and fd number); every round's handle must show that round's data. */
static void realloc_rounds(unsigned rounds)
{
    int sock, stale = 0, refused = 0, reused_addr = 0;
    struct fault_reply r;
    uint64_t last_addr = 0;
    pid_t pid = fault_exporter_start(&sock, 0);
    for (unsigned i = 0; i < rounds; i++) {
        if (fault_exporter_cmd(sock, FAULT_OP_REALLOC, 0, 5000 + i, &r) != 0) {
            refused++;
            break;
        }
        reused_addr += r.addr == last_addr;
        last_addr = r.addr;
        int c = fault_open_check(&r.handle, 5000 + i, NULL);
        stale += c == 0;
        refused += c < 0;
    }
    fault_exporter_cmd(sock, FAULT_OP_EXIT, 0, 0, NULL);
    reap(pid);
    close(sock);
    char d[160];
    snprintf(d, sizeof(d), "%u rounds, same address %d times, stale hits %d, refused %d", rounds,
             reused_addr, stale, refused);
    fault_result("allocation reuse never returns the stale mapping",
                 stale == 0 && refused == 0 && reused_addr > 0, d);
}

/* The exporter closes its exported fd and another object takes the
 * number: the importer must refuse (inode check), not map the other one. */
static void fd_reuse(void)
{
    int sock;
    struct fault_reply r;
    pid_t pid = fault_exporter_start(&sock, 0);
    int ok = fault_exporter_cmd(sock, FAULT_OP_ALLOC, 0, 21, &r) == 0 &&
             fault_exporter_cmd(sock, FAULT_OP_REUSE_FD, 0, 0, NULL) == 0;
    ze_result_t res = ZE_RESULT_SUCCESS;
    int c = ok ? fault_open_check(&r.handle, 21, &res) : 2;
    fault_exporter_cmd(sock, FAULT_OP_EXIT, 0, 0, NULL);
    reap(pid);
    close(sock);
    fault_result("closed-and-reused fd number in the exporter is refused",
                 c == -1 && res == ZE_RESULT_ERROR_INVALID_ARGUMENT,
                 ok ? "inode check" : "setup failed");
}

void fault_badinput(unsigned n);
void fault_fdlimit(unsigned handles);
void fault_threads_fork(void);
void fault_perm(void);
void fault_pidreuse(void);
void fault_forkoffer(void);
void fault_exporters100(void);
int fault_xns_export(const char *file);
int fault_xns_import(const char *file, int expect_fail);

int main(int argc, char **argv)
{
    const char *what = argc > 1 ? argv[1] : "all";
    unsigned scale = getenv("FAULT_SCALE") ? (unsigned)atoi(getenv("FAULT_SCALE")) : 1;
    if (!scale)
        scale = 1;
    zeapp_init(&app, ZEAPP_ROUTE_SYMBOL, "importer", die_exit);
    stage = zeapp_alloc_host(&app, FAULT_BUF);
#define RUN_IF(name, call)                                      \
    if (!strcmp(what, "all") || !strcmp(what, name))            \
        call;
    RUN_IF("exit-before", exit_before());
    RUN_IF("exit-after", exit_after());
    RUN_IF("kill", kills(1000 / scale));
    RUN_IF("realloc", realloc_rounds(10000 / scale));
    RUN_IF("fdreuse", fd_reuse());
    RUN_IF("badinput", fault_badinput(100000 / scale));
    RUN_IF("fdlimit", fault_fdlimit(10000 / scale));
    RUN_IF("threads", fault_threads_fork());
    RUN_IF("perm", fault_perm());
    RUN_IF("forkoffer", fault_forkoffer());
    RUN_IF("exporters100", fault_exporters100());
    if (!strcmp(what, "xns-export") && argc > 2)
        return fault_xns_export(argv[2]);
    if (!strcmp(what, "xns-import") && argc > 2)
        fault_xns_import(argv[2], argc > 3 && !strcmp(argv[3], "expect-fail"));
    if (!strcmp(what, "pidreuse"))
        fault_pidreuse(); /* needs its own pid namespace: the script runs it */
    return failures ? 1 : 0;
}
