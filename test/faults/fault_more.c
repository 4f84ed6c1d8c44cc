/* SPDX-License-Identifier: MIT */
/*
 * fault_more.c - fault scenarios that need more setup: bad input through
 * the full open path, fd exhaustion, threads and fork, another uid, and
 * PID reuse inside a private pid namespace.
 */
#include "test/faults/fault.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "handles/wire.h"

extern struct zeapp app;
void fault_result(const char *name, int ok, const char *detail);
int fault_count_fds(void);
int fault_open_check(const ze_ipc_mem_handle_t *h, uint64_t seed, ze_result_t *r_p);

static uint64_t rng = 88172645463325252ull;
static uint64_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void reap(pid_t pid)
{
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
        ;
}

/* Mutate one identity field of a valid record, keep the checksum valid.
 * Returns the field mutated (4: the fd number). */
static int mutate_record(ze_ipc_mem_handle_t *h)
{
    byval_record_t rec;
    uint8_t *rb = (uint8_t *)h->data + 17;
    if (byval_wire_decode(rb, BYVAL_WIRE_LEN, &rec) != BYVAL_WIRE_OK) {
        rb[next_rand() % BYVAL_WIRE_LEN] ^= (uint8_t)(1u << (next_rand() % 8));
        return -1;
    }
    int field = (int)(next_rand() % 8);
    switch (field) {
    case 0: { /* another pid: drawing the exporter's own (p ~ 2% a run) is no mutation */
        uint32_t pid = (uint32_t)(next_rand() % 400000);
        rec.pid = pid == rec.pid ? pid + 1 : pid;
        break;
    }
    case 1: rec.pidns ^= 1u + (uint32_t)(next_rand() % 1000); break;
    case 2: rec.boot ^= 1u + (uint32_t)next_rand(); break;
    case 3: rec.identity ^= 1u + next_rand() % 1000; break;
    case 4: rec.fd = (uint32_t)(next_rand() % 2048); break;
    case 5: rec.fd_ino ^= 1u + (uint32_t)(next_rand() % 1000); break;
    case 6: rec.size += BYVAL_WIRE_PAGE * (1 + next_rand() % 16); break;
    default: rec.kind = BYVAL_KIND_CU_VMM; break;
    }
    byval_wire_encode(&rec, rb);
    uint64_t fd = rec.fd; /* keep bytes 0-7 consistent: take the ipcbyval path */
    memcpy(h->data, &fd, sizeof(fd));
    return field;
}

/* Random and mutated handles: never a success, always INVALID_ARGUMENT. */
void fault_badinput(unsigned n)
{
    int sock;
    struct fault_reply r;
    pid_t pid = fault_exporter_start(&sock, 0);
    if (fault_exporter_cmd(sock, FAULT_OP_ALLOC, 0, 41, &r) != 0) {
        fault_result("bad input", 0, "exporter setup failed");
        return;
    }
    unsigned opened = 0, other = 0, random_n = 0, mutated_n = 0, same_object = 0;
    int opened_field = -2, opened_check = 0; /* the first that opened: what to debug */
    for (unsigned i = 0; i < n; i++) {
        ze_ipc_mem_handle_t h = r.handle;
        int field = -1;
        if (i % 5 < 2) {
            for (size_t b = 0; b < sizeof(h.data); b += 8) {
                uint64_t v = next_rand();
                memcpy(h.data + b, &v, 8);
            }
            random_n++;
        } else {
            field = mutate_record(&h);
            mutated_n++;
        }
        ze_result_t res;
        int c = fault_open_check(&h, 41, &res);
        /* A renumbered fd that names the very same file in the exporter
         * (its allocation's own memfd: same inode) is the right object. */
        if (c == 1 && field == 4)
            same_object++;
        else if (c >= 0 && opened++ == 0) {
            opened_field = field;
            opened_check = c;
        }
        other += c < 0 && res != ZE_RESULT_ERROR_INVALID_ARGUMENT;
    }
    /* The untouched handle still opens: the loop broke nothing. */
    int good = fault_open_check(&r.handle, 41, NULL) == 1;
    fault_exporter_cmd(sock, FAULT_OP_EXIT, 0, 0, NULL);
    reap(pid);
    close(sock);
    char d[300];
    int o = snprintf(d, sizeof(d),
                     "%u random + %u mutated: %u opened, %u other errors, %u fd renumbered to the "
                     "same file (correct data); valid handle ok %d",
                     random_n, mutated_n, opened, other, same_object, good);
    if (opened && o > 0 && (size_t)o < sizeof(d))
        snprintf(d + o, sizeof(d) - (size_t)o, "; first opened: field %d (-1 random), data %s",
                 opened_field, opened_check == 1 ? "right" : "wrong");
    fault_result("random and mutated handles: always INVALID_ARGUMENT", !opened && !other && good, d);
}

