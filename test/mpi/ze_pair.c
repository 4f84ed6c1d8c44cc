/* SPDX-License-Identifier: MIT */
/*
 * ze_pair: an exporter and an importer process (fork) exchanging Level Zero
 * IPC handles over a socket, the way an application without MPI would:
 * the 64 handle bytes travel as data. --scm-rights additionally passes the
 * fd in bytes 0-3 with SCM_RIGHTS and the importer writes its own fd number
 * there, as the zello_ipc_copy_dma_buf sample does. --same-process opens
 * the process's own handles. Knows nothing about ipcbyval.
 */
#include "test/mpi/zeapp.h"

#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

struct opts {
    enum zeapp_route route;
    unsigned allocs;
    size_t size;
    unsigned iters;
    bool events, same_process, scm_rights, host;
};

enum msg_kind { MSG_MEM = 1, MSG_POOL, MSG_END_ITER, MSG_ACK, MSG_QUIT };

struct msg {
    uint32_t kind;
    uint32_t index; /* MSG_MEM: allocation */
    uint64_t seed;  /* MSG_MEM: its data pattern */
    unsigned char data[ZE_MAX_IPC_HANDLE_SIZE];
};

/* zello_ipc_copy_dma_buf: the local fd replaces bytes 0-3 of the handle. */
static void put_local_fd(unsigned char *data, int fd)
{
    if (fd >= 0)
        memcpy(data, &fd, sizeof(fd));
}

static int fd_in_handle(const unsigned char *data)
{
    int fd;

    memcpy(&fd, data, sizeof(fd));
    return fd;
}

static void import_verify(struct zeapp *app, const struct opts *o, const struct msg *m,
                          int local_fd, unsigned iter, void *local)
{
    ze_ipc_mem_handle_t h;
    unsigned got, want;
    void *remote;
    ze_result_t r;
    long bad;

    memcpy(h.data, m->data, sizeof(h.data));
    put_local_fd((unsigned char *)h.data, local_fd);
    r = zeapp_ipc_open(app, &h, &remote);
    if (local_fd >= 0)
        close(local_fd); /* the driver has its own reference now */
    if (r != ZE_RESULT_SUCCESS)
        zeapp_fail(app, zeapp_ipc_open_name(app), r);
    zeapp_copy(app, local, remote, o->size);
    bad = zeapp_pattern_check(local, 0, o->size, m->seed, &got, &want);
    if (bad >= 0)
        zeapp_die(app, "allocation %u iteration %u: byte %ld is 0x%02x, expected 0x%02x",
                  m->index, iter, bad, got, want);
    r = zeapp_ipc_close(app, remote);
    if (r != ZE_RESULT_SUCCESS)
        zeapp_fail(app, "zeMemCloseIpcHandle", r);
}

/* Fill allocation a for this iteration and write its handle into m. */
static void export_one(struct zeapp *app, void *buf, void *stage, size_t size, unsigned a,
                       unsigned iter, struct msg *m)
{
    ze_ipc_mem_handle_t h;
    ze_result_t r;

    memset(m, 0, sizeof(*m));
    m->kind = MSG_MEM;
    m->index = a;
    m->seed = zeapp_seed(0, (int)a, (int)iter);
    zeapp_pattern(stage, 0, size, m->seed);
    zeapp_copy(app, buf, stage, size);
    r = zeapp_ipc_get(app, buf, &h);
    if (r != ZE_RESULT_SUCCESS)
        zeapp_fail(app, zeapp_ipc_get_name(app), r);
    memcpy(m->data, h.data, sizeof(m->data));
}

static void **alloc_all(struct zeapp *app, const struct opts *o)
{
    void **bufs = calloc(o->allocs + 1, sizeof(*bufs)); /* --allocs 0: events only */

    if (bufs == NULL)
        zeapp_die(app, "out of memory");
    for (unsigned a = 0; a < o->allocs; a++)
        bufs[a] = o->host ? zeapp_alloc_host(app, o->size) : zeapp_alloc_device(app, o->size);
    return bufs;
}

