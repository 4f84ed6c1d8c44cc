/* SPDX-License-Identifier: MIT */
/*
 * ze_newapi: the IPC entry points newer than loader 1.8.12 (spec 1.4), as a
 * program built against newer headers calls them. An exporter and a
 * fork()ed importer exchange the 64 handle bytes over a socket. The entry
 * points come from zeDriverGetExtensionFunctionAddress (--route ext: how a
 * program reaches experimental functions through a loader that does not
 * export them), as symbols of the process (--route symbol: weak
 * references, NULL when nothing defines them), or from the loader's DDI
 * tables (--route ddi: zeGetMemProcAddrTable at 1.15,
 * zeGetMemExpProcAddrTable, zeGetEventPoolProcAddrTable at 1.6, found with
 * dlsym on the loader). --case:
 *   props      exporter: zeMemGetIpcHandleWithProperties with a
 *              ze_ipc_mem_handle_type_ext_desc_t asking for the default
 *              type; importer: zeMemOpenIpcHandle, data checked
 *   fabric     the same asking for FABRIC_ACCESSIBLE: the driver's answer
 *              (ZE_RESULT_ERROR_UNSUPPORTED_FEATURE here) is printed
 *   fd         importer: zeMemGetFileDescriptorFromIpcHandleExp on the
 *              received handle must give a working local fd: written into
 *              a copy of the handle (the SCM_RIGHTS way) it opens the data,
 *              and zeMemGetIpcHandleFromFileDescriptorExp makes a handle of
 *              it that opens the data too
 *   fd-export  exporter: its own handle to its fd and back
 *              (zeMemGetFileDescriptorFromIpcHandleExp, then
 *              zeMemGetIpcHandleFromFileDescriptorExp); the importer opens
 *              the handle so made
 *   fd-pidfd   MPICH's pidfd mode: the exporter turns its handle into an
 *              fd and sends the handle and the fd's number; the importer
 *              fetches the fd with its own pidfd_open + pidfd_getfd and
 *              writes it into the handle (Intel's
 *              zeMemGetIpcHandleFromFileDescriptorExp accepts only fds of
 *              the caller's own exports)
 *   put        exporter: zeMemPutIpcHandle after the get, and
 *              zeEventPoolPutIpcHandle after an event pool's get; the
 *              importer opens both
 * Prints "OK ze_newapi ..." or "<who>: ... failed: ..." (exit 1); a route
 * that does not have an entry point prints "MISSING name" (exit 3).
 * Knows nothing about ipcbyval.
 */
#include "test/mpi/zeapp.h"

#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "handles/sys.h" /* SYS_pidfd_* where headers lack them */
#include <unistd.h>

/* ze_api.h 1.6 / 1.15, not in the 1.4 headers. */
#define STYPE_IPC_MEM_HANDLE_TYPE_EXT_DESC ((ze_structure_type_t)0x0002003D)
#define TYPE_FLAG_DEFAULT 1u
#define TYPE_FLAG_FABRIC_ACCESSIBLE 2u
struct ipc_type_desc {
    ze_structure_type_t stype;
    const void *pNext;
    uint32_t typeFlags;
};
typedef ze_result_t (*props_fn)(ze_context_handle_t, const void *, void *, ze_ipc_mem_handle_t *);
typedef ze_result_t (*fd_from_ipc_fn)(ze_context_handle_t, ze_ipc_mem_handle_t, uint64_t *);
typedef ze_result_t (*ipc_from_fd_fn)(ze_context_handle_t, uint64_t, ze_ipc_mem_handle_t *);
typedef ze_result_t (*mem_put_fn)(ze_context_handle_t, ze_ipc_mem_handle_t);
typedef ze_result_t (*pool_put_fn)(ze_context_handle_t, ze_ipc_event_pool_handle_t);

