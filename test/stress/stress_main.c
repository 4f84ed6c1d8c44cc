/* SPDX-License-Identifier: MIT */
/*
 * stress_main.c - runs one variant of the stress workload (stress.h) and
 * prints its counters: "PASS: NAME ..." when every one is 0, else
 * "FAIL: NAME: ...".
 *
 *   stress_ze|stress_cu NAME [--seconds S] [--settle S] [--native]
 *                            [--no-forks] [--no-double-closes] [--no-destroys]
 *                            [--one-context]
 *
 * --one-context: every worker in the shared context (so no destroys): the
 * real CUDA driver maps a legacy handle in one context of a process only.
 * --native: the baseline without ipcbyval (Level Zero: the fd travels
 * with SCM_RIGHTS). The exporter and importer write their stderr into a
 * temporary file; every "[ipcbyval" line in it is a warning counted
 * (the default log level prints nothing but warnings and errors).
 */
#include "test/stress/stress.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct stress_shared *stress_sh;
struct stress_opts stress_o = {.seconds = 3, .settle = 2, .forks = 1, .double_closes = 1,
                               .destroys = 1};

uint64_t stress_word(uint64_t serial, uint64_t off)
{
    uint64_t x = serial * 0x9e3779b97f4a7c15ull ^ off * 0xc2b2ae3d27d4eb4full;
    x ^= x >> 29;
    x *= 0xbf58476d1ce4e5b9ull;
    return x ^ x >> 32;
}

uint64_t stress_rand(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

double stress_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

void stress_sleep_ms(double ms)
{
    struct timespec t = {(time_t)(ms / 1000), (long)((ms - (double)(long)(ms / 1000) * 1000) * 1e6)};
    nanosleep(&t, NULL);
}

static pid_t spawn(int (*fn)(int), int sock, int other, int logfd)
{
    pid_t pid = fork();
    if (pid == 0) {
        close(other);
        dup2(logfd, 2);
        _exit(fn(sock));
    }
    return pid;
}

static void report(int st, const char *who);

/* Reaps a child; a signal is a crash. Whichever ends first, the other
 * is told (neither waits for a peer that is gone). */
static void reap(pid_t exp, pid_t imp)
{
    for (int left = 2; left;) {
        int st = 0;
        pid_t pid = waitpid(-1, &st, 0);
        if (pid < 0)
            return;
        if (pid != exp && pid != imp)
            continue;
        left--;
        const char *who = pid == exp ? "exporter" : "importer";
        STORE(stop, 1);
        if (pid == exp)
            STORE(exp_exited, 1);
        else
            STORE(imp_done, 1);
        report(st, who);
    }
}

static void report(int st, const char *who)
{
    if (WIFSIGNALED(st)) {
        fprintf(stderr, "stress: %s killed by signal %d\n", who, WTERMSIG(st));
        ADD(crashes, 1);
    } else if (WEXITSTATUS(st) != 0) { /* a sanitizer's report ends it so too */
        fprintf(stderr, "stress: %s exited %d\n", who, WEXITSTATUS(st));
        ADD(crashes, 1);
    }
}

/* Counts (and shows the first few of) the "[ipcbyval" lines of log. */
static void count_warnings(FILE *log)
{
    char line[512];
    rewind(log);
    while (fgets(line, sizeof(line), log)) {
        if (!strncmp(line, "stress:", 7))
            fputs(line, stdout); /* the workers' own findings */
        /* A sanitizer's report (which may not end the process). */
        if (strstr(line, "WARNING: ThreadSanitizer") || strstr(line, "ERROR: AddressSanitizer") ||
            strstr(line, "runtime error:")) {
            fputs(line, stdout);
            stress_sh->crashes++;
        }
        /* Warnings; not the errors that a refused open logs once per
         * kind (natively a silent error code), nor the report of the
         * program's own second closes. */
        if (!strstr(line, "[ipcbyval") || !strstr(line, "] warn: ") ||
            strstr(line, "not open (closed already)"))
            continue;
        if (stress_sh->warnings++ < 5)
            fprintf(stderr, "  %s", line);
    }
}

static void usage(void)
{
    fprintf(stderr, "usage: stress NAME [--seconds S] [--settle S] [--native] [--no-forks] "
                    "[--no-double-closes] [--no-destroys] [--one-context]\n");
    exit(2);
}

static int parse(int argc, char **argv)
{
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
            stress_o.seconds = atof(argv[++i]);
        else if (!strcmp(argv[i], "--settle") && i + 1 < argc)
            stress_o.settle = atof(argv[++i]);
        else if (!strcmp(argv[i], "--native"))
            stress_o.native = 1;
        else if (!strcmp(argv[i], "--no-forks"))
            stress_o.forks = 0;
        else if (!strcmp(argv[i], "--no-double-closes"))
            stress_o.double_closes = 0;
        else if (!strcmp(argv[i], "--no-destroys"))
            stress_o.destroys = 0;
        else if (!strcmp(argv[i], "--one-context"))
            stress_o.one_context = 1;
        else
            usage();
    }
    return argc >= 2 ? 0 : -1;
}

int main(int argc, char **argv)
{
    if (parse(argc, argv) < 0)
        usage();
    const char *name = argv[1];
    stress_sh = mmap(NULL, sizeof(*stress_sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                     -1, 0);
    /* STRESS_LOG=file keeps what the processes wrote (debugging). */
    const char *keep = getenv("STRESS_LOG");
    FILE *log = keep ? fopen(keep, "w+") : tmpfile();
    int sv[2];
    if (stress_sh == MAP_FAILED || !log || socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv) < 0) {
        perror("stress: setup");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    pid_t exp = spawn(stress_exporter, sv[0], sv[1], fileno(log));
    pid_t imp = spawn(stress_importer, sv[1], sv[0], fileno(log));
    close(sv[0]);
    close(sv[1]);
    stress_sleep_ms(stress_o.seconds * 1000);
    STORE(stop, 1);
    reap(exp, imp);
    count_warnings(log);
    char counts[1024];
    size_t n = 0;
    int bad = 0;
#define X(f, d)                                                                              \
    n += (size_t)snprintf(counts + n, sizeof(counts) - n, "%s%llu %s", n ? ", " : "",        \
                          (unsigned long long)stress_sh->f, d);                              \
    bad |= stress_sh->f != 0;
    STRESS_COUNTERS(X)
#undef X
    printf("stress %s: %llu opens, %llu closes (%llu twice), %llu exports, %llu destroys, "
           "%llu forks, %llu left open at a destroy\n",
           name, (unsigned long long)stress_sh->opens, (unsigned long long)stress_sh->closes,
           (unsigned long long)stress_sh->double_closes, (unsigned long long)stress_sh->exports,
           (unsigned long long)stress_sh->destroys, (unsigned long long)stress_sh->forks,
           (unsigned long long)stress_sh->abandoned);
    if (stress_sh->opens < 100) {
        printf("FAIL: stress %s: only %llu opens (%s)\n", name,
               (unsigned long long)stress_sh->opens, counts);
        return 1;
    }
    printf("%s: stress %s%s%s%s\n", bad ? "FAIL" : "PASS", name, bad ? ": " : " (", counts,
           bad ? "" : ")");
    return bad;
}