static void free_all(struct zeapp *app, const struct opts *o, void **bufs)
{
    for (unsigned a = 0; a < o->allocs; a++)
        zeapp_free(app, bufs[a]);
    free(bufs);
}

static int run_same_process(const struct opts *o)
{
    struct zeapp app;
    struct zeapp_pool ps;
    struct msg m;
    void **bufs, *stage;

    zeapp_init(&app, o->route, "ze_pair", zeapp_exit);
    bufs = alloc_all(&app, o);
    stage = zeapp_alloc_host(&app, o->size);
    if (o->events)
        zeapp_pool_create(&app, &ps);
    for (unsigned iter = 0; iter < o->iters; iter++) {
        for (unsigned a = 0; a < o->allocs; a++) {
            export_one(&app, bufs[a], stage, o->size, a, iter, &m);
            memset(stage, 0, o->size);
            import_verify(&app, o, &m, -1, iter, stage);
        }
        if (o->events) {
            ze_ipc_event_pool_handle_t h;

            zeapp_pool_export(&app, &ps, &h);
            zeapp_pool_import(&app, &h, -1, "this process");
            zeapp_pool_check(&app, &ps, "this process");
        }
    }
    if (o->events)
        zeapp_pool_destroy(&app, &ps);
    zeapp_free(&app, stage);
    free_all(&app, o, bufs);
    zeapp_fini(&app);
    return 0;
}

static int run_importer(const struct opts *o, int sock)
{
    struct msg m, ack = {.kind = MSG_ACK};
    struct zeapp app;
    unsigned iter = 0;
    void *local;
    int fd;

    zeapp_init(&app, o->route, "importer", zeapp_exit);
    local = zeapp_alloc_host(&app, o->size);
    while (zeapp_recv_fd(sock, &m, sizeof(m), &fd) == 0) {
        if (m.kind == MSG_MEM) {
            import_verify(&app, o, &m, fd, iter, local);
        } else if (m.kind == MSG_POOL) {
            ze_ipc_event_pool_handle_t h;

            memcpy(h.data, m.data, sizeof(h.data));
            put_local_fd((unsigned char *)h.data, fd);
            zeapp_pool_import(&app, &h, fd, "the exporter");
        } else if (m.kind == MSG_END_ITER) {
            (void)zeapp_send_fd(sock, &ack, sizeof(ack), -1);
            iter++;
        } else if (m.kind == MSG_QUIT) {
            zeapp_free(&app, local);
            zeapp_fini(&app);
            return 0;
        }
    }
    zeapp_die(&app, "the exporter went away");
}

/* The importer's exit status, printed unless it already explained itself. */
static int reap(pid_t child)
{
    int status;

    if (waitpid(child, &status, 0) < 0)
        return 1;
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    fprintf(stderr, "exporter: importer killed by signal %d\n", WTERMSIG(status));
    return 1;
}