#define NEWER(X)                                                                         \
    X(zeMemGetIpcHandleWithProperties, props_fn)                                         \
    X(zeMemGetFileDescriptorFromIpcHandleExp, fd_from_ipc_fn)                            \
    X(zeMemGetIpcHandleFromFileDescriptorExp, ipc_from_fd_fn)                            \
    X(zeMemPutIpcHandle, mem_put_fn)                                                     \
    X(zeEventPoolPutIpcHandle, pool_put_fn)

/* Weak: a program linked against a newer loader, run on an older one. */
#define WEAK_DECL(name, type) extern __typeof__(*(type)0) name __attribute__((weak));
NEWER(WEAK_DECL)

static struct {
#define FIELD(name, type) type name;
    NEWER(FIELD)
} fn;

static const char *kase = "props";
static const char *route = "ext";
#define SIZE 65536

/* The loader's tables, as a program that calls through them does. */
static void resolve_ddi(void)
{
    typedef ze_result_t (*getter_t)(ze_api_version_t, void *);
    void *ldr = dlopen("libze_loader.so.1", RTLD_NOW | RTLD_LOCAL);
    getter_t mem = ldr ? (getter_t)dlsym(ldr, "zeGetMemProcAddrTable") : NULL;
    getter_t mem_exp = ldr ? (getter_t)dlsym(ldr, "zeGetMemExpProcAddrTable") : NULL;
    getter_t pool = ldr ? (getter_t)dlsym(ldr, "zeGetEventPoolProcAddrTable") : NULL;
    void *t[32];
    memset(t, 0, sizeof(t)); /* Mem 1.15: 1.4's 10, put, pitch, with properties */
    if (mem && mem(ZE_MAKE_VERSION(1, 15), t) == ZE_RESULT_SUCCESS) {
        fn.zeMemPutIpcHandle = (mem_put_fn)t[10];
        fn.zeMemGetIpcHandleWithProperties = (props_fn)t[12];
    }
    memset(t, 0, sizeof(t)); /* MemExp: from fd, to fd, two atomics entries */
    if (mem_exp && mem_exp(ZE_MAKE_VERSION(1, 6), t) == ZE_RESULT_SUCCESS) {
        fn.zeMemGetIpcHandleFromFileDescriptorExp = (ipc_from_fd_fn)t[0];
        fn.zeMemGetFileDescriptorFromIpcHandleExp = (fd_from_ipc_fn)t[1];
    }
    memset(t, 0, sizeof(t)); /* EventPool 1.6: 1.4's 5, then put */
    if (pool && pool(ZE_MAKE_VERSION(1, 6), t) == ZE_RESULT_SUCCESS)
        fn.zeEventPoolPutIpcHandle = (pool_put_fn)t[5];
}

