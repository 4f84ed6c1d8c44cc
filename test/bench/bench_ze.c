/* SPDX-License-Identifier: MIT */
/*
 * bench_ze: an ordinary Level Zero program (linked -lze_loader, knows
 * nothing about ipcbyval) timing IPC between a fork()ed exporter child and
 * its importer parent; scripts/bench.sh runs it natively and under
 * ipcbyval-run. Prints "key value" lines: mode (byval: the raw 64 bytes
 * open across processes; scm: they do not, so the child's fd comes by
 * SCM_RIGHTS into bytes 0-7 as zello_ipc_copy_dma_buf does: the driver's
 * own import), cold_open_us, reopen_ns, export_hit_ns,
 * passthrough_open_ns, passthrough_close_ns, socket_rt_us, socket_setup_us,
 * pidfd_us, fds_held.
 * --import-only stops after the cold opens. No timing asserts.
 */
#include "test/bench/bench_ze.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* The handle with the child's fd i passed by SCM_RIGHTS in bytes 0-7. */
static int scm_handle(int sock, const ze_ipc_mem_handle_t *in, int i, ze_ipc_mem_handle_t *out)
{
    char req[2] = {'F', (char)i};
    uint64_t fd64;
    int fd;

    xwrite(sock, req, 2);
    fd = recv_fd(sock);
    if (fd < 0)
        exit(1);
    *out = *in;
    fd64 = (uint64_t)fd;
    memcpy(out->data, &fd64, sizeof(fd64));
    return fd;
}

static void cold_opens(struct zeapp *app, int sock, ze_ipc_mem_handle_t *h, int *scm_fd,
                       int *scm_mode)
{
    double us[K];
    void *p[K];
    int base = count_fds();

    /* Try the raw bytes first: they open only under ipcbyval. */
    for (int i = 0; i < K; i++) {
        int64_t t0 = now_ns();
        ze_result_t r = zeMemOpenIpcHandle(app->context, app->device, h[i], 0, &p[i]);

        us[i] = (double)(now_ns() - t0) / 1e3;
        if (r == ZE_RESULT_SUCCESS)
            continue;
        if (i != 0)
            zeapp_fail(app, "zeMemOpenIpcHandle", r);
        *scm_mode = 1;
        break;
    }
    if (*scm_mode) {
        for (int i = 0; i < K; i++) {
            scm_fd[i] = scm_handle(sock, &h[i], i, &h[i]); /* not timed: the transfer */
            int64_t t0 = now_ns();
            ze_result_t r = zeMemOpenIpcHandle(app->context, app->device, h[i], 0, &p[i]);

            us[i] = (double)(now_ns() - t0) / 1e3;
            if (r != ZE_RESULT_SUCCESS)
                zeapp_fail(app, "zeMemOpenIpcHandle (SCM_RIGHTS)", r);
        }
    }
    for (int i = 0; i < K; i++)
        zeMemCloseIpcHandle(app->context, p[i]);
    printf("mode %s\n", *scm_mode ? "scm" : "byval");
    printf("cold_open_us %.3f\n", median(us, K));
    /* The scm mode keeps its K fds for the re-open test: not counted. */
    printf("fds_held %d\n", count_fds() - base - (*scm_mode ? K : 0));
}

static double reopen(struct zeapp *app, ze_ipc_mem_handle_t h)
{
    static double samples[BATCHES];
    void *p;

    for (int b = 0; b < BATCHES; b++) {
        int64_t t0 = now_ns();
        for (int j = 0; j < BATCH_OPS; j++) {
            if (zeMemOpenIpcHandle(app->context, app->device, h, 0, &p) != ZE_RESULT_SUCCESS)
                zeapp_die(app, "re-open failed");
            zeMemCloseIpcHandle(app->context, p);
        }
        samples[b] = (double)(now_ns() - t0) / BATCH_OPS;
    }
    return median(samples, BATCHES);
}

/* An open that is not ipcbyval's (local fd in 0-7) timed alone: what the
 * preload adds to handles it passes through. */
static double passthrough(struct zeapp *app, int sock, const ze_ipc_mem_handle_t *raw)
{
    static double samples[PT_SAMPLES];
    ze_ipc_mem_handle_t h;
    int fd = scm_handle(sock, raw, 1, &h);
    void *p;

    for (int s = 0; s < PT_SAMPLES; s++) {
        int64_t t0 = now_ns();
        ze_result_t r = zeMemOpenIpcHandle(app->context, app->device, h, 0, &p);

        samples[s] = (double)(now_ns() - t0);
        if (r != ZE_RESULT_SUCCESS)
            zeapp_fail(app, "zeMemOpenIpcHandle (pass-through)", r);
        zeMemCloseIpcHandle(app->context, p);
    }
    close(fd);
    return median(samples, PT_SAMPLES);
}

