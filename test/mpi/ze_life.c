/* SPDX-License-Identifier: MIT */
/*
 * ze_life: Level Zero IPC lifetimes that a cache must not change. An
 * exporter and a fork()ed importer exchange handles over a socket (the 64
 * bytes as data); knows nothing about ipcbyval: run it natively (with
 * --scm-rights, the fd passed as the zello_ipc_copy_dma_buf sample does)
 * and under ipcbyval, and compare.
 *   --case churn R   R rounds: the exporter allocates --size bytes, fills,
 *                    shares; the importer opens, checks, closes; the
 *                    exporter frees. Then the importer stays idle and the
 *                    exporter times until none of its freed memory is held
 *                    (the test driver's ledger): "release_ms", and the most
 *                    held after a free: "held_max".
 *   --case ids R     as churn, for a driver whose allocation ids repeat
 *                    (ZEDRV_ALLOC_ID=address): every round's data must be
 *                    that round's ("stale" counts the others).
 *   --case double-close  open, close, close again (INVALID_ARGUMENT from
 *                    the driver), then open again: the data must be right.
 *   --case context   open, close, destroy the context, create one (the
 *                    driver hands out the same handle value), open again.
 *   --case pool      four small allocations of one USM pool (--size 4096:
 *                    the driver pools them), three shared: the importer
 *                    opens the three at once, checks each one's data,
 *                    closes and re-opens each twice; the exporter frees
 *                    one shared and the unshared one, the importer opens
 *                    the three again (in its context and in a new one);
 *                    without --scm-rights the exporter then frees a second
 *                    one and the importer opens the three once more. Prints
 *                    one "ze_life: pool" line per result of the first two
 *                    rounds, to compare with a native run.
 * Prints "OK ze_life ..." or "FAILED ze_life: ..." (exit 1).
 */
#include "test/mpi/zeapp.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct msg {
    uint32_t round;
    uint64_t seed;
    unsigned char data[ZE_MAX_IPC_HANDLE_SIZE];
};

static const char *kase = "churn";
static unsigned rounds = 10;
static size_t size = 1 << 20;
static int scm;

/* Open m's handle (the fd from SCM_RIGHTS in bytes 0-3 when given). */
static ze_result_t open_msg(struct zeapp *app, const struct msg *m, int fd, void **p)
{
    ze_ipc_mem_handle_t h;
    memcpy(h.data, m->data, sizeof(h.data));
    if (fd >= 0) {
        uint64_t f = (uint64_t)fd;
        memcpy(h.data, &f, sizeof(f));
    }
    return zeapp_ipc_open(app, &h, p);
}

/* 1 when p holds m's pattern. */
static int data_ok(struct zeapp *app, void *p, void *stage, uint64_t seed)
{
    unsigned got, want;
    zeapp_copy(app, stage, p, size);
    return zeapp_pattern_check(stage, 0, size, seed, &got, &want) < 0;
}

static int importer(int s)
{
    struct zeapp app;
    struct msg m;
    int fd, stale = 0;
    zeapp_init(&app, ZEAPP_DEFAULT_ROUTE, "importer", zeapp_exit);
    void *stage = zeapp_alloc_host(&app, size);
    while (zeapp_recv_fd(s, &m, sizeof(m), &fd) == 0) {
        void *p = NULL;
        int rc = 0;
        ze_result_t r = open_msg(&app, &m, fd, &p);
        if (r != ZE_RESULT_SUCCESS) {
            printf("ze_life: round %u: open: %s\n", m.round, zeapp_result_name(r));
            rc = 1;
        } else if (!data_ok(&app, p, stage, m.seed)) {
            stale++;
            printf("ze_life: round %u: the data is not this round's\n", m.round);
            rc = strcmp(kase, "ids") ? 1 : 0; /* ids counts them */
        }
        if (!rc && p)
            r = zeapp_ipc_close(&app, p);
        if (!rc && !strcmp(kase, "double-close")) {
            r = zeapp_ipc_close(&app, p);
            printf("ze_life: second close: %s\n", zeapp_result_name(r));
            rc = r != ZE_RESULT_ERROR_INVALID_ARGUMENT;
            if (!rc && (open_msg(&app, &m, fd, &p) != ZE_RESULT_SUCCESS ||
                        !data_ok(&app, p, stage, m.seed))) {
                printf("ze_life: the open after a double close failed\n");
                rc = 1;
            }
            if (!rc)
                zeapp_ipc_close(&app, p);
        }
        if (!rc && !strcmp(kase, "context")) {
            ze_context_handle_t old = app.context;
            zeapp_free(&app, stage);
            zeapp_fini(&app);
            zeapp_init(&app, ZEAPP_DEFAULT_ROUTE, "importer", zeapp_exit);
            stage = zeapp_alloc_host(&app, size);
            printf("ze_life: new context %s the old handle value\n",
                   app.context == old ? "has" : "does not have");
            if (open_msg(&app, &m, fd, &p) != ZE_RESULT_SUCCESS || !data_ok(&app, p, stage, m.seed)) {
                printf("ze_life: the open in the new context failed or read wrong data\n");
                rc = 1;
            } else {
                zeapp_ipc_close(&app, p);
            }
        }
        if (fd >= 0)
            close(fd);
        if (write(s, &rc, sizeof(rc)) != sizeof(rc) || rc)
            return 1;
    }
    printf("ze_life: stale %d\n", stale);
    zeapp_free(&app, stage);
    zeapp_fini(&app);
    return strcmp(kase, "ids") || stale == 0 ? 0 : 1;
}