static void resolve(struct zeapp *app)
{
    if (!strcmp(route, "ddi")) {
        resolve_ddi();
        return;
    }
    int route_ext = !strcmp(route, "ext");
#define RESOLVE(name, type)                                                              \
    if (route_ext) {                                                                     \
        void *p = NULL;                                                                  \
        if (app->DriverGetExtensionFunctionAddress(app->driver, #name, &p) ==            \
            ZE_RESULT_SUCCESS)                                                           \
            fn.name = (type)p;                                                           \
    } else {                                                                             \
        fn.name = &name;                                                                 \
    }
    NEWER(RESOLVE)
}

/* The entry point, or exit 3 naming it. */
#define NEED(app, name)                                                                  \
    ({                                                                                   \
        if (!fn.name) {                                                                  \
            printf("MISSING %s (route %s)\n", #name, route);                            \
            fflush(stdout);                                                              \
            exit(3);                                                                     \
        }                                                                                \
        fn.name;                                                                         \
    })

#define CHECK(app, what, call)                                                           \
    do {                                                                                 \
        ze_result_t r_ = (call);                                                         \
        if (r_ != ZE_RESULT_SUCCESS)                                                     \
            zeapp_fail((app), (what), r_);                                               \
    } while (0)

static void open_check(struct zeapp *app, const ze_ipc_mem_handle_t *h, void *stage,
                       const char *how)
{
    void *p = NULL;
    unsigned got, want;
    ze_result_t r = zeapp_ipc_open(app, h, &p);
    if (r != ZE_RESULT_SUCCESS) {
        char what[96];
        snprintf(what, sizeof(what), "zeMemOpenIpcHandle (%s)", how);
        zeapp_fail(app, what, r);
    }
    zeapp_copy(app, stage, p, SIZE);
    long bad = zeapp_pattern_check(stage, 0, SIZE, zeapp_seed(0, 0, 0), &got, &want);
    if (bad >= 0)
        zeapp_die(app, "%s: byte %ld is 0x%02x, expected 0x%02x", how, bad, got, want);
    CHECK(app, "zeMemCloseIpcHandle", zeapp_ipc_close(app, p));
}

static void importer(int s)
{
    struct zeapp app;
    ze_ipc_mem_handle_t h;
    ze_ipc_event_pool_handle_t ph;
    zeapp_init(&app, ZEAPP_DEFAULT_ROUTE, "importer", zeapp_exit);
    resolve(&app);
    void *stage = zeapp_alloc_host(&app, SIZE);
    if (recv(s, &h, sizeof(h), 0) != (ssize_t)sizeof(h))
        zeapp_die(&app, "the exporter went away");
    if (!strcmp(kase, "fd")) {
        uint64_t fd = UINT64_MAX;
        CHECK(&app, "zeMemGetFileDescriptorFromIpcHandleExp",
              NEED(&app, zeMemGetFileDescriptorFromIpcHandleExp)(app.context, h, &fd));
        ze_ipc_mem_handle_t mine = h, made;
        memcpy(mine.data, &fd, sizeof(fd)); /* what an SCM_RIGHTS program does */
        open_check(&app, &mine, stage, "the fd written into the handle");
        CHECK(&app, "zeMemGetIpcHandleFromFileDescriptorExp",
              NEED(&app, zeMemGetIpcHandleFromFileDescriptorExp)(app.context, fd, &made));
        open_check(&app, &made, stage, "the handle made from the fd");
        close((int)fd);
    } else if (!strcmp(kase, "fd-pidfd")) {
        uint64_t fd;
        if (recv(s, &fd, sizeof(fd), 0) != (ssize_t)sizeof(fd))
            zeapp_die(&app, "the exporter went away");
        int pidfd = (int)syscall(SYS_pidfd_open, getppid(), 0);
        int mine = pidfd < 0 ? -1 : (int)syscall(SYS_pidfd_getfd, pidfd, (int)fd, 0);
        if (mine < 0)
            zeapp_die(&app, "pidfd_getfd(pid %d, fd %d) failed: %m", (int)getppid(), (int)fd);
        uint64_t local = (uint64_t)mine;
        ze_ipc_mem_handle_t with = h;
        memcpy(with.data, &local, sizeof(local));
        open_check(&app, &with, stage, "the handle with the fetched fd");
        close(mine);
        close(pidfd);
    } else {
        open_check(&app, &h, stage, kase);
    }
    if (!strcmp(kase, "put")) {
        ze_event_pool_handle_t pool = NULL;
        if (recv(s, &ph, sizeof(ph), 0) != (ssize_t)sizeof(ph))
            zeapp_die(&app, "the exporter went away");
        CHECK(&app, "zeEventPoolOpenIpcHandle", app.EventPoolOpenIpcHandle(app.context, ph, &pool));
        CHECK(&app, "zeEventPoolCloseIpcHandle", app.EventPoolCloseIpcHandle(pool));
    }
    char ok = 1;
    (void)!write(s, &ok, 1);
    zeapp_free(&app, stage);
    zeapp_fini(&app);
}

static int exporter(int s, pid_t child)
{
    struct zeapp app;
    ze_ipc_mem_handle_t h;
    zeapp_init(&app, ZEAPP_DEFAULT_ROUTE, "exporter", zeapp_exit);
    resolve(&app);
    void *buf = zeapp_alloc_device(&app, SIZE), *stage = zeapp_alloc_host(&app, SIZE);
    zeapp_pattern(stage, 0, SIZE, zeapp_seed(0, 0, 0));
    zeapp_copy(&app, buf, stage, SIZE);
    if (!strcmp(kase, "props") || !strcmp(kase, "fabric")) {
        struct ipc_type_desc d = {STYPE_IPC_MEM_HANDLE_TYPE_EXT_DESC, NULL,
                                  !strcmp(kase, "props") ? TYPE_FLAG_DEFAULT
                                                         : TYPE_FLAG_FABRIC_ACCESSIBLE};
        ze_result_t r = NEED(&app, zeMemGetIpcHandleWithProperties)(app.context, buf, &d, &h);
        if (!strcmp(kase, "fabric")) {
            printf("ze_newapi: fabric handle: %s\n", zeapp_result_name(r));
            kill(child, SIGKILL);
            waitpid(child, NULL, 0);
            return r == ZE_RESULT_SUCCESS || r == ZE_RESULT_ERROR_UNSUPPORTED_FEATURE ? 0 : 1;
        }
        CHECK(&app, "zeMemGetIpcHandleWithProperties", r);
    } else {
        CHECK(&app, "zeMemGetIpcHandle", zeapp_ipc_get(&app, buf, &h));
    }
    if (!strcmp(kase, "fd-export")) {
        uint64_t fd = UINT64_MAX;
        CHECK(&app, "zeMemGetFileDescriptorFromIpcHandleExp",
              NEED(&app, zeMemGetFileDescriptorFromIpcHandleExp)(app.context, h, &fd));
        memset(&h, 0, sizeof(h));
        CHECK(&app, "zeMemGetIpcHandleFromFileDescriptorExp",
              NEED(&app, zeMemGetIpcHandleFromFileDescriptorExp)(app.context, fd, &h));
    }
    if (!strcmp(kase, "put"))
        CHECK(&app, "zeMemPutIpcHandle", NEED(&app, zeMemPutIpcHandle)(app.context, h));
    (void)!send(s, &h, sizeof(h), 0);
    if (!strcmp(kase, "fd-pidfd")) {
        uint64_t fd = UINT64_MAX;
        CHECK(&app, "zeMemGetFileDescriptorFromIpcHandleExp",
              NEED(&app, zeMemGetFileDescriptorFromIpcHandleExp)(app.context, h, &fd));
        (void)!send(s, &fd, sizeof(fd), 0); /* the number, as MPICH sends it */
    }
    struct zeapp_pool pool;
    if (!strcmp(kase, "put")) {
        ze_ipc_event_pool_handle_t ph;
        zeapp_pool_create(&app, &pool);
        zeapp_pool_export(&app, &pool, &ph);
        CHECK(&app, "zeEventPoolPutIpcHandle",
              NEED(&app, zeEventPoolPutIpcHandle)(app.context, ph));
        (void)!send(s, &ph, sizeof(ph), 0);
    }
    char ok = 0;
    int done = read(s, &ok, 1) == 1 && ok == 1;
    int st = 0;
    waitpid(child, &st, 0);
    if (!strcmp(kase, "put"))
        zeapp_pool_destroy(&app, &pool);
    zeapp_free(&app, buf);
    zeapp_free(&app, stage);
    zeapp_fini(&app);
    return done && WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--case") && i + 1 < argc)
            kase = argv[++i];
        else if (!strcmp(argv[i], "--route") && i + 1 < argc)
            route = argv[++i];
    }
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv) != 0)
        return 2;
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        close(sv[0]);
        importer(sv[1]);
        fflush(stdout);
        _exit(0);
    }
    close(sv[1]);
    int rc = exporter(sv[0], child);
    if (rc == 0)
        printf("OK ze_newapi %s (route %s)\n", kase, route);
    return rc;
}
