/* SPDX-License-Identifier: MIT */
/*
 * lifetime_ipc: what an importer holds from exporters on two GPUs, and
 * when it lets go. Run it under ipcbyval (the VMM exports need it).
 *
 * Exporters A (--dev-a, 3 chunks of 64 MiB) and B (--dev-b, 2 chunks) are
 * forked children exporting a VMM buffer with cudaIpcGetMemHandle. The
 * parent imports on --dev-imp and prints, per phase, its fds (pidfds
 * apart), the /proc/self/maps lines naming nvidia and the free memory of
 * A's and B's GPUs (an imported allocation stays allocated while any
 * process maps it):
 *   baseline  after CUDA init and a warm-up (its own VMM export/import
 *             round trip, so lazily opened driver files are there already)
 *   opened    A and B opened, every byte checked, closed (ipcbyval keeps
 *             closed mappings cached, and one pidfd per exporter)
 *   A exited  A _exit()s without freeing (like a crash) and is reaped
 *   A polled  10 ms later B's handle is opened again: ipcbyval polls the
 *             exporter pidfds on opens (at most once per ms), so A's
 *             entries go (its memory comes back, its pidfd is closed)
 *             while B's mapping stays right (checked again)
 *   closed    B's re-open closed (B alive: its mapping stays cached)
 *   B polled  B frees and exits; 10 ms later an open of B's handle must
 *             fail (exporter gone) and B's entries go
 * Checks: non-pidfd fds as at baseline in every phase, at most one pidfd
 * per live exporter, A's then B's memory released after the poll, B's data
 * intact, every fd back to baseline at the end. --no-poll skips the
 * re-open after A exits: ipcbyval's watcher thread (A's registry pipe hangs
 * up at its exit) must release A's entries with no call of the importer.
 * Prints "OK lifetime_ipc ..." (exit 0) or "FAILED lifetime_ipc: N checks".
 */
#include "gpu_common.cuh"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

struct opts {
    int dev_a, dev_b, dev_imp, no_poll;
};

struct msg {
    uint32_t magic, seed;
    cudaIpcMemHandle_t handle;
    uint64_t size;
};

#define MSG_MAGIC 0x4c494631u
#define MAX_FDS 1024

struct snap {
    int fds, pidfds, pipes, maps;
    double free_a, free_b; /* MiB */
    int fd[MAX_FDS];
    char target[MAX_FDS][64];
};

static struct snap base;
static int failures;

/* Messages are far below PIPE_BUF: one write is atomic, one read gets it. */
static int msg_io(int fd, void *m, size_t n, int writing)
{
    ssize_t r;

    do
        r = writing ? write(fd, m, n) : read(fd, m, n);
    while (r < 0 && errno == EINTR);
    return r == (ssize_t)n ? 0 : -1;
}

/* ---- exporters -------------------------------------------------------- */

static int exporter(int dev, int chunks, uint32_t seed, int crash, int wfd, int cmdfd)
{
    struct gpu_vmm v;
    struct msg m;
    char cmd;

    gpu_role = crash ? "exporter A" : "exporter B";
    RT(cudaSetDevice(dev));
    RT(cudaFree(0));
    if (gpu_drv_load(0) || gpu_vmm_alloc(&v, dev, chunks, 32) ||
        gpu_fill_range((void *)(uintptr_t)v.va, v.len, 0, seed))
        return 1;
    memset(&m, 0, sizeof(m));
    RT(cudaIpcGetMemHandle(&m.handle, (void *)(uintptr_t)v.va));
    m.magic = MSG_MAGIC;
    m.seed = seed;
    m.size = v.len;
    if (msg_io(wfd, &m, sizeof(m), 1) < 0 || read(cmdfd, &cmd, 1) < 0)
        return 1;
    if (crash)
        _exit(0); /* no cleanup at all: the driver and ipcbyval must cope */
    return gpu_vmm_free(&v);
}

/* ---- observation ------------------------------------------------------ */

static double free_mib(int dev)
{
    size_t fr = 0, total = 0;
    int cur = 0;

    cudaGetDevice(&cur);
    cudaSetDevice(dev);
    cudaMemGetInfo(&fr, &total);
    cudaSetDevice(cur);
    return (double)fr / (1 << 20);
}

