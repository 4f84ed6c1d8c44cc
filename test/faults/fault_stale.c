/* SPDX-License-Identifier: MIT */
/*
 * fault_stale.c - a same-uid bystander against an exporter's broker, after
 * the export ended (issue 22, defect 3). Run under ipcbyval:
 *
 *   fault_stale ctxdestroy|free|evict|pooldestroy|poolctx
 *
 * A forked exporter (an ordinary Level Zero program) exports one buffer
 * (or one event pool), and the bystander checks that the broker serves it
 * while it lives. Then the export ends (zeContextDestroy, under
 * ZEDRV_CONTEXT_DESTROY=all a driver that closes the context's exported
 * fds; zeMemFree; another export that takes its place in the export
 * cache, run with IPCBYVAL_EXPORT_CACHE_SIZE=1; zeEventPoolDestroy;
 * zeContextDestroy of the pool's context, the pool left undestroyed, the
 * program's bug but its export's end), and the exporter's own socketpair
 * lands on the old number. The bystander reads what sits there now in
 * /proc/PID/fd and asks the broker for that number with that inode, with
 * the old inode, and through the rescue: each must be refused, and the
 * exporter's private socket never handed out. The exporter prints
 * "exporter pid N" so that the script can read its exit statistics
 * (IPCBYVAL_STATS=1: nothing held once the export ended).
 * Prints PASS/FAIL lines; exit 1 on any failure.
 */
#include "test/faults/fault.h"
#include "test/faults/stale_peer.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

static void die_exit(int code)
{
    _exit(code);
}

/* The exporter: export, tell the number, end the export on "go", put its
 * own socketpair on the number, tell, wait for "bye". */
static void exporter(int sock, const char *path)
{
    struct zeapp app;
    zeapp_init(&app, ZEAPP_ROUTE_SYMBOL, "exporter", die_exit);
    ze_context_desc_t cd = {.stype = ZE_STRUCTURE_TYPE_CONTEXT_DESC};
    ze_context_handle_t ctx;
    if (zeContextCreate(app.driver, &cd, &ctx) != ZE_RESULT_SUCCESS)
        zeapp_die(&app, "zeContextCreate failed");
    void *buf = NULL;
    struct zeapp_pool pool;
    uint64_t fd = 0;
    if (!strncmp(path, "pool", 4)) {
        ze_ipc_event_pool_handle_t ph;
        ze_context_handle_t own = app.context;
        if (!strcmp(path, "poolctx"))
            app.context = ctx; /* the pool lives in the context that goes */
        zeapp_pool_create(&app, &pool);
        app.context = own;
        zeapp_pool_export(&app, &pool, &ph);
        memcpy(&fd, ph.data, sizeof(fd));
    } else {
        ze_device_mem_alloc_desc_t dd = {.stype = ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC};
        ze_ipc_mem_handle_t h;
        if (zeMemAllocDevice(ctx, &dd, FAULT_BUF, 0, app.device, &buf) != ZE_RESULT_SUCCESS ||
            zeMemGetIpcHandle(ctx, buf, &h) != ZE_RESULT_SUCCESS)
            zeapp_die(&app, "export failed");
        memcpy(&fd, h.data, sizeof(fd));
    }
    printf("exporter pid %d fd %llu\n", (int)getpid(), (unsigned long long)fd);
    fflush(stdout);
    uint32_t n = (uint32_t)fd;
    char go;
    if (fault_send(sock, &n, sizeof(n)) || fault_recv(sock, &go, 1))
        _exit(2);
    void *other = NULL;
    if (!strcmp(path, "ctxdestroy") || !strcmp(path, "poolctx"))
        zeContextDestroy(ctx);
    else if (!strcmp(path, "free"))
        zeMemFree(ctx, buf);
    else if (!strcmp(path, "evict")) {
        ze_device_mem_alloc_desc_t dd = {.stype = ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC};
        ze_ipc_mem_handle_t h;
        if (zeMemAllocDevice(ctx, &dd, FAULT_BUF, 0, app.device, &other) != ZE_RESULT_SUCCESS ||
            zeMemGetIpcHandle(ctx, other, &h) != ZE_RESULT_SUCCESS)
            zeapp_die(&app, "second export failed");
    } else
        zeapp_pool_destroy(&app, &pool);
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
        _exit(2);
    int placed = fcntl(n, F_GETFD) < 0; /* the driver closed it: ours now */
    if (placed && sv[0] != (int)n) {
        dup2(sv[0], (int)n);
        close(sv[0]);
    }
    char said = placed ? 1 : 0;
    if (fault_send(sock, &said, 1) || fault_recv(sock, &go, 1))
        _exit(2);
    if (other) /* the export that took the first one's place ends too */
        zeMemFree(ctx, other);
    /* ctx stays (when it was not the path): nothing else ends an export
     * before the exit statistics. */
    zeapp_fini(&app);
    exit(0); /* the exit statistics */
}

int main(int argc, char **argv)
{
    const char *path = argc > 1 ? argv[1] : "";
    if (strcmp(path, "ctxdestroy") && strcmp(path, "free") && strcmp(path, "evict") &&
        strcmp(path, "pooldestroy") && strcmp(path, "poolctx")) {
        fprintf(stderr, "usage: fault_stale ctxdestroy|free|evict|pooldestroy|poolctx\n");
        return 2;
    }
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
        return 2;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(sv[0]);
        exporter(sv[1], path);
    }
    close(sv[1]);
    uint32_t fd;
    char go = 1, placed = 0;
    int got;
    if (pid < 0 || fault_recv(sv[0], &fd, sizeof(fd)))
        return 2;
    uint32_t old_ino = stale_proc_ino(pid, fd);
    int st = stale_ask(pid, STALE_MAGIC, fd, old_ino, &got);
    stale_check(st == 0 && got >= 0, "while exported, the broker serves it (the test can tell)",
                "not served");
    if (got >= 0)
        close(got);
    if (fault_send(sv[0], &go, 1) || fault_recv(sv[0], &placed, 1))
        return 2;
    stale_after_end(pid, fd, old_ino, placed, path);
    fault_send(sv[0], &go, 1);
    int ws;
    waitpid(pid, &ws, 0);
    stale_check(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "the exporter exits cleanly", "it did not");
    return stale_failures ? 1 : 0;
}
