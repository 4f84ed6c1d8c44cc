/* SPDX-License-Identifier: MIT */
/* bench_ze_peer.c - bench_ze's exporter child and the helpers both sides
 * use (see bench_ze.c). */
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

void die_exit(int code)
{
    exit(code);
}

int64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

double median(double *v, size_t n)
{
    qsort(v, n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void xwrite(int fd, const void *p, size_t n)
{
    if (write(fd, p, n) != (ssize_t)n) {
        perror("bench_ze: write");
        exit(1);
    }
}

void xread(int fd, void *p, size_t n)
{
    size_t got = 0;

    while (got < n) {
        ssize_t r = read(fd, (char *)p + got, n - got);

        if (r <= 0) {
            fprintf(stderr, "bench_ze: peer went away\n");
            exit(1);
        }
        got += (size_t)r;
    }
}

void send_fd(int sock, int fd)
{
    char cbuf[CMSG_SPACE(sizeof(int))] = {0}, b = 'f';
    struct iovec iov = {.iov_base = &b, .iov_len = 1};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
                        .msg_controllen = sizeof(cbuf)};
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);

    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof(int));
    if (sendmsg(sock, &mh, MSG_NOSIGNAL) != 1)
        exit(1);
}

int recv_fd(int sock)
{
    char cbuf[CMSG_SPACE(sizeof(int))], b;
    struct iovec iov = {.iov_base = &b, .iov_len = 1};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
                        .msg_controllen = sizeof(cbuf)};
    struct cmsghdr *c;
    int fd = -1;

    if (recvmsg(sock, &mh, MSG_CMSG_CLOEXEC) != 1)
        return -1;
    for (c = CMSG_FIRSTHDR(&mh); c != NULL; c = CMSG_NXTHDR(&mh, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
            memcpy(&fd, CMSG_DATA(c), sizeof(int));
    return fd;
}

void abstract_addr(struct sockaddr_un *a, socklen_t *len, pid_t pid, int n)
{
    memset(a, 0, sizeof(*a));
    a->sun_family = AF_UNIX;
    /* Abstract namespace: no file to clean up, as MPI shm transports do. */
    int l = snprintf(a->sun_path + 1, sizeof(a->sun_path) - 1, "ipcbyval-bench-%d-%d",
                     (int)pid, n);
    *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)l);
}

/* The child: K buffers, their handles and the export-hit time to the
 * parent, then serve fd requests until told to quit. */
int run_exporter(int sock)
{
    static double samples[BATCHES];
    ze_ipc_mem_handle_t h[K], tmp;
    struct zeapp app;
    void *bufs[K];
    double hit;
    char req[2];

    zeapp_init(&app, ZEAPP_ROUTE_SYMBOL, "exporter", die_exit);
    for (int i = 0; i < K; i++) {
        bufs[i] = zeapp_alloc_device(&app, BUF_SIZE);
        memset(&h[i], 0, sizeof(h[i]));
        if (zeMemGetIpcHandle(app.context, bufs[i], &h[i]) != ZE_RESULT_SUCCESS)
            zeapp_die(&app, "zeMemGetIpcHandle failed");
    }
    /* Re-export of a buffer already exported: what every MPI send of a
     * handle to a cached buffer costs. */
    for (int b = 0; b < BATCHES; b++) {
        int64_t t0 = now_ns();
        for (int j = 0; j < BATCH_OPS; j++)
            zeMemGetIpcHandle(app.context, bufs[0], &tmp);
        samples[b] = (double)(now_ns() - t0) / BATCH_OPS;
    }
    hit = median(samples, BATCHES);
    xwrite(sock, h, sizeof(h));
    xwrite(sock, &hit, sizeof(hit));
    for (;;) {
        xread(sock, req, 2);
        if (req[0] == 'F') { /* the fd of handle req[1], as users do it today */
            uint64_t fd;

            memcpy(&fd, h[(unsigned char)req[1]].data, sizeof(fd));
            send_fd(sock, (int)fd);
        } else if (req[0] == 'S') { /* a fresh rendezvous socket */
            struct sockaddr_un a;
            socklen_t alen;
            int ls = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0), cs;

            abstract_addr(&a, &alen, getpid(), req[1]);
            if (ls < 0 || bind(ls, (struct sockaddr *)&a, alen) != 0 || listen(ls, 1) != 0)
                exit(1);
            xwrite(sock, "r", 1);
            cs = accept(ls, NULL, NULL);
            if (cs < 0)
                exit(1);
            xwrite(cs, "a", 1);
            close(cs);
            close(ls);
        } else {
            break;
        }
    }
    for (int i = 0; i < K; i++)
        zeapp_free(&app, bufs[i]);
    zeapp_fini(&app);
    return 0;
}


int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    int n = 0;

    if (d == NULL)
        return -1;
    while ((e = readdir(d)) != NULL)
        n += e->d_name[0] != '.';
    closedir(d);
    return n - 1; /* the directory's own fd */
}

