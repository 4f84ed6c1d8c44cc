/* SPDX-License-Identifier: MIT */
/*
 * fault_exporter.c - the exporter side of the fault suite: a forked child
 * that allocates, fills and exports Level Zero buffers on command, and
 * misbehaves on command (frees, reallocates at the same address, closes
 * its exported fd behind the driver's back, exits). It knows nothing of
 * ipcbyval: it is an ordinary Level Zero program.
 */
#include "test/faults/fault.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#define EXP_MAX 16384

static void die_exit(int code)
{
    _exit(code);
}

/* Fill buf (device) with seed's pattern through a host staging buffer. */
static void fill(struct zeapp *app, void *stage, void *buf, uint64_t seed)
{
    zeapp_pattern(stage, 0, FAULT_BUF, seed);
    zeapp_copy(app, buf, stage, FAULT_BUF);
}

static int export_one(struct zeapp *app, void *buf, ze_ipc_mem_handle_t *h)
{
    return zeapp_ipc_get(app, buf, h) == ZE_RESULT_SUCCESS ? 0 : -1;
}

static void exporter_loop(int sock, uid_t uid)
{
    struct zeapp app;
    static void *bufs[EXP_MAX];
    if (uid && (setresgid(uid, uid, uid) || setresuid(uid, uid, uid)))
        _exit(3);
    zeapp_init(&app, ZEAPP_ROUTE_SYMBOL, "exporter", die_exit);
    void *stage = zeapp_alloc_host(&app, FAULT_BUF);
    struct fault_cmd c;
    while (fault_recv(sock, &c, sizeof(c)) == 0) {
        struct fault_reply r = {.status = 0};
        switch (c.op) {
        case FAULT_OP_ALLOC:
        case FAULT_OP_REALLOC:
            if (c.index >= EXP_MAX) {
                r.status = -1;
                break;
            }
            if (c.op == FAULT_OP_REALLOC && bufs[c.index])
                zeapp_free(&app, bufs[c.index]);
            bufs[c.index] = zeapp_alloc_device(&app, FAULT_BUF);
            fill(&app, stage, bufs[c.index], c.seed);
            r.status = export_one(&app, bufs[c.index], &r.handle);
            r.addr = (uint64_t)(uintptr_t)bufs[c.index];
            break;
        case FAULT_OP_FREE:
            if (c.index < EXP_MAX && bufs[c.index]) {
                zeapp_free(&app, bufs[c.index]);
                bufs[c.index] = NULL;
            }
            break;
        case FAULT_OP_REUSE_FD: {
            /* Close the exported fd behind the driver's back and put
             * another memfd of the same size at that number. */
            ze_ipc_mem_handle_t h;
            if (c.index >= EXP_MAX || !bufs[c.index] || export_one(&app, bufs[c.index], &h)) {
                r.status = -1;
                break;
            }
            int fd;
            memcpy(&fd, h.data, sizeof(fd));
            int other = memfd_create("fault-other", MFD_CLOEXEC);
            r.status = other >= 0 && ftruncate(other, FAULT_BUF) == 0 && dup2(other, fd) == fd
                           ? 0
                           : -1;
            if (other >= 0)
                close(other);
            break;
        }
        case FAULT_OP_EXIT:
            _exit(0);
        }
        if (fault_send(sock, &r, sizeof(r)) != 0)
            _exit(4);
    }
    _exit(0);
}

pid_t fault_exporter_start(int *sock_p, uid_t uid)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        close(sv[0]);
        exporter_loop(sv[1], uid);
    }
    close(sv[1]);
    if (pid < 0) {
        close(sv[0]);
        return -1;
    }
    *sock_p = sv[0];
    return pid;
}

int fault_exporter_cmd(int sock, uint32_t op, uint32_t index, uint64_t seed,
                       struct fault_reply *r)
{
    struct fault_cmd c = {.op = op, .index = index, .seed = seed};
    struct fault_reply tmp;
    if (fault_send(sock, &c, sizeof(c)) != 0)
        return -1;
    if (op == FAULT_OP_EXIT)
        return 0;
    if (fault_recv(sock, r ? r : &tmp, sizeof(tmp)) != 0)
        return -1;
    return (r ? r : &tmp)->status;
}

int fault_send(int sock, const void *buf, size_t len)
{
    return send(sock, buf, len, MSG_NOSIGNAL) == (ssize_t)len ? 0 : -1;
}

int fault_recv(int sock, void *buf, size_t len)
{
    return recv(sock, buf, len, 0) == (ssize_t)len ? 0 : -1;
}