/* Free memory of dev once two samples 20 ms apart agree (exit teardown). */
static double free_settled(int dev)
{
    double last = free_mib(dev), now = last;

    for (int i = 0; i < 50; i++) {
        usleep(20000);
        now = free_mib(dev);
        if (now == last)
            break;
        last = now;
    }
    return now;
}

static void take(const struct opts *o, struct snap *s, const char *phase)
{
    char path[64], line[512];
    struct dirent *e;
    DIR *d = opendir("/proc/self/fd");
    FILE *f;

    s->fds = s->pidfds = s->pipes = s->maps = 0;
    while (d && (e = readdir(d))) {
        int fd = atoi(e->d_name);
        ssize_t n;

        if (e->d_name[0] == '.' || fd == dirfd(d) || s->fds >= MAX_FDS)
            continue;
        snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
        n = readlink(path, s->target[s->fds], sizeof(s->target[0]) - 1);
        s->target[s->fds][n > 0 ? n : 0] = '\0';
        s->fd[s->fds] = fd;
        /* ipcbyval's release watcher: one epoll instance per process
         * (not counted) and one pipe per watched exporter (counted like
         * the pidfds: at most one per live exporter). */
        if (strstr(s->target[s->fds], "[eventpoll]"))
            continue;
        /* anon_inode:[pidfd] before Linux 6.9, pidfd:[ino] with pidfs */
        s->pidfds += strstr(s->target[s->fds], "pidfd") != NULL;
        s->pipes += strncmp(s->target[s->fds], "pipe:", 5) == 0;
        s->fds++;
    }
    if (d)
        closedir(d);
    f = fopen("/proc/self/maps", "r");
    while (f && fgets(line, sizeof(line), f))
        s->maps += strstr(line, "nvidia") != NULL;
    if (f)
        fclose(f);
    s->free_a = free_settled(o->dev_a);
    s->free_b = free_settled(o->dev_b);
    printf("lifetime_ipc: %-10s fds %d (pidfds %d), nvidia maps %d, free MiB: GPU %d (A) %.0f, "
           "GPU %d (B) %.0f\n", phase, s->fds, s->pidfds, s->maps, o->dev_a, s->free_a, o->dev_b,
           s->free_b);
}

static void check(int ok, const char *phase, const char *what)
{
    if (ok)
        return;
    failures++;
    printf("lifetime_ipc: FAIL at %s: %s\n", phase, what);
}

/* Non-pidfd fds as at baseline, at most `live` pidfds; lists new fds. */
static void check_fds(const struct snap *s, int live, const char *phase)
{
    char what[128];

    snprintf(what, sizeof(what), "%d non-pidfd fds, baseline %d", s->fds - s->pidfds - s->pipes,
             base.fds - base.pidfds - base.pipes);
    check(s->fds - s->pidfds - s->pipes == base.fds - base.pidfds - base.pipes, phase, what);
    snprintf(what, sizeof(what), "%d pidfds held for %d live exporter(s)", s->pidfds, live);
    check(s->pidfds <= live, phase, what);
    snprintf(what, sizeof(what), "%d watcher pipes held for %d live exporter(s)", s->pipes, live);
    check(s->pipes <= live + base.pipes, phase, what);
    for (int i = 0; i < s->fds; i++) {
        int known = 0;

        for (int j = 0; j < base.fds && !known; j++)
            known = s->fd[i] == base.fd[j] && !strcmp(s->target[i], base.target[j]);
        if (!known)
            printf("lifetime_ipc:   %s: fd %d -> %s (not at baseline)\n", phase, s->fd[i],
                   s->target[i]);
    }
}

/* Waits up to 2 s for dev's free memory to exceed `from` by 90% of bytes. */
static int released(int dev, double from, uint64_t bytes)
{
    for (int i = 0; i < 100; i++) {
        if (free_mib(dev) - from >= 0.9 * (double)bytes / (1 << 20))
            return 1;
        usleep(20000);
    }
    return 0;
}

/* ---- importer --------------------------------------------------------- */

