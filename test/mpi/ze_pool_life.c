/* SPDX-License-Identifier: MIT */
/*
 * ze_pool_life: Level Zero IPC event-pool lifetimes that a cache must not
 * change. An importer and a fork()ed exporter exchange event-pool handles
 * over a socket (the 64 bytes as data; with --scm-rights the fd passes as
 * the zello_ipc samples do). Each round the exporter creates a pool of two
 * events, signals event 1 and sends the handle; the importer opens it,
 * must read event 1 signalled, signals event 0 (which the exporter waits
 * for) and closes it. Then, by --case:
 *   destroy       the exporter destroys its pool; the importer, idle (it
 *                 calls no Level Zero function, it only reads the test
 *                 driver's count of its imported pools), times until it
 *                 holds no imported pool: "release_ms".
 *   exit          the same after the exporter's exit (last round).
 *   reopen        the importer opens the handle again: the events are
 *                 the exporter's (event 1 still signalled).
 *   context       the importer destroys its context: no imported pool
 *                 may outlive it; a new context (same handle value on
 *                 the test driver) opens the handle again.
 *   double-close  the importer closes the pool twice: the second close
 *                 returns ZE_RESULT_ERROR_INVALID_ARGUMENT (natively a
 *                 use after free: run under ipcbyval only); the handle
 *                 then opens again.
 * Knows nothing about ipcbyval. Prints "OK ze_pool_life ..." or
 * "FAILED ze_pool_life: ..." (exit 1).
 */
#include "test/mpi/zeapp.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { MSG_POOL = 1, MSG_DESTROYED, MSG_BYE, MSG_ACK };

struct msg {
    uint32_t kind, round;
    int32_t rc;
    unsigned char data[ZE_MAX_IPC_HANDLE_SIZE];
};

static const char *kase = "destroy";
static unsigned rounds = 3;
static int scm;

/* The test driver's count of this process's imported pools (-1: none). */
static int imported_pools(void)
{
    static int (*count)(int *);
    const char *drv = getenv("ZE_ENABLE_ALT_DRIVERS");
    if (!count && drv) {
        void *h = dlopen(drv, RTLD_NOLOAD | RTLD_LAZY);
        if (h)
            *(void **)&count = dlsym(h, "zedrvPoolCount");
    }
    int imported = -1;
    if (count)
        count(&imported);
    return imported;
}

static ze_event_handle_t event_new(struct zeapp *app, ze_event_pool_handle_t pool, uint32_t i)
{
    ze_event_desc_t d = {.stype = ZE_STRUCTURE_TYPE_EVENT_DESC, .index = i,
                         .signal = ZE_EVENT_SCOPE_FLAG_HOST, .wait = ZE_EVENT_SCOPE_FLAG_HOST};
    ze_event_handle_t ev = NULL;
    ze_result_t r = app->EventCreate(pool, &d, &ev);
    if (r != ZE_RESULT_SUCCESS)
        zeapp_fail(app, "zeEventCreate", r);
    return ev;
}

/* Open h, check event 1 signalled, signal event 0; the pool stays open. */
static int open_check(struct zeapp *app, const ze_ipc_event_pool_handle_t *h,
                      ze_event_pool_handle_t *pool_p)
{
    ze_result_t r = app->EventPoolOpenIpcHandle(app->context, *h, pool_p);
    if (r != ZE_RESULT_SUCCESS) {
        printf("ze_pool_life: open: %s\n", zeapp_result_name(r));
        return 1;
    }
    ze_event_handle_t ev1 = event_new(app, *pool_p, 1), ev0 = event_new(app, *pool_p, 0);
    r = app->EventQueryStatus(ev1);
    int rc = r != ZE_RESULT_SUCCESS;
    if (rc)
        printf("ze_pool_life: event 1 reads %s, expected signalled\n", zeapp_result_name(r));
    else if (app->EventHostSignal(ev0) != ZE_RESULT_SUCCESS)
        rc = 1;
    app->EventDestroy(ev0);
    app->EventDestroy(ev1);
    return rc;
}

static int close_pool(struct zeapp *app, ze_event_pool_handle_t pool)
{
    ze_result_t r = app->EventPoolCloseIpcHandle(pool);
    if (r != ZE_RESULT_SUCCESS)
        printf("ze_pool_life: close: %s\n", zeapp_result_name(r));
    return r != ZE_RESULT_SUCCESS;
}

/* The case's extra steps after the first open and close. */
static int after_close(struct zeapp *app, const ze_ipc_event_pool_handle_t *h,
                       ze_event_pool_handle_t pool)
{
    ze_event_pool_handle_t again = NULL;
    if (!strcmp(kase, "double-close")) {
        ze_result_t r = app->EventPoolCloseIpcHandle(pool);
        printf("ze_pool_life: second close: %s\n", zeapp_result_name(r));
        if (r != ZE_RESULT_ERROR_INVALID_ARGUMENT)
            return 1;
    } else if (!strcmp(kase, "context")) {
        ze_context_handle_t old = app->context;
        zeapp_fini(app);
        int left = imported_pools();
        zeapp_init(app, ZEAPP_DEFAULT_ROUTE, "importer", zeapp_exit);
        printf("ze_pool_life: %d imported pools after zeContextDestroy; the new context %s "
               "the old handle value\n",
               left, app->context == old ? "has" : "does not have");
        if (left != 0)
            return 1;
    } else if (strcmp(kase, "reopen")) {
        return 0;
    }
    return open_check(app, h, &again) || close_pool(app, again);
}