/* The test driver's ledger: bytes its allocators freed that importers
 * still hold (0 without that driver: then nothing is timed). */
typedef struct {
    uint64_t total, used, freed_held;
    uint32_t allocs, shared;
} ledger_t;

static uint64_t freed_held(void)
{
    static int (*stats)(ledger_t *);
    const char *drv = getenv("ZE_ENABLE_ALT_DRIVERS");
    if (!stats && drv) {
        void *h = dlopen(drv, RTLD_NOLOAD | RTLD_LAZY);
        if (h)
            stats = (int (*)(ledger_t *))dlsym(h, "zedrvMemStats");
    }
    ledger_t st = {0};
    if (!stats || stats(&st) != 0)
        return 0;
    return st.freed_held;
}

/* ---- --case pool ---------------------------------------------------------- */
#define POOL_SHARED 3

/* Open m's handle and check its data: 1 when both are right; the
 * mapping in *p (NULL when the open failed), the result in *r. */
static int pool_open_check(struct zeapp *app, const struct msg *m, int fd, void *stage,
                           void **p, ze_result_t *r)
{
    *p = NULL;
    *r = open_msg(app, m, fd, p);
    if (*r != ZE_RESULT_SUCCESS)
        *p = NULL;
    return *p && data_ok(app, *p, stage, m->seed);
}