/* Own VMM round trip on each exporter GPU, read from dev_imp. */
static int warm_up(const struct opts *o)
{
    int devs[2] = { o->dev_a, o->dev_b };

    for (int i = 0; i < (o->dev_a == o->dev_b ? 1 : 2); i++) {
        struct gpu_vmm v;
        CUmemGenericAllocationHandle h;
        CUmemAccessDesc acc;
        CUdeviceptr va;
        int fd = -1;

        RT(cudaSetDevice(devs[i]));
        if (gpu_vmm_alloc(&v, devs[i], 1, 1))
            return 1;
        DRV(drv.MemExportToShareableHandle(&fd, v.h[0], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
        RT(cudaSetDevice(o->dev_imp));
        DRV(cuMemImportFromShareableHandle(&h, (void *)(uintptr_t)fd,
                                           CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
        close(fd);
        DRV(drv.MemAddressReserve(&va, v.len, 0, 0, 0));
        DRV(drv.MemMap(va, v.len, 0, h, 0));
        memset(&acc, 0, sizeof(acc));
        acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        acc.location.id = o->dev_imp;
        acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        DRV(drv.MemSetAccess(va, v.len, &acc, 1));
        if (gpu_fill_range((void *)(uintptr_t)va, v.len, 0, 5) ||
            gpu_check_range((void *)(uintptr_t)va, v.len, 0, 5, "warm-up"))
            return 1;
        DRV(drv.MemUnmap(va, v.len));
        DRV(drv.MemAddressFree(va, v.len));
        DRV(drv.MemRelease(h));
        RT(cudaSetDevice(devs[i]));
        if (gpu_vmm_free(&v))
            return 1;
    }
    RT(cudaSetDevice(o->dev_imp));
    return 0;
}

static int open_check(const struct msg *m, const char *what, void **p)
{
    RT(cudaIpcOpenMemHandle(p, m->handle, cudaIpcMemLazyEnablePeerAccess));
    if (gpu_check_range(*p, m->size, 0, m->seed, what)) {
        failures++;
        printf("lifetime_ipc: FAIL: %s: wrong data\n", what);
    }
    return 0;
}

static int importer(const struct opts *o, const int rfd[2], const int cmdfd[2], const pid_t pid[2])
{
    static struct snap s;
    struct msg m[2];
    void *p[2];
    int status;
    cudaError_t e;

    gpu_role = "importer";
    /* Contexts on every GPU involved, so that cudaMemGetInfo works later. */
    RT(cudaSetDevice(o->dev_a));
    RT(cudaFree(0));
    RT(cudaSetDevice(o->dev_b));
    RT(cudaFree(0));
    RT(cudaSetDevice(o->dev_imp));
    RT(cudaFree(0));
    if (gpu_drv_load(0) || warm_up(o))
        return 1;
    for (int i = 0; i < 2; i++) {
        if (msg_io(rfd[i], &m[i], sizeof(m[i]), 0) < 0 || m[i].magic != MSG_MAGIC) {
            fprintf(stderr, "lifetime_ipc: exporter %c sent no handle\n", 'A' + i);
            return 1;
        }
    }
    take(o, &base, "baseline");

    for (int i = 0; i < 2; i++) {
        if (open_check(&m[i], i ? "B, first open" : "A, first open", &p[i]))
            return 1;
        RT(cudaIpcCloseMemHandle(p[i]));
    }
    take(o, &s, "opened");
    check_fds(&s, 2, "opened");
    /* Memory is compared with the last phase before each exporter exits:
     * ipcbyval's watcher may release an exited exporter's entries before
     * the next snapshot (churn_ipc measures what stays held precisely,
     * against a native run). */
    double a_before = s.free_a;

    if (write(cmdfd[0], "x", 1) != 1 || waitpid(pid[0], &status, 0) != pid[0])
        return 1;
    take(o, &s, "A exited");
    check_fds(&s, 2, "A exited");

    usleep(10000); /* --no-poll: what the importer's watcher does in 10 ms */
    if (!o->no_poll && open_check(&m[1], "B, re-open after A exited", &p[1]))
        return 1;
    check(released(o->dev_a, a_before, m[0].size), "A polled",
          "A's cache entries were not released (its memory is still allocated)");
    take(o, &s, "A polled");
    check_fds(&s, 1, "A polled");

    if (!o->no_poll) {
        RT(cudaIpcCloseMemHandle(p[1]));
        take(o, &s, "closed");
        check_fds(&s, 1, "closed");
    }

    double b_before = free_settled(o->dev_b);
    if (write(cmdfd[1], "x", 1) != 1 || waitpid(pid[1], &status, 0) != pid[1])
        return 1;
    check(WIFEXITED(status) && WEXITSTATUS(status) == 0, "B exited", "exporter B failed");
    usleep(10000);
    e = cudaIpcOpenMemHandle(&p[1], m[1].handle, cudaIpcMemLazyEnablePeerAccess);
    (void)cudaGetLastError();
    check(e != cudaSuccess, "B polled", "an open of exited exporter B's handle succeeded");
    if (e == cudaSuccess)
        cudaIpcCloseMemHandle(p[1]);
    else
        printf("lifetime_ipc: open of exited B's handle failed as it must: %s\n",
               cudaGetErrorName(e));
    check(released(o->dev_b, b_before, m[1].size), "B polled",
          "B's cache entries were not released (its memory is still allocated)");
    take(o, &s, "B polled");
    check_fds(&s, 0, "B polled");
    check(s.fds == base.fds, "B polled", "fd count differs from the baseline");
    return 0;
}

int main(int argc, char **argv)
{
    struct opts o = { 0, 0, 0, 0 };
    int data[2][2], cmd[2][2], rfd[2] = { -1, -1 }, cmdfd[2] = { -1, -1 }, rc;
    pid_t pid[2];

    gpu_prog = "lifetime_ipc";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int *dst = !strcmp(a, "--dev-a") ? &o.dev_a : !strcmp(a, "--dev-b") ? &o.dev_b
                 : !strcmp(a, "--dev-imp") ? &o.dev_imp : NULL;

        if (!strcmp(a, "--no-poll")) {
            o.no_poll = 1;
        } else if (dst && i + 1 < argc) {
            *dst = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: lifetime_ipc [--dev-a N] [--dev-b N] [--dev-imp N] "
                    "[--no-poll]\n");
            return 2;
        }
    }
    printf("lifetime_ipc: importer pid %d on GPU %d; exporter A on GPU %d, B on GPU %d%s\n",
           (int)getpid(), o.dev_imp, o.dev_a, o.dev_b, o.no_poll ? " (--no-poll)" : "");
    /* Fork both exporters before any CUDA call in this process. */
    for (int i = 0; i < 2; i++) {
        if (pipe(data[i]) < 0 || pipe(cmd[i]) < 0) {
            perror("lifetime_ipc: pipe");
            return 1;
        }
        fflush(NULL);
        pid[i] = fork();
        if (pid[i] < 0) {
            perror("lifetime_ipc: fork");
            return 1;
        }
        if (pid[i] == 0) {
            close(data[i][0]);
            close(cmd[i][1]);
            if (i == 1) { /* B must not hold A's pipe ends */
                close(rfd[0]);
                close(cmdfd[0]);
            }
            _exit(exporter(i ? o.dev_b : o.dev_a, i ? 2 : 3, i ? 22u : 11u, i == 0, data[i][1],
                           cmd[i][0]));
        }
        close(data[i][1]);
        close(cmd[i][0]);
        rfd[i] = data[i][0];
        cmdfd[i] = cmd[i][1];
    }
    rc = importer(&o, rfd, cmdfd, pid);
    for (int i = 0; i < 2; i++) {
        close(cmdfd[i]); /* an exporter still waiting exits now */
        waitpid(pid[i], NULL, 0);
    }
    if (rc == 0 && failures == 0) {
        printf("OK lifetime_ipc: fds back to baseline %d, A's and B's mappings released after "
               "their exits, B's data intact\n", base.fds);
        return 0;
    }
    printf("FAILED lifetime_ipc: %d checks%s\n", failures + rc, rc ? " (stopped early)" : "");
    return 1;
}