/* Idle until no imported pool is left (2 s at most): release_ms. */
static int wait_released(void)
{
    double t0 = zeapp_now_ms();
    while (imported_pools() > 0 && zeapp_now_ms() - t0 < 2000)
        usleep(100);
    int left = imported_pools();
    printf("ze_pool_life: release_ms %.3f (%d imported pools left)\n", zeapp_now_ms() - t0, left);
    return left != 0;
}

static int importer(int s, pid_t child)
{
    struct zeapp app;
    struct msg m, ack = {.kind = MSG_ACK};
    int fd, failed = 0;
    zeapp_init(&app, ZEAPP_DEFAULT_ROUTE, "importer", zeapp_exit);
    while (!failed && zeapp_recv_fd(s, &m, sizeof(m), &fd) == 0) {
        if (m.kind == MSG_POOL) {
            ze_ipc_event_pool_handle_t h;
            ze_event_pool_handle_t pool = NULL;
            memcpy(h.data, m.data, sizeof(h.data));
            if (fd >= 0) { /* the SCM_RIGHTS way: our fd into bytes 0-7 */
                uint64_t f = (uint64_t)fd;
                memcpy(h.data, &f, sizeof(f));
            }
            ack.rc = open_check(&app, &h, &pool) || close_pool(&app, pool) ||
                     after_close(&app, &h, pool);
            if (fd >= 0)
                close(fd);
            failed = ack.rc;
            zeapp_send_fd(s, &ack, sizeof(ack), -1);
        } else if (m.kind == MSG_DESTROYED) {
            failed = !strcmp(kase, "destroy") && wait_released();
            ack.rc = failed;
            zeapp_send_fd(s, &ack, sizeof(ack), -1);
        } else if (m.kind == MSG_BYE) {
            int st = 0;
            waitpid(child, &st, 0);
            child = -1;
            failed = !WIFEXITED(st) || WEXITSTATUS(st) || wait_released();
        }
    }
    if (child > 0) {
        int st = 0;
        close(s);
        waitpid(child, &st, 0);
        failed |= !WIFEXITED(st) || WEXITSTATUS(st) != 0;
    }
    zeapp_fini(&app);
    return failed;
}

static int exporter(int s)
{
    struct zeapp app;
    struct msg m;
    int fd;
    zeapp_init(&app, ZEAPP_DEFAULT_ROUTE, "exporter", zeapp_exit);
    for (unsigned r = 0; r < rounds; r++) {
        struct zeapp_pool p;
        ze_ipc_event_pool_handle_t h;
        zeapp_pool_create(&app, &p);
        zeapp_pool_export(&app, &p, &h);
        memset(&m, 0, sizeof(m));
        m.kind = MSG_POOL;
        m.round = r;
        memcpy(m.data, h.data, sizeof(m.data));
        int hfd = -1;
        if (scm)
            memcpy(&hfd, h.data, sizeof(hfd));
        if (zeapp_send_fd(s, &m, sizeof(m), hfd) != 0 ||
            zeapp_recv_fd(s, &m, sizeof(m), &fd) != 0 || m.rc)
            return 1;
        zeapp_pool_check(&app, &p, "the importer");
        if (r == rounds - 1 && !strcmp(kase, "exit")) {
            m.kind = MSG_BYE;
            zeapp_send_fd(s, &m, sizeof(m), -1);
            return 0; /* exit with the pool alive: the process takes it */
        }
        zeapp_pool_destroy(&app, &p);
        m.kind = MSG_DESTROYED;
        if (zeapp_send_fd(s, &m, sizeof(m), -1) != 0 ||
            zeapp_recv_fd(s, &m, sizeof(m), &fd) != 0 || m.rc)
            return 1;
    }
    zeapp_fini(&app);
    return 0;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--case") && i + 1 < argc)
            kase = argv[++i];
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = (unsigned)zeapp_parse_ulong("--rounds", argv[++i]);
        else if (!strcmp(argv[i], "--scm-rights"))
            scm = 1;
    }
    int sv[2];
    if (rounds == 0 || socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv) != 0)
        return 2;
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        close(sv[0]);
        int rc = exporter(sv[1]);
        fflush(stdout);
        _exit(rc);
    }
    close(sv[1]);
    int failed = importer(sv[0], child);
    if (failed) {
        printf("FAILED ze_pool_life: %s\n", kase);
        return 1;
    }
    printf("OK ze_pool_life %s rounds=%u\n", kase, rounds);
    return 0;
}