static int run_exporter(const struct opts *o, int sock, pid_t child)
{
    struct msg m, quit = {.kind = MSG_QUIT};
    struct zeapp_pool ps;
    struct zeapp app;
    void **bufs, *stage;
    int fd, rc = -1;

    zeapp_init(&app, o->route, "exporter", zeapp_exit);
    bufs = alloc_all(&app, o);
    stage = zeapp_alloc_host(&app, o->size);
    if (o->events)
        zeapp_pool_create(&app, &ps);
    for (unsigned iter = 0; iter < o->iters && rc < 0; iter++) {
        for (unsigned a = 0; a < o->allocs; a++) {
            export_one(&app, bufs[a], stage, o->size, a, iter, &m);
            (void)zeapp_send_fd(sock, &m, sizeof(m), o->scm_rights ? fd_in_handle(m.data) : -1);
        }
        if (o->events) {
            ze_ipc_event_pool_handle_t h;

            zeapp_pool_export(&app, &ps, &h);
            memset(&m, 0, sizeof(m));
            m.kind = MSG_POOL;
            memcpy(m.data, h.data, sizeof(m.data));
            (void)zeapp_send_fd(sock, &m, sizeof(m), o->scm_rights ? fd_in_handle(m.data) : -1);
        }
        m.kind = MSG_END_ITER;
        (void)zeapp_send_fd(sock, &m, sizeof(m), -1);
        if (zeapp_recv_fd(sock, &m, sizeof(m), &fd) != 0 || m.kind != MSG_ACK)
            rc = reap(child); /* the importer failed and said why */
        else if (o->events)
            zeapp_pool_check(&app, &ps, "the importer");
    }
    if (rc < 0)
        /* A failed send means the peer exited: its status tells the story. */
        (void)zeapp_send_fd(sock, &quit, sizeof(quit), -1);
    if (o->events)
        zeapp_pool_destroy(&app, &ps);
    zeapp_free(&app, stage);
    free_all(&app, o, bufs);
    zeapp_fini(&app);
    return rc < 0 ? reap(child) : rc;
}

static void usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s [--route symbol|dlsym|ddi|zex] [--allocs N] [--size BYTES]\n"
            "          [--iters K] [--events] [--same-process] [--scm-rights] [--host]\n",
            argv0);
    exit(2);
}

static void parse(int argc, char **argv, struct opts *o)
{
    static const struct option longopts[] = {
        {"route", required_argument, NULL, 'r'},   {"allocs", required_argument, NULL, 'a'},
        {"size", required_argument, NULL, 's'},    {"iters", required_argument, NULL, 'i'},
        {"events", no_argument, NULL, 'e'},        {"same-process", no_argument, NULL, 'p'},
        {"scm-rights", no_argument, NULL, 'c'},    {"host", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    int c, route;

    *o = (struct opts){.route = ZEAPP_DEFAULT_ROUTE, .allocs = 4, .size = 1 << 20, .iters = 2};
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case 'r':
            route = zeapp_route_parse(optarg);
            if (route < 0)
                usage(argv[0]);
            o->route = (enum zeapp_route)route;
            break;
        case 'a': o->allocs = (unsigned)zeapp_parse_ulong("--allocs", optarg); break;
        case 's': o->size = zeapp_parse_ulong("--size", optarg); break;
        case 'i': o->iters = (unsigned)zeapp_parse_ulong("--iters", optarg); break;
        case 'e': o->events = true; break;
        case 'p': o->same_process = true; break;
        case 'c': o->scm_rights = true; break;
        case 'h': o->host = true; break;
        default: usage(argv[0]);
        }
    }
    if (optind != argc || (o->allocs == 0 && !o->events) || o->size == 0 || o->iters == 0 ||
        (o->same_process && o->scm_rights))
        usage(argv[0]);
}

int main(int argc, char **argv)
{
    struct opts o;
    int sv[2], rc;
    pid_t child;

    parse(argc, argv, &o);
    if (o.same_process) {
        rc = run_same_process(&o);
    } else {
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
            perror("ze_pair: socketpair");
            return 1;
        }
        fflush(NULL);
        /* Fork before any Level Zero call: each side initialises its own. */
        child = fork();
        if (child < 0) {
            perror("ze_pair: fork");
            return 1;
        }
        if (child == 0) {
            close(sv[0]);
            return run_importer(&o, sv[1]);
        }
        close(sv[1]);
        rc = run_exporter(&o, sv[0], child);
    }
    if (rc == 0)
        printf("ze_pair: OK %u allocations x %u iterations verified (route %s, %s%s%s%s)\n",
               o.allocs, o.iters, zeapp_route_name(o.route),
               o.same_process ? "same process" : "cross-process",
               o.scm_rights ? ", scm-rights" : "", o.events ? ", events" : "",
               o.host ? ", host memory" : "");
    return rc;
}
