/* SPDX-License-Identifier: MIT */
/*
 * fault_cuda.c - threads and fork on the CUDA path (the driver double),
 * run under ipcbyval.
 *
 * Each trial is a fresh process P that has loaded the driver but made no
 * wrapped call yet. In P, one thread makes the first wrapped CUDA calls
 * (so ipcbyval's lazy initialisation runs: the real entry points, the
 * caches, its identity) and keeps opening a handle that fails and is
 * logged each time, while the main thread forks children. Each child
 * makes one wrapped call and then exit()s (the exit statistics take the
 * log and statistics locks). A lock that a fork left held by a thread the
 * child does not have hangs the child: alarm() ends it, and it counts.
 *
 * With "slowlog", ipcbyval logs into a FIFO of one page drained slowly
 * by another process, so that a log line's write blocks, as on a slow
 * terminal or a full pipe: a thread holds the log for long stretches.
 *
 *   fault_cuda [trials] [slowlog]   prints "PASS: ..." or "FAIL: ..."; exit 0/1
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "handles/resolve.h"
#include "shim/cu.h"
#include "test/cudadrv/cu_pair.h"

#define FORKS_PER_TRIAL 24

/* TSan: children of a multi-threaded process are what is tested. */
const char *__tsan_default_options(void);
const char *__tsan_default_options(void)
{
    return "die_after_fork=0";
}

/* shim/cu_import.c's import_init stores its tables, then registers the
 * atfork handlers that read them; a fork runs the handlers only after it
 * found them registered. glibc orders the two with its atfork lock, which
 * TSan cannot see (libc is not instrumented): a report about that order
 * is not a race, and the race this test exists for is a hang, not a
 * report. */
const char *__tsan_default_suppressions(void);
const char *__tsan_default_suppressions(void)
{
    return "race:import_atfork_prepare\n";
}

static CUipcMemHandle forged;
static volatile int done;

/* A by-value VMM handle of this host naming a pid that cannot exist: every
 * open goes through ipcbyval's whole miss path, fails at pidfd_open, and
 * is logged. */
static int make_forged(void)
{
    byval_self_t self;
    byval_record_t rec = {0};
    if (byval_self_get(&self) != 0)
        return -1;
    byval_record_set_exporter(&rec, &self);
    rec.pid = 0x7ffffff0; /* above any pid_max */
    rec.kind = BYVAL_KIND_CU_VMM_MANIFEST;
    rec.fd = 3;
    rec.size = 4096;
    rec.alloc_id = 1;
    memset(&forged, 0, sizeof(forged));
    return byval_wire_encode(&rec, (uint8_t *)forged.reserved + BYVAL_CU_RECORD_OFF) ==
                   BYVAL_WIRE_OK
               ? 0
               : -1;
}