static int pool_importer(int s)
{
    struct zeapp app;
    struct msg m[POOL_SHARED];
    int fd[POOL_SHARED], rc = 0;
    void *p[POOL_SHARED];
    ze_result_t r;
    zeapp_init(&app, ZEAPP_DEFAULT_ROUTE, "importer", zeapp_exit);
    void *stage = zeapp_alloc_host(&app, size);
    for (int phase = 1; !rc; phase++) {
        int got = 0;
        for (int i = 0; i < POOL_SHARED; i++)
            got += zeapp_recv_fd(s, &m[i], sizeof(m[i]), &fd[i]) == 0;
        if (got == 0 && phase > 1)
            break; /* the exporter is done */
        if (got != POOL_SHARED)
            return 1;
        if (phase == 1) {
            /* All open at once: each its own bytes (the same fd, other offsets). */
            for (int i = 0; i < POOL_SHARED; i++) {
                int ok = pool_open_check(&app, &m[i], fd[i], stage, &p[i], &r);
                printf("ze_life: pool: open %d: %s, data %s\n", i, zeapp_result_name(r),
                       ok ? "right" : "wrong");
                rc |= !ok;
            }
            for (int i = 0; i < POOL_SHARED; i++)
                if (p[i])
                    zeapp_ipc_close(&app, p[i]);
            /* Re-opens of closed mappings (cache hits under ipcbyval). */
            for (int k = 0; k < 2; k++) {
                for (int i = 0; i < POOL_SHARED; i++) {
                    int ok = pool_open_check(&app, &m[i], fd[i], stage, &p[i], &r);
                    printf("ze_life: pool: re-open %d: %s, data %s\n", i, zeapp_result_name(r),
                           ok ? "right" : "wrong");
                    rc |= !ok;
                    if (p[i])
                        zeapp_ipc_close(&app, p[i]);
                }
            }
        } else {
            /* Allocations 0 (phase 2), then 1 (phase 3) were freed: the
             * others live on, the freed ones as natively. Then the same in
             * a new context: misses, that fetch the exporter's fd again. */
            ze_context_desc_t cd = {.stype = ZE_STRUCTURE_TYPE_CONTEXT_DESC};
            ze_context_handle_t first = app.context, other = NULL;
            if (app.ContextCreate(app.driver, &cd, &other) != ZE_RESULT_SUCCESS)
                return 1;
            for (int k = 0; k < 2; k++) {
                app.context = k ? other : first;
                for (int i = POOL_SHARED - 1; i >= 0; i--) {
                    int ok = pool_open_check(&app, &m[i], fd[i], stage, &p[i], &r);
                    printf("ze_life: pool%s: %s%s %d: open %s, data %s\n",
                           phase == 2 ? "" : " phase 3", k ? "new context, " : "",
                           i >= phase - 1 ? "live" : "freed", i, zeapp_result_name(r),
                           ok ? "right" : p[i] ? "wrong" : "none");
                    rc |= i >= phase - 1 && !ok;
                    if (p[i])
                        zeapp_ipc_close(&app, p[i]);
                }
            }
            app.context = first;
            app.ContextDestroy(other);
        }
        for (int i = 0; i < POOL_SHARED; i++)
            if (fd[i] >= 0)
                close(fd[i]);
        if (write(s, &rc, sizeof(rc)) != sizeof(rc))
            return 1;
    }
    zeapp_free(&app, stage);
    zeapp_fini(&app);
    return rc;
}