/* A call ipcbyval wraps but does not change, cheap in the driver:
 * zeMemCloseIpcHandle of a pointer that is no IPC mapping (the driver
 * looks it up and refuses it; ipcbyval looks it up in its open map and
 * passes it on). Batched like reopen, so that the median resolves a few
 * ns: what the wrapper adds to a call it passes through, enabled or with
 * IPCBYVAL_ENABLE=0, against the same binary run native. */
static double passthrough_close(struct zeapp *app)
{
    static double samples[BATCHES];
    static char not_mapped[64];

    for (int b = 0; b < BATCHES; b++) {
        int64_t t0 = now_ns();
        for (int j = 0; j < BATCH_OPS; j++)
            if (zeMemCloseIpcHandle(app->context, not_mapped) == ZE_RESULT_SUCCESS)
                zeapp_die(app, "zeMemCloseIpcHandle of no mapping succeeded");
        samples[b] = (double)(now_ns() - t0) / BATCH_OPS;
    }
    return median(samples, BATCHES);
}

static void sockets(int sock, pid_t child)
{
    double rt[K], setup[SETUP_RUNS];

    for (int i = 0; i < K; i++) {
        char req[2] = {'F', (char)i};
        int64_t t0 = now_ns();
        int fd;

        xwrite(sock, req, 2);
        fd = recv_fd(sock);
        rt[i] = (double)(now_ns() - t0) / 1e3;
        close(fd);
    }
    for (int n = 0; n < SETUP_RUNS; n++) {
        char req[2] = {'S', (char)n}, b;
        struct sockaddr_un a;
        socklen_t alen;
        int64_t t0 = now_ns();
        int s;

        xwrite(sock, req, 2);
        xread(sock, &b, 1);
        abstract_addr(&a, &alen, child, n);
        s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (s < 0 || connect(s, (struct sockaddr *)&a, alen) != 0) {
            perror("bench_ze: connect");
            exit(1);
        }
        xread(s, &b, 1); /* the child has accepted */
        setup[n] = (double)(now_ns() - t0) / 1e3;
        close(s);
    }
    printf("socket_rt_us %.3f\n", median(rt, K));
    printf("socket_setup_us %.3f\n", median(setup, SETUP_RUNS));
}

static void pidfds(pid_t child, const ze_ipc_mem_handle_t *raw)
{
    static double us[PIDFD_RUNS];
    uint64_t fd;

    memcpy(&fd, raw->data, sizeof(fd));
    for (int n = 0; n < PIDFD_RUNS; n++) {
        int64_t t0 = now_ns();
        int pfd = (int)syscall(SYS_pidfd_open, child, 0);
        int lfd = pfd < 0 ? -1 : (int)syscall(SYS_pidfd_getfd, pfd, (int)fd, 0);

        if (lfd >= 0)
            close(lfd);
        if (pfd >= 0)
            close(pfd);
        us[n] = (double)(now_ns() - t0) / 1e3;
        if (lfd < 0) {
            perror("bench_ze: pidfd_getfd");
            printf("pidfd_us nan\n");
            return;
        }
    }
    printf("pidfd_us %.3f\n", median(us, PIDFD_RUNS));
}

int main(int argc, char **argv)
{
    ze_ipc_mem_handle_t raw[K], h[K];
    int sp[2], scm_fd[K], scm_mode = 0, import_only = argc > 1 &&
                                                      !strcmp(argv[1], "--import-only");
    struct zeapp app;
    double export_hit;
    pid_t child;

    setvbuf(stdout, NULL, _IOLBF, 0);
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) != 0)
        return 1;
    child = fork();
    if (child < 0)
        return 1;
    if (child == 0) {
        close(sp[0]);
        return run_exporter(sp[1]);
    }
    close(sp[1]);
    zeapp_init(&app, ZEAPP_ROUTE_SYMBOL, "importer", die_exit);
    xread(sp[0], raw, sizeof(raw));
    xread(sp[0], &export_hit, sizeof(export_hit));
    memcpy(h, raw, sizeof(h));
    /* Before any open: the test driver finds pointers in a list, so live
     * mappings (which ipcbyval's cache keeps) would slow its side alone. */
    double pt_close = import_only ? 0 : passthrough_close(&app);
    cold_opens(&app, sp[0], h, scm_fd, &scm_mode);
    if (!import_only) {
        printf("reopen_ns %.1f\n", reopen(&app, h[0]));
        printf("export_hit_ns %.1f\n", export_hit);
        printf("passthrough_open_ns %.1f\n", passthrough(&app, sp[0], &raw[1]));
        printf("passthrough_close_ns %.1f\n", pt_close);
        sockets(sp[0], child);
        pidfds(child, &raw[0]);
    }
    if (scm_mode)
        for (int i = 0; i < K; i++)
            close(scm_fd[i]);
    xwrite(sp[0], "Q", 2);
    close(sp[0]);
    waitpid(child, NULL, 0);
    zeapp_fini(&app);
    return 0;
}