static void *opener(void *arg)
{
    CUdeviceptr p;
    CUdevice dev;
    CUcontext ctx;
    /* A context is per thread: without one the open stops before the path
     * that resolves and logs. */
    if (d.DeviceGet(&dev, 0) == CUDA_SUCCESS && d.DevicePrimaryCtxRetain(&ctx, dev) == CUDA_SUCCESS)
        d.CtxSetCurrent(ctx);
    for (int i = 0; i < 200; i++)
        if (d.IpcOpenMemHandle(&p, forged, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) == CUDA_SUCCESS)
            d.IpcCloseMemHandle(p);
    __atomic_store_n(&done, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* One trial in a fresh process: the number of hung children (-1: could
 * not start); *forks_p: how many it forked. */
static int trial(int *forks_p)
{
    struct opts o = {.mem = MEM_VMM, .route = ROUTE_SYMBOL, .iters = 1, .version = CUDA_VERSION,
                     .lib = "libcuda.so.1"};
    pid_t kids[FORKS_PER_TRIAL];
    int n = 0, hung = 0;
    if (setup(&o, 0) != 0)
        return -1;
    if (getenv("FAULT_CUDA_WARM")) {
        /* TSan's dlopen interceptor holds a lock of its own that a fork
         * leaves taken in the child (libsanitizer, not ipcbyval): under
         * TSan the first call, which dlopens libcuda, comes before any
         * fork, and the rest of the lazy initialisation still races. */
        CUdeviceptr p;
        d.IpcOpenMemHandle(&p, forged, 0);
    }
    pthread_t t;
    if (pthread_create(&t, NULL, opener, NULL) != 0)
        return -1;
    while (n < FORKS_PER_TRIAL && !__atomic_load_n(&done, __ATOMIC_ACQUIRE)) {
        pid_t c = fork();
        if (c == 0) {
            CUdeviceptr p;
            alarm(3);
            d.IpcOpenMemHandle(&p, forged, 0);
            exit(0); /* atexit: ipcbyval's statistics, through its log */
        }
        if (c < 0)
            break;
        kids[n++] = c;
    }
    pthread_join(t, NULL);
    for (int i = 0; i < n; i++) {
        int st;
        while (waitpid(kids[i], &st, 0) < 0 && errno == EINTR)
            ;
        hung += WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM;
    }
    *forks_p = n;
    return hung;
}

/* A FIFO of one page as ipcbyval's log, drained 512 bytes a millisecond
 * by a child process; its pid in *drain_p. */
static int slow_log(char *path, size_t len, pid_t *drain_p)
{
    snprintf(path, len, "/tmp/fault_cuda.%d.fifo", (int)getpid());
    unlink(path);
    if (mkfifo(path, 0600) != 0)
        return -1;
    int rfd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (rfd < 0)
        return -1;
    fcntl(rfd, F_SETPIPE_SZ, 4096);
    *drain_p = fork();
    if (*drain_p == 0) {
        char buf[512];
        int keep = open(path, O_WRONLY | O_CLOEXEC); /* no end of file between writers */
        for (;;) {
            if (read(rfd, buf, sizeof(buf)) < 0 && errno != EAGAIN)
                _exit(keep < 0);
            usleep(1000);
        }
    }
    close(rfd);
    setenv("IPCBYVAL_LOG_FILE", path, 1);
    return *drain_p > 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
    int trials = argc > 1 ? atoi(argv[1]) : 100, hung = 0, hung_trials = 0, errors = 0;
    int forks = 0, pfd[2];
    int slow = argc > 2 && !strcmp(argv[2], "slowlog");
    char fifo[64] = "";
    pid_t drain = -1;
    if (pipe(pfd) != 0 || (slow && slow_log(fifo, sizeof(fifo), &drain) != 0)) {
        printf("FAIL: CUDA threads+fork: setup: %s\n", strerror(errno));
        return 1;
    }
    setenv("IPCBYVAL_STATS", "1", 1); /* every child's exit logs */
    if (make_forged() != 0) {
        printf("FAIL: CUDA threads+fork: cannot build a handle\n");
        return 1;
    }
    for (int i = 0; i < trials; i++) {
        fflush(NULL);
        pid_t p = fork();
        if (p == 0) {
            int n = 0, h = trial(&n);
            (void)!write(pfd[1], &n, sizeof(n));
            _exit(h & 0xff);
        }
        int st;
        while (waitpid(p, &st, 0) < 0 && errno == EINTR)
            ;
        int n = 0;
        if (read(pfd[0], &n, sizeof(n)) == sizeof(n))
            forks += n;
        if (!WIFEXITED(st) || WEXITSTATUS(st) == 0xff) {
            errors++;
            continue;
        }
        hung += WEXITSTATUS(st);
        hung_trials += WEXITSTATUS(st) != 0;
    }
    if (slow) {
        kill(drain, SIGKILL);
        waitpid(drain, NULL, 0);
        unlink(fifo);
    }
    const char *warm = getenv("FAULT_CUDA_WARM") ? ", libcuda resolved before forking (sanitizer build)" : "";
    char det[240];
    snprintf(det, sizeof(det), "%d trials, %d forks while a thread initialises and logs%s%s: %d "
             "children hung in %d trials, %d trials failed to start", trials, forks,
             slow ? " into a slow pipe" : "", warm, hung, hung_trials, errors);
    const char *name = slow ? "CUDA first calls and a blocked log on one thread, fork on another"
                            : "CUDA first calls on one thread, fork on another";
    if (hung || errors) {
        printf("FAIL: %s: %s\n", name, det);
        return 1;
    }
    printf("PASS: %s (%s)\n", name, det);
    return 0;
}