static int pool_exporter(struct zeapp *app, int s)
{
    void *buf[POOL_SHARED + 1], *stage = zeapp_alloc_host(app, size);
    struct msg m[POOL_SHARED];
    uint64_t fd0 = 0, off0 = 0;
    ino_t ino0 = 0;
    int rc = 0, pooled = 1;
    for (int i = 0; i <= POOL_SHARED; i++) {
        buf[i] = zeapp_alloc_device(app, size);
        zeapp_pattern(stage, 0, size, zeapp_seed(0, i, 7));
        zeapp_copy(app, buf[i], stage, size);
    }
    for (int i = 0; i < POOL_SHARED; i++) {
        ze_ipc_mem_handle_t h;
        uint64_t fd, off;
        ze_result_t r = zeapp_ipc_get(app, buf[i], &h);
        if (r != ZE_RESULT_SUCCESS)
            zeapp_fail(app, zeapp_ipc_get_name(app), r);
        m[i] = (struct msg){.round = (uint32_t)i, .seed = zeapp_seed(0, i, 7)};
        memcpy(m[i].data, h.data, sizeof(m[i].data));
        memcpy(&fd, h.data, sizeof(fd));
        memcpy(&off, h.data + 8, sizeof(off));
        if (i == 0) {
            struct stat st;
            fd0 = fd;
            off0 = off;
            ino0 = fd <= INT32_MAX && fstat((int)fd, &st) == 0 ? st.st_ino : 0;
        }
        /* One fd; offsets as far apart as the pointers. */
        pooled &= fd == fd0 && off - off0 == (uint64_t)((char *)buf[i] - (char *)buf[0]);
    }
    printf("ze_life: pool: %d handles name %s\n", POOL_SHARED,
           pooled ? "one buffer at their own offsets" : "separate buffers");
    /* Phase 3 frees a second shared allocation after the unshared one:
     * natively its free closes the pool's fd (compute-runtime counts the
     * unshared one's free too), so the last handle cannot be sent by
     * SCM_RIGHTS any more: by value only. */
    for (int phase = 1; phase <= (scm ? 2 : 3) && !rc; phase++) {
        for (int i = 0; i < POOL_SHARED && !rc; i++) {
            int fd = -1;
            if (scm)
                memcpy(&fd, m[i].data, sizeof(fd));
            rc = zeapp_send_fd(s, &m[i], sizeof(m[i]), fd) != 0;
        }
        if (rc || read(s, &rc, sizeof(rc)) != sizeof(rc))
            rc = 1;
        if (phase == 1) {
            zeapp_free(app, buf[0]);
            zeapp_free(app, buf[POOL_SHARED]); /* never shared */
        }
        if (phase == 2 && !scm)
            zeapp_free(app, buf[1]);
    }
    for (int i = scm ? 1 : 2; i < POOL_SHARED; i++)
        zeapp_free(app, buf[i]);
    /* The driver's references of the pool's fd: none left, none leaked. */
    struct stat st;
    int gone = fd0 > INT32_MAX || fstat((int)fd0, &st) != 0 || st.st_ino != ino0;
    printf("ze_life: pool: the pool's exported fd after the last free: %s\n",
           gone ? "closed" : "still open");
    zeapp_free(app, stage);
    return rc || !pooled || !gone;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--case") && i + 1 < argc)
            kase = argv[++i];
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = (unsigned)zeapp_parse_ulong("--rounds", argv[++i]);
        else if (!strcmp(argv[i], "--size") && i + 1 < argc)
            size = zeapp_parse_ulong("--size", argv[++i]);
        else if (!strcmp(argv[i], "--scm-rights"))
            scm = 1;
    }
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
        return 2;
    pid_t child = fork();
    if (child == 0) {
        close(sv[0]);
        int rc = !strcmp(kase, "pool") ? pool_importer(sv[1]) : importer(sv[1]);
        if (!strcmp(kase, "pool"))
            exit(rc); /* with the preload's exit statistics: its cache hits */
        fflush(stdout); /* _exit flushes nothing */
        _exit(rc);
    }
    close(sv[1]);
    struct zeapp app;
    zeapp_init(&app, ZEAPP_DEFAULT_ROUTE, "exporter", zeapp_exit);
    void *stage = zeapp_alloc_host(&app, size);
    int failed = 0;
    uint64_t held_max = 0;
    double release_ms = -1;
    if (!strcmp(kase, "pool")) {
        failed = pool_exporter(&app, sv[0]);
        rounds = 0;
    }
    for (unsigned r = 0; r < rounds && !failed; r++) {
        uint64_t held = freed_held();
        if (held > held_max)
            held_max = held;
        struct msg m = {.round = r, .seed = zeapp_seed(0, 1, (int)r)};
        void *buf = zeapp_alloc_device(&app, size); /* dies on out of memory */
        zeapp_pattern(stage, 0, size, m.seed);
        zeapp_copy(&app, buf, stage, size);
        ze_ipc_mem_handle_t h;
        ze_result_t res = zeapp_ipc_get(&app, buf, &h);
        if (res != ZE_RESULT_SUCCESS)
            zeapp_fail(&app, zeapp_ipc_get_name(&app), res);
        memcpy(m.data, h.data, sizeof(m.data));
        int fd = -1, rc = 1;
        if (scm)
            memcpy(&fd, h.data, sizeof(fd));
        if (zeapp_send_fd(sv[0], &m, sizeof(m), fd) != 0 ||
            read(sv[0], &rc, sizeof(rc)) != sizeof(rc) || rc)
            failed = 1;
        double t0 = zeapp_now_ms();
        zeapp_free(&app, buf);
        if (r == rounds - 1 && !failed && !strcmp(kase, "churn")) {
            /* The importer is idle now: how long until its hold is gone? */
            while (freed_held() && zeapp_now_ms() - t0 < 2000)
                usleep(100);
            release_ms = zeapp_now_ms() - t0;
            held = freed_held();
            printf("ze_life: release_ms %.3f (still held %llu bytes)\n", release_ms,
                   (unsigned long long)held);
            failed = held != 0;
        }
    }
    close(sv[0]);
    int st = 0;
    waitpid(child, &st, 0);
    failed |= !WIFEXITED(st) || WEXITSTATUS(st) != 0;
    printf("ze_life: held_max %llu bytes (%.1f allocations)\n", (unsigned long long)held_max,
           (double)held_max / (double)size);
    failed |= held_max > 2 * size;
    zeapp_free(&app, stage);
    zeapp_fini(&app);
    if (failed) {
        printf("FAILED ze_life: %s\n", kase);
        return 1;
    }
    printf("OK ze_life %s rounds=%u size=%zu\n", kase, rounds, size);
    return 0;
}