/* RLIMIT_NOFILE 64, many distinct handles: opens succeed by eviction; an
 * importer out of fds gets a clean OUT_OF_HOST_MEMORY and recovers. */
void fault_fdlimit(unsigned handles)
{
    struct rlimit small = {64, 64}, old;
    getrlimit(RLIMIT_NOFILE, &old);
    int sock;
    struct fault_reply r;
    pid_t pid = fault_exporter_start(&sock, 0);
    setrlimit(RLIMIT_NOFILE, &small);
    int base = fault_count_fds();
    unsigned ok = 0;
    for (unsigned i = 0; i < handles; i++) {
        /* A new allocation every time (a distinct handle), in 64 slots so
         * the exporter's own fds stay bounded. */
        if (fault_exporter_cmd(sock, FAULT_OP_REALLOC, i % 64, 7000 + i, &r) != 0)
            break;
        ok += fault_open_check(&r.handle, 7000 + i, NULL) == 1;
    }
    int after = fault_count_fds();
    /* Exhaust our fds, then open a new handle. */
    int dummies[128], nd = 0;
    while (nd < 128 && (dummies[nd] = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0)
        nd++;
    ze_result_t res = ZE_RESULT_SUCCESS;
    fault_exporter_cmd(sock, FAULT_OP_REALLOC, 64, 99, &r);
    int c = fault_open_check(&r.handle, 99, &res);
    while (nd > 0)
        close(dummies[--nd]);
    int recovered = fault_open_check(&r.handle, 99, NULL) == 1;
    int end = fault_count_fds();
    fault_exporter_cmd(sock, FAULT_OP_EXIT, 0, 0, NULL);
    reap(pid);
    close(sock);
    setrlimit(RLIMIT_NOFILE, &old);
    char d[200];
    snprintf(d, sizeof(d), "%u/%u handles verified at RLIMIT_NOFILE 64; fds %d -> %d", ok, handles,
             base, after);
    fault_result("10,000 distinct handles under RLIMIT_NOFILE 64", ok == handles && after <= base + 2, d);
    snprintf(d, sizeof(d), "open with no fd left: 0x%x; after freeing fds: %s; fds leaked %d",
             (unsigned)res, recovered ? "ok" : "FAILED", end - after);
    fault_result("out of fds: clean OUT_OF_HOST_MEMORY, no leak, recovers",
                 c == -1 && res == ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY && recovered && end <= after + 1, d);
}

#define TF_HANDLES 8
static struct fault_reply tf_r[TF_HANDLES];
static int tf_bad;

static void *tf_worker(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    for (int i = 0; i < 300; i++) {
        unsigned k = (unsigned)rand_r(&seed) % TF_HANDLES;
        void *p = NULL;
        if (zeapp_ipc_open(&app, &tf_r[k].handle, &p) != ZE_RESULT_SUCCESS) {
            __atomic_add_fetch(&tf_bad, 1, __ATOMIC_RELAXED);
            continue;
        }
        uint64_t word, want[1];
        zeapp_pattern(want, 0, sizeof(want), 300 + k);
        /* Device memory of the test driver is host-mapped: read a word. */
        memcpy(&word, p, sizeof(word));
        if (word != want[0])
            __atomic_add_fetch(&tf_bad, 1, __ATOMIC_RELAXED);
        zeapp_ipc_close(&app, p);
    }
    return NULL;
}

/* 16 threads share handles; a fork in the middle must not deadlock and
 * the child must work with fresh caches. */
void fault_threads_fork(void)
{
    int sock;
    pid_t pid = fault_exporter_start(&sock, 0);
    for (unsigned k = 0; k < TF_HANDLES; k++)
        if (fault_exporter_cmd(sock, FAULT_OP_ALLOC, k, 300 + k, &tf_r[k]) != 0)
            tf_bad++;
    pthread_t th[16];
    for (uintptr_t t = 0; t < 16; t++)
        pthread_create(&th[t], NULL, tf_worker, (void *)(t + 1));
    usleep(2000);
    /* ASan's allocator is not fork-safe while other threads allocate (a
     * libsanitizer limitation): under ASan the child only exits. */
    int child_opens = !getenv("FAULT_FORK_NO_MALLOC");
    pid_t child = fork();
    if (child == 0) {
        alarm(10); /* a deadlock in an at-fork handler ends here, as a failure */
        if (!child_opens)
            _exit(0);
        void *p = NULL;
        int ok = zeapp_ipc_open(&app, &tf_r[0].handle, &p) == ZE_RESULT_SUCCESS;
        if (ok)
            zeapp_ipc_close(&app, p);
        _exit(ok ? 0 : 1);
    }
    for (int t = 0; t < 16; t++)
        pthread_join(th[t], NULL);
    int st = -1;
    waitpid(child, &st, 0);
    fault_exporter_cmd(sock, FAULT_OP_EXIT, 0, 0, NULL);
    reap(pid);
    close(sock);
    char d[160];
    char how[64];
    if (WIFEXITED(st))
        snprintf(how, sizeof(how), "%s",
                 WEXITSTATUS(st) ? "open FAILED"
                 : child_opens   ? "opened with fresh caches"
                                 : "exited (its open is skipped under ASan)");
    else
        snprintf(how, sizeof(how), "killed by signal %d%s", WTERMSIG(st),
                 WTERMSIG(st) == SIGALRM ? " (hung)" : "");
    snprintf(d, sizeof(d), "16 threads x 300 opens, %d errors; forked child: %s", tf_bad, how);
    fault_result("16 threads open/close shared handles, fork in the middle",
                 tf_bad == 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0, d);
}

/* An exporter running as another uid cannot be read by a third uid. */
void fault_perm(void)
{
    int sock;
    struct fault_reply r;
    pid_t pid = fault_exporter_start(&sock, 65534);
    int ok = fault_exporter_cmd(sock, FAULT_OP_ALLOC, 0, 51, &r) == 0;
    pid_t imp = ok ? fork() : -1;
    if (imp == 0) {
        if (setresgid(65533, 65533, 65533) || setresuid(65533, 65533, 65533))
            _exit(3);
        ze_result_t res;
        int c = fault_open_check(&r.handle, 51, &res);
        _exit(c == -1 && res == ZE_RESULT_ERROR_INVALID_ARGUMENT ? 0 : 1);
    }
    int st = -1;
    if (imp > 0)
        waitpid(imp, &st, 0);
    fault_exporter_cmd(sock, FAULT_OP_EXIT, 0, 0, NULL);
    reap(pid);
    close(sock);
    fault_result("another uid's exporter: refused (EPERM, see the hint in the log)",
                 ok && WIFEXITED(st) && WEXITSTATUS(st) == 0,
                 ok ? "importer uid 65533, exporter uid 65534" : "exporter setup failed");
}

/* Inside a new pid namespace (the script runs us under unshare): exporter
 * A exits, B gets A's pid; A's handle is refused, B's opens B's data. */
void fault_pidreuse(void)
{
    int sa, sb;
    struct fault_reply ra, rb;
    pid_t a = fault_exporter_start(&sa, 0);
    if (fault_exporter_cmd(sa, FAULT_OP_ALLOC, 0, 61, &ra) != 0 ||
        fault_open_check(&ra.handle, 61, NULL) != 1) {
        fault_result("pid reuse", 0, "exporter A setup failed");
        return;
    }
    fault_exporter_cmd(sa, FAULT_OP_EXIT, 0, 0, NULL);
    reap(a);
    close(sa);
    FILE *f = fopen("/proc/sys/kernel/ns_last_pid", "w");
    if (!f || fprintf(f, "%d", (int)a - 1) < 0 || fclose(f) != 0) {
        printf("SKIP: pid reuse: cannot write ns_last_pid (%s)\n", strerror(errno));
        return;
    }
    pid_t b = fault_exporter_start(&sb, 0);
    if (b != a) {
        printf("SKIP: pid reuse: exporter B got pid %d, not %d\n", (int)b, (int)a);
        fault_exporter_cmd(sb, FAULT_OP_EXIT, 0, 0, NULL);
        reap(b);
        return;
    }
    fault_exporter_cmd(sb, FAULT_OP_ALLOC, 0, 62, &rb);
    usleep(5000); /* past the exporter poll interval */
    ze_result_t res;
    int old = fault_open_check(&ra.handle, 61, &res);
    int newer = fault_open_check(&rb.handle, 62, NULL);
    fault_exporter_cmd(sb, FAULT_OP_EXIT, 0, 0, NULL);
    reap(b);
    close(sb);
    char d[160];
    snprintf(d, sizeof(d), "pid %d reused; old handle: %s (0x%x); new handle: %s", (int)a,
             old == -1 ? "refused" : old == 1 ? "OPENED (stale)" : "wrong data", (unsigned)res,
             newer == 1 ? "its own data" : "FAILED");
    fault_result("PID reuse: old handle refused, never resolved against the new process",
                 old == -1 && res == ZE_RESULT_ERROR_INVALID_ARGUMENT && newer == 1, d);
}
