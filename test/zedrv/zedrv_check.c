/* SPDX-License-Identifier: MIT */
/*
 * zedrv_check: checks that the Level Zero test driver behaves like Intel's
 * compute-runtime (or, where that is a choice, like the spec allows) in
 * what IPC clients and ipcbyval rely on, through the real loader
 * (ZE_ENABLE_ALT_DRIVERS names the driver). Each scenario runs in a child
 * forked before any Level Zero call, with its own environment:
 *   default   context handle reuse, zeContextDestroy releasing the
 *             context's IPC mappings, close/free of what is and is not
 *             a mapping, queue groups, alignment, appends to an executed
 *             list, memory properties
 *   address   ZEDRV_ALLOC_ID=address: ids repeat after free + allocation
 *   keep/all  ZEDRV_CONTEXT_DESTROY=keep (compute-runtime) and all
 *   churn     ZEDRV_TOTAL_MEM=32M and a ledger: an exporter and an
 *             importer child (opaque layout, the driver imports with
 *             pidfd_getfd); this process watches with zedrvMemStats
 *   fork      a fork while another thread is inside the driver: the
 *             child's own calls work (the fault suite relies on it)
 * Ends with "zedrv_check: N passed, N failed"; exit 0 when none failed.
 */
#include <level_zero/ze_api.h>

#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test/devmem/devmem.h"

#define MiB ((size_t)1 << 20)

static int passed, failed;

#define CHECK(cond)                                                           \
    do {                                                                      \
        if (cond) {                                                           \
            passed++;                                                         \
        } else {                                                              \
            failed++;                                                         \
            fprintf(stderr, "FAIL %s:%d [pid %d]: %s\n", __FILE__, __LINE__,  \
                    (int)getpid(), #cond);                                    \
        }                                                                     \
    } while (0)

static ze_driver_handle_t drv;
static ze_device_handle_t dev;

static void init(void)
{
    uint32_t n = 1;

    CHECK(zeInit(0) == ZE_RESULT_SUCCESS);
    CHECK(zeDriverGet(&n, &drv) == ZE_RESULT_SUCCESS && n == 1);
    n = 1;
    CHECK(zeDeviceGet(drv, &n, &dev) == ZE_RESULT_SUCCESS && n == 1);
}

static ze_context_handle_t ctx_new(void)
{
    ze_context_desc_t d = {.stype = ZE_STRUCTURE_TYPE_CONTEXT_DESC};
    ze_context_handle_t c = NULL;

    CHECK(zeContextCreate(drv, &d, &c) == ZE_RESULT_SUCCESS);
    return c;
}

static void *dev_alloc(ze_context_handle_t c, size_t size, size_t align)
{
    ze_device_mem_alloc_desc_t d = {.stype = ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC};
    void *p = NULL;

    if (zeMemAllocDevice(c, &d, size, align, dev, &p) != ZE_RESULT_SUCCESS)
        return NULL;
    return p;
}

static ze_memory_type_t mem_type(ze_context_handle_t c, const void *p, uint64_t *id)
{
    ze_memory_allocation_properties_t props = {.stype = ZE_STRUCTURE_TYPE_MEMORY_ALLOCATION_PROPERTIES};

    if (zeMemGetAllocProperties(c, p, &props, NULL) != ZE_RESULT_SUCCESS)
        return (ze_memory_type_t)-1;
    if (id)
        *id = props.id;
    return props.type;
}

/* Same-process import: the fd in the classic handle is valid here. */
static void *ipc_open(ze_context_handle_t exp, ze_context_handle_t imp, void *p)
{
    ze_ipc_mem_handle_t h;
    void *m = NULL;

    memset(&h, 0, sizeof(h));
    if (zeMemGetIpcHandle(exp, p, &h) != ZE_RESULT_SUCCESS ||
        zeMemOpenIpcHandle(imp, dev, h, 0, &m) != ZE_RESULT_SUCCESS)
        return NULL;
    return m;
}

static void check_contexts(void)
{
    ze_context_handle_t a = ctx_new(), b, c, d, e, f, g;
    char *p, *m, *x;
    char local[16];

    /* The last destroyed handle value comes back first. */
    CHECK(zeContextDestroy(a) == ZE_RESULT_SUCCESS);
    b = ctx_new();
    CHECK(b == a);
    c = ctx_new();
    d = ctx_new();
    CHECK(zeContextDestroy(c) == ZE_RESULT_SUCCESS && zeContextDestroy(d) == ZE_RESULT_SUCCESS);
    e = ctx_new();
    f = ctx_new();
    CHECK(e == d && f == c);
    CHECK(zeContextDestroy(e) == ZE_RESULT_SUCCESS);
    CHECK(zeContextDestroy(e) == ZE_RESULT_ERROR_INVALID_NULL_HANDLE);
    /* zeContextDestroy releases the context's IPC mappings, not the
     * exporter's memory. */
    p = dev_alloc(b, 3 * MiB, 0);
    CHECK(p != NULL);
    if (!p)
        return;
    memset(p, 'p', 3 * MiB);
    m = ipc_open(b, f, p);
    CHECK(m != NULL && m != p && m[3 * MiB - 1] == 'p');
    CHECK(mem_type(b, m, NULL) == ZE_MEMORY_TYPE_DEVICE);
    CHECK(zeContextDestroy(f) == ZE_RESULT_SUCCESS);
    CHECK(mem_type(b, m, NULL) == ZE_MEMORY_TYPE_UNKNOWN);
    CHECK(zeMemCloseIpcHandle(b, m) == ZE_RESULT_ERROR_INVALID_ARGUMENT);
    CHECK(zeMemCloseIpcHandle(f, m) == ZE_RESULT_ERROR_INVALID_NULL_HANDLE);
    CHECK(mem_type(b, p, NULL) == ZE_MEMORY_TYPE_DEVICE && p[0] == 'p');
    g = ctx_new();
    CHECK(g == f);
    /* Close is free (Context::closeIpcMemHandle): a second close, or one
     * of a pointer no allocation contains, is INVALID_ARGUMENT and changes
     * nothing; an interior pointer releases its mapping; so does zeMemFree. */
    m = ipc_open(b, g, p);
    CHECK(m != NULL);
    CHECK(zeMemCloseIpcHandle(g, local) == ZE_RESULT_ERROR_INVALID_ARGUMENT);
    CHECK(m && m[42] == 'p');
    CHECK(zeMemCloseIpcHandle(g, m) == ZE_RESULT_SUCCESS);
    CHECK(zeMemCloseIpcHandle(g, m) == ZE_RESULT_ERROR_INVALID_ARGUMENT);
    CHECK(mem_type(b, p, NULL) == ZE_MEMORY_TYPE_DEVICE);
    m = ipc_open(b, g, p);
    CHECK(m != NULL && zeMemCloseIpcHandle(g, m + 4097) == ZE_RESULT_SUCCESS);
    CHECK(mem_type(g, m, NULL) == ZE_MEMORY_TYPE_UNKNOWN);
    m = ipc_open(b, g, p);
    CHECK(m != NULL && zeMemFree(g, m) == ZE_RESULT_SUCCESS);
    CHECK(mem_type(g, m, NULL) == ZE_MEMORY_TYPE_UNKNOWN);
    x = dev_alloc(g, 4 * MiB, 0); /* above the USM pools' sizes */
    CHECK(x != NULL && zeMemCloseIpcHandle(g, x) == ZE_RESULT_SUCCESS);
    CHECK(mem_type(g, x, NULL) == ZE_MEMORY_TYPE_UNKNOWN);
    CHECK(zeMemFree(b, p) == ZE_RESULT_SUCCESS);
    CHECK(zeMemFree(b, p) == ZE_RESULT_ERROR_INVALID_ARGUMENT);
    CHECK(zeContextDestroy(g) == ZE_RESULT_SUCCESS && zeContextDestroy(b) == ZE_RESULT_SUCCESS);
}

/* The counter ids of compute-runtime: never reused (allocations too big
 * for a USM pool: pooled ones report their pool's). */
static void check_counter_ids(ze_context_handle_t c)
{
    uint64_t id1 = 0, id2 = 0;
    void *p = dev_alloc(c, 4 * MiB, 0), *q;

    CHECK(p && mem_type(c, p, &id1) == ZE_MEMORY_TYPE_DEVICE && id1 != 0);
    CHECK(zeMemFree(c, p) == ZE_RESULT_SUCCESS);
    q = dev_alloc(c, 4 * MiB, 0);
    CHECK(q && mem_type(c, q, &id2) == ZE_MEMORY_TYPE_DEVICE && id2 > id1);
    CHECK(zeMemFree(c, q) == ZE_RESULT_SUCCESS);
}

static void check_fidelity(ze_context_handle_t c)
{
    ze_command_queue_group_properties_t groups[3];
    ze_command_queue_desc_t qd = {.stype = ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC};
    ze_command_list_desc_t ld = {.stype = ZE_STRUCTURE_TYPE_COMMAND_LIST_DESC};
    ze_device_memory_properties_t mp = {.stype = ZE_STRUCTURE_TYPE_DEVICE_MEMORY_PROPERTIES};
    ze_relaxed_allocation_limits_exp_desc_t relaxed = {
        .stype = ZE_STRUCTURE_TYPE_RELAXED_ALLOCATION_LIMITS_EXP_DESC,
        .flags = ZE_RELAXED_ALLOCATION_LIMITS_EXP_FLAG_MAX_SIZE};
    ze_device_mem_alloc_desc_t dd = {.stype = ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC};
    ze_command_queue_handle_t q = NULL;
    ze_command_list_handle_t l = NULL;
    size_t page = (size_t)sysconf(_SC_PAGESIZE), a = (131079 + page - 1) / page * page;
    uint32_t n = 0, pat = 0x01020304;
    char *src, *dst, *big = NULL;

    /* Queue groups: the loader answers UNSUPPORTED_FEATURE for a NULL slot. */
    memset(groups, 0, sizeof(groups));
    CHECK(zeDeviceGetCommandQueueGroupProperties(dev, &n, NULL) == ZE_RESULT_SUCCESS && n == 2);
    n = 3;
    CHECK(zeDeviceGetCommandQueueGroupProperties(dev, &n, groups) == ZE_RESULT_SUCCESS && n == 2);
    CHECK((groups[0].flags & ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COMPUTE) &&
          (groups[0].flags & ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COPY) &&
          groups[1].flags == ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COPY &&
          groups[0].numQueues == 1 && groups[1].numQueues == 1);
    qd.ordinal = 2;
    CHECK(zeCommandQueueCreate(c, dev, &qd, &q) == ZE_RESULT_ERROR_INVALID_ARGUMENT);
    qd.ordinal = 0;
    CHECK(zeCommandQueueCreate(c, dev, &qd, &q) == ZE_RESULT_SUCCESS);
    /* Alignment is not checked (Context::allocDeviceMem); a page multiple
     * of it is honoured. Sizes are: 0 and > maxMemAllocSize are refused. */
    src = dev_alloc(c, 131079, 131079);
    CHECK(src != NULL && (uintptr_t)src % a == 0);
    CHECK(zeMemAllocDevice(c, &dd, 0, 0, dev, (void **)&dst) == ZE_RESULT_ERROR_UNSUPPORTED_SIZE);
    CHECK(zeMemAllocDevice(c, &dd, ((size_t)4 << 30) + 1, 0, dev, (void **)&big) ==
          ZE_RESULT_ERROR_UNSUPPORTED_SIZE);
    dd.pNext = &relaxed;
    CHECK(zeMemAllocDevice(c, &dd, ((size_t)4 << 30) + 1, 0, dev, (void **)&big) ==
          ZE_RESULT_SUCCESS && zeMemFree(c, big) == ZE_RESULT_SUCCESS);
    dst = dev_alloc(c, 131079, 0);
    CHECK(dst != NULL);
    /* An append to a closed, executed list is accepted and runs next time. */
    CHECK(zeCommandListCreate(c, dev, &ld, &l) == ZE_RESULT_SUCCESS);
    if (src && dst && q && l) {
        CHECK(zeCommandListAppendMemoryFill(l, src, &pat, sizeof(pat), 131076, NULL, 0, NULL) ==
              ZE_RESULT_SUCCESS);
        CHECK(zeCommandListClose(l) == ZE_RESULT_SUCCESS);
        CHECK(zeCommandQueueExecuteCommandLists(q, 1, &l, NULL) == ZE_RESULT_SUCCESS);
        CHECK(zeCommandQueueSynchronize(q, UINT64_MAX) == ZE_RESULT_SUCCESS);
        CHECK(zeCommandListAppendMemoryCopy(l, dst, src, 131076, NULL, 0, NULL) ==
              ZE_RESULT_SUCCESS);
        CHECK(zeCommandListClose(l) == ZE_RESULT_SUCCESS);
        CHECK(zeCommandQueueExecuteCommandLists(q, 1, &l, NULL) == ZE_RESULT_SUCCESS);
        CHECK(zeCommandQueueSynchronize(q, UINT64_MAX) == ZE_RESULT_SUCCESS);
        CHECK(memcmp(dst + 131072, &pat, 4) == 0);
    }
    if (l)
        zeCommandListDestroy(l);
    /* A copy engine's list refuses fill patterns above 4 bytes. */
    ld.commandQueueGroupOrdinal = 1;
    if (src && zeCommandListCreate(c, dev, &ld, &l) == ZE_RESULT_SUCCESS) {
        uint64_t pat8 = 0;

        CHECK(zeCommandListAppendMemoryFill(l, src, &pat8, 8, 64, NULL, 0, NULL) ==
              ZE_RESULT_ERROR_INVALID_SIZE);
        CHECK(zeCommandListAppendMemoryFill(l, src, &pat, 4, 64, NULL, 0, NULL) ==
              ZE_RESULT_SUCCESS);
        zeCommandListDestroy(l);
    } else {
        CHECK(!"copy-engine command list");
    }
    ld.commandQueueGroupOrdinal = 2;
    CHECK(zeCommandListCreate(c, dev, &ld, &l) == ZE_RESULT_ERROR_INVALID_ARGUMENT);
    if (q)
        zeCommandQueueDestroy(q);
    zeMemFree(c, src);
    zeMemFree(c, dst);
    n = 0;
    CHECK(zeDeviceGetMemoryProperties(dev, &n, NULL) == ZE_RESULT_SUCCESS && n == 1);
    CHECK(zeDeviceGetMemoryProperties(dev, &n, &mp) == ZE_RESULT_SUCCESS &&
          mp.totalSize == (uint64_t)128 << 30);
}

static void scenario_default(void)
{
    ze_context_handle_t c;

    init();
    check_contexts();
    c = ctx_new();
    check_counter_ids(c);
    check_fidelity(c);
    CHECK(zeContextDestroy(c) == ZE_RESULT_SUCCESS);
}

/* ZEDRV_ALLOC_ID=address: the id is the address, and a free + allocation
 * of the same size lands at the same address, so the id repeats. */
static void scenario_address(void)
{
    ze_context_handle_t c, d;
    uint64_t id1 = 0, id2 = 0, idm = 0;
    void *p, *q, *m;

    init();
    c = ctx_new();
    d = ctx_new();
    p = dev_alloc(c, 4 * MiB, 0);
    CHECK(p && mem_type(c, p, &id1) == ZE_MEMORY_TYPE_DEVICE && id1 == (uint64_t)(uintptr_t)p);
    m = ipc_open(c, d, p);
    CHECK(m && mem_type(d, m, &idm) == ZE_MEMORY_TYPE_DEVICE && idm == (uint64_t)(uintptr_t)m);
    CHECK(zeMemCloseIpcHandle(d, m) == ZE_RESULT_SUCCESS);
    CHECK(zeMemFree(c, p) == ZE_RESULT_SUCCESS);
    q = dev_alloc(c, 4 * MiB, 0);
    CHECK(q == p && mem_type(c, q, &id2) == ZE_MEMORY_TYPE_DEVICE && id2 == id1);
    zeMemFree(c, q);
    zeContextDestroy(d);
    zeContextDestroy(c);
}

/* keep: compute-runtime's Context::destroy releases nothing; all: the
 * context's own allocations go too. */
static void scenario_destroy(int keep)
{
    ze_context_handle_t c, d;
    char *p, *m, *own;

    init();
    c = ctx_new();
    d = ctx_new();
    p = dev_alloc(c, 4 * MiB, 0);
    own = dev_alloc(d, 4 * MiB, 0);
    m = p ? ipc_open(c, d, p) : NULL;
    CHECK(p && own && m);
    CHECK(zeContextDestroy(d) == ZE_RESULT_SUCCESS);
    if (keep) {
        CHECK(mem_type(c, m, NULL) == ZE_MEMORY_TYPE_DEVICE);
        CHECK(mem_type(c, own, NULL) == ZE_MEMORY_TYPE_DEVICE);
        CHECK(zeMemCloseIpcHandle(c, m) == ZE_RESULT_SUCCESS);
        CHECK(zeMemFree(c, own) == ZE_RESULT_SUCCESS);
    } else {
        CHECK(mem_type(c, m, NULL) == ZE_MEMORY_TYPE_UNKNOWN);
        CHECK(mem_type(c, own, NULL) == ZE_MEMORY_TYPE_UNKNOWN);
    }
    CHECK(mem_type(c, p, NULL) == ZE_MEMORY_TYPE_DEVICE);
    zeMemFree(c, p);
    zeContextDestroy(c);
}

static void scenario_keep(void)
{
    scenario_destroy(1);
}

static void scenario_all(void)
{
    scenario_destroy(0);
}

/*
 * Churn on a 32 MiB device: the exporter allocates 12 MiB a round, the
 * importer opens (opaque layout: the driver's own pidfd_getfd) and closes
 * (hold: keeps) it, the exporter frees. Closing, 5 rounds fit; holding,
 * the third allocation is out of device memory and this third process
 * sees 24 MiB freed but held; the importer's exit gives it back.
 */
#define CHURN_SIZE (12 * MiB)
#define CHURN_ROUNDS 5

struct churn_msg {
    ze_result_t rc;
    ze_ipc_mem_handle_t h;
};

static void churn_exporter(int wfd, int rfd)
{
    struct churn_msg msg;
    ze_context_handle_t c;
    char k;

    init();
    c = ctx_new();
    for (int i = 0; i < CHURN_ROUNDS; i++) {
        ze_device_mem_alloc_desc_t d = {.stype = ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC};
        void *p = NULL;

        memset(&msg, 0, sizeof(msg));
        msg.rc = zeMemAllocDevice(c, &d, CHURN_SIZE, 0, dev, &p);
        if (msg.rc == ZE_RESULT_SUCCESS) {
            memset(p, 'a' + i, CHURN_SIZE);
            if (zeMemGetIpcHandle(c, p, &msg.h) != ZE_RESULT_SUCCESS)
                _exit(1);
        }
        if (write(wfd, &msg, sizeof(msg)) != (ssize_t)sizeof(msg))
            _exit(1);
        if (msg.rc != ZE_RESULT_SUCCESS)
            break;
        if (read(rfd, &k, 1) != 1 || zeMemFree(c, p) != ZE_RESULT_SUCCESS ||
            write(wfd, "f", 1) != 1) /* freed */
            _exit(1);
    }
    read(rfd, &k, 1); /* until the parent has looked */
    _exit(0);
}

static void churn_importer(int hold, int rfd, int wfd)
{
    struct churn_msg msg;
    ze_context_handle_t c;
    char *m, k;

    init();
    c = ctx_new();
    for (int i = 0; i < CHURN_ROUNDS; i++) {
        if (read(rfd, &msg, sizeof(msg)) != (ssize_t)sizeof(msg))
            _exit(1);
        if (msg.rc != ZE_RESULT_SUCCESS)
            break;
        m = NULL;
        if (zeMemOpenIpcHandle(c, dev, msg.h, 0, (void **)&m) != ZE_RESULT_SUCCESS ||
            m[CHURN_SIZE - 1] != 'a' + i || (!hold && zeMemCloseIpcHandle(c, m)))
            _exit(2);
        if (write(wfd, "k", 1) != 1)
            _exit(1);
    }
    read(rfd, &k, 1);
    _exit(0);
}

static void scenario_churn(int hold)
{
    int (*stats)(struct devmem_stats *) = NULL;
    int e2p[2], p2e[2], i2p[2], p2i[2], rounds = 0, st_e = -1, st_i = -1;
    const char *lib = getenv("ZE_ENABLE_ALT_DRIVERS");
    ze_result_t last = ZE_RESULT_SUCCESS;
    struct devmem_stats st;
    struct churn_msg msg;
    void *h = lib ? dlopen(lib, RTLD_NOW | RTLD_LOCAL) : NULL;
    pid_t ex, im;
    char k;

    if (h)
        *(void **)&stats = dlsym(h, "zedrvMemStats");
    CHECK(stats != NULL);
    if (!stats || pipe(e2p) || pipe(p2e) || pipe(i2p) || pipe(p2i))
        return;
    if ((ex = fork()) == 0)
        churn_exporter(e2p[1], p2e[0]);
    if ((im = fork()) == 0)
        churn_importer(hold, p2i[0], i2p[1]);
    for (int i = 0; i < CHURN_ROUNDS; i++) {
        if (read(e2p[0], &msg, sizeof(msg)) != (ssize_t)sizeof(msg))
            break;
        last = msg.rc;
        if (write(p2i[1], &msg, sizeof(msg)) != (ssize_t)sizeof(msg) || msg.rc != 0)
            break;
        if (read(i2p[0], &k, 1) != 1 || write(p2e[1], "k", 1) != 1 || read(e2p[0], &k, 1) != 1)
            break;
        rounds++;
    }
    CHECK(stats(&st) == 0);
    if (hold) {
        CHECK(rounds == 2 && last == ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY);
        CHECK(st.freed_held == 2 * CHURN_SIZE && st.used == 2 * CHURN_SIZE);
    } else {
        CHECK(rounds == CHURN_ROUNDS && last == ZE_RESULT_SUCCESS);
        CHECK(st.used == 0 && st.freed_held == 0);
    }
    CHECK(write(p2i[1], "x", 1) == 1 && write(p2e[1], "x", 1) == 1);
    CHECK(waitpid(ex, &st_e, 0) == ex && WIFEXITED(st_e) && WEXITSTATUS(st_e) == 0);
    CHECK(waitpid(im, &st_i, 0) == im && WIFEXITED(st_i) && WEXITSTATUS(st_i) == 0);
    /* Both exited (the importer holding its mappings): nothing is held. */
    CHECK(stats(&st) == 0 && st.used == 0 && st.allocs == 0 && st.total == 32 * MiB);
    for (int i = 0; i < 2; i++) {
        close(e2p[i]);
        close(p2e[i]);
        close(i2p[i]);
        close(p2i[i]);
    }
}

static void scenario_churn_close(void)
{
    scenario_churn(0);
}

static void scenario_churn_hold(void)
{
    scenario_churn(1);
}

/* Memory limits in one process: device and shared memory count, host not. */
static void scenario_limit(void)
{
    ze_host_mem_alloc_desc_t hd = {.stype = ZE_STRUCTURE_TYPE_HOST_MEM_ALLOC_DESC};
    ze_device_mem_alloc_desc_t dd = {.stype = ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC};
    ze_context_handle_t c;
    void *a, *b = NULL, *s = NULL, *hp = NULL;

    init();
    c = ctx_new();
    a = dev_alloc(c, 16 * MiB, 0);
    CHECK(a != NULL);
    CHECK(zeMemAllocShared(c, &dd, &hd, 8 * MiB, 0, dev, &s) == ZE_RESULT_SUCCESS);
    CHECK(zeMemAllocDevice(c, &dd, 8 * MiB + 1, 0, dev, &b) ==
          ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY);
    CHECK(zeMemAllocHost(c, &hd, 64 * MiB, 0, &hp) == ZE_RESULT_SUCCESS);
    CHECK(zeMemAllocDevice(c, &dd, 8 * MiB, 0, dev, &b) == ZE_RESULT_SUCCESS);
    zeMemFree(c, a);
    zeMemFree(c, b);
    zeMemFree(c, s);
    zeMemFree(c, hp);
    zeContextDestroy(c);
}

/* ---- fork while another thread is inside the driver ----------------------
 * The fault suite's threads case forks while 16 threads open handles and
 * then opens one in the child. A fork that lands while one of them holds
 * the driver's lock must not leave the child's copy locked. To make that
 * moment certain, not lucky: with ZEDRV_DEBUG=1 a thread's
 * zeMemGetIpcHandle logs under the driver's lock into a full pipe, so it
 * blocks there; a drainer empties the pipe 200 ms later. The child makes
 * one driver call (alarm: a hang ends as SIGALRM). */

static int fork_pipe[2];
static ze_context_handle_t fork_ctx;
static void *fork_mem;
static pid_t fork_tid;
static int fork_got = -1, fork_go[2];

static void *fork_exporter(void *arg)
{
    ze_ipc_mem_handle_t h;
    char k;

    (void)arg;
    __atomic_store_n(&fork_tid, gettid(), __ATOMIC_RELEASE);
    fork_got = zeMemGetIpcHandle(fork_ctx, fork_mem, &h) == ZE_RESULT_SUCCESS;
    /* Idle until the check ends: no thread exit races the fork. */
    if (read(fork_go[0], &k, 1) < 0)
        return NULL;
    return NULL;
}

static void *fork_drainer(void *arg)
{
    char buf[4096];

    (void)arg;
    usleep(200 * 1000);
    while (read(fork_pipe[0], buf, sizeof(buf)) > 0)
        ;
    return NULL;
}

/* 1 once thread tid sleeps in write(2) (syscall 1 on x86-64). */
static int blocked_in_write(pid_t tid)
{
    char path[64], line[64] = "";
    int fd, n;

    snprintf(path, sizeof(path), "/proc/self/task/%d/syscall", (int)tid);
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        return 0;
    n = (int)read(fd, line, sizeof(line) - 1);
    close(fd);
    return n > 2 && strncmp(line, "1 ", 2) == 0;
}

static void scenario_fork(void)
{
    int saved = dup(STDERR_FILENO), null = open("/dev/null", O_WRONLY | O_CLOEXEC);
    int blocked = 0, st = -1;
    pthread_t exp, drain;
    pid_t child, tid = 0;

    dup2(null, STDERR_FILENO); /* ZEDRV_DEBUG logs every call */
    init();
    fork_ctx = ctx_new();
    fork_mem = dev_alloc(fork_ctx, 4096, 0);
    CHECK(fork_mem != NULL);
    if (!fork_mem || pipe2(fork_pipe, O_CLOEXEC) || pipe2(fork_go, O_CLOEXEC))
        goto out;
    /* The pipe full, then blocking: the next log line sleeps in write. */
    fcntl(fork_pipe[1], F_SETPIPE_SZ, 4096);
    fcntl(fork_pipe[1], F_SETFL, O_NONBLOCK);
    while (write(fork_pipe[1], "................", 16) > 0)
        ;
    fcntl(fork_pipe[1], F_SETFL, 0);
    dup2(fork_pipe[1], STDERR_FILENO);
    pthread_create(&exp, NULL, fork_exporter, NULL);
    for (int i = 0; i < 2000 && !blocked; i++) {
        usleep(1000);
        tid = __atomic_load_n(&fork_tid, __ATOMIC_ACQUIRE);
        blocked = tid && blocked_in_write(tid);
    }
    pthread_create(&drain, NULL, fork_drainer, NULL);
    child = fork();
    if (child == 0) {
        int fd = open("/dev/null", O_WRONLY);

        alarm(3);
        dup2(fd, STDERR_FILENO);
        _exit(mem_type(fork_ctx, fork_mem, NULL) == ZE_MEMORY_TYPE_DEVICE ? 0 : 1);
    }
    waitpid(child, &st, 0);
    dup2(saved, STDERR_FILENO);
    close(fork_pipe[1]);
    CHECK(write(fork_go[1], "x", 1) == 1);
    pthread_join(exp, NULL);
    pthread_join(drain, NULL);
    CHECK(blocked); /* else the fork proved nothing */
    CHECK(fork_got == 1);
    CHECK(child > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    if (WIFSIGNALED(st))
        fprintf(stderr, "FAIL: fork child killed by signal %d%s\n", WTERMSIG(st),
                WTERMSIG(st) == SIGALRM ? " (hung on the driver's lock)" : "");
out:
    dup2(saved, STDERR_FILENO);
    close(saved);
    close(null);
}

/* ---- USM pools -----------------------------------------------------------
 * compute-runtime (Xe2 and later) serves device and host allocations of
 * at most 2 MiB from pool buffers: one fd for the pool, poolOffset in the
 * handle, the pool's id for every pointer in it, and the fd's references
 * lost one per free of any chunk. */
static uint64_t h_fd(const ze_ipc_mem_handle_t *h)
{
    uint64_t v;

    memcpy(&v, h->data, sizeof(v));
    return v;
}

static uint64_t h_off(const ze_ipc_mem_handle_t *h)
{
    uint64_t v;

    memcpy(&v, h->data + 8, sizeof(v));
    return v;
}

static int fd_open(uint64_t fd)
{
    return fd <= INT32_MAX && fcntl((int)fd, F_GETFD) >= 0;
}

static char *h_open(ze_context_handle_t c, ze_ipc_mem_handle_t h)
{
    void *m = NULL;

    return zeMemOpenIpcHandle(c, dev, h, 0, &m) == ZE_RESULT_SUCCESS ? m : NULL;
}

static void scenario_pool(void)
{
    ze_host_mem_alloc_desc_t hd = {.stype = ZE_STRUCTURE_TYPE_HOST_MEM_ALLOC_DESC};
    ze_device_mem_alloc_desc_t dd = {.stype = ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC};
    ze_ipc_mem_handle_t ha, hb, hi, hh, hl;
    uint64_t ida = 0, idb = 0, idx = 0, idl = 0, idh = 0, ids = 0, idn = 0, id = 0;
    ze_context_handle_t c, d;
    char *a, *b, *x, *l, *ma, *mb, *mi;
    void *hp = NULL, *sh = NULL, *un = NULL, *base = NULL, *many[513];
    size_t size = 0;
    int distinct = 0;

    init();
    c = ctx_new();
    d = ctx_new();
    a = dev_alloc(c, 4096, 0);
    b = dev_alloc(c, 4096, 0);
    x = dev_alloc(c, 3000, 0);
    l = dev_alloc(c, 4 * MiB, 0);
    CHECK(a && b && x && l && a != b && (size_t)llabs(b - a) < 2 * MiB);
    CHECK(mem_type(c, a, &ida) == ZE_MEMORY_TYPE_DEVICE && mem_type(c, b, &idb) ==
          ZE_MEMORY_TYPE_DEVICE && mem_type(c, x, &idx) == ZE_MEMORY_TYPE_DEVICE);
    CHECK(ida == idb && ida == idx && mem_type(c, l, &idl) == ZE_MEMORY_TYPE_DEVICE &&
          idl > ida + 3); /* each chunk used up an id */
    CHECK(zeMemGetAddressRange(c, b + 10, &base, &size) == ZE_RESULT_SUCCESS && base == b &&
          size == 4096);
    memset(a, 'a', 4096);
    memset(b, 'b', 4096);
    memset(&ha, 0xee, sizeof(ha));
    CHECK(zeMemGetIpcHandle(c, a, &ha) == ZE_RESULT_SUCCESS);
    CHECK(zeMemGetIpcHandle(c, b, &hb) == ZE_RESULT_SUCCESS);
    CHECK(zeMemGetIpcHandle(c, b + 100, &hi) == ZE_RESULT_SUCCESS);
    CHECK(zeMemGetIpcHandle(c, l, &hl) == ZE_RESULT_SUCCESS);
    CHECK(h_fd(&ha) == h_fd(&hb) && h_fd(&ha) == h_fd(&hi) && h_fd(&hl) != h_fd(&ha));
    CHECK(h_off(&hb) - h_off(&ha) == (uint64_t)(b - a) && h_off(&hi) == h_off(&hb) + 100 &&
          h_off(&hl) == 0 && ha.data[16] == 0 && (uint8_t)ha.data[17] == 0xee);
    ma = h_open(d, ha);
    mb = h_open(d, hb);
    mi = h_open(d, hi);
    CHECK(ma && mb && mi && ma[0] == 'a' && ma[4095] == 'a' && mb[0] == 'b' && mi[-100] == 'b');
    CHECK(mb && mem_type(d, mb, &id) == ZE_MEMORY_TYPE_DEVICE && id != ida);
    /* The importer's mapping is the whole pool: an interior close releases it. */
    CHECK(zeMemGetAddressRange(d, mb, &base, &size) == ZE_RESULT_SUCCESS && size == 2 * MiB &&
          (char *)base == mb - h_off(&hb));
    CHECK(zeMemCloseIpcHandle(d, ma) == ZE_RESULT_SUCCESS &&
          zeMemCloseIpcHandle(d, mb) == ZE_RESULT_SUCCESS &&
          zeMemCloseIpcHandle(d, mi) == ZE_RESULT_SUCCESS);
    /* 3 gets: the free of a, then of x (never exported), leave one. */
    CHECK(zeMemFree(c, a) == ZE_RESULT_SUCCESS && fd_open(h_fd(&hb)));
    CHECK(zeMemFree(c, a) == ZE_RESULT_ERROR_INVALID_ARGUMENT);
    CHECK(zeMemGetIpcHandle(c, a, &ha) == ZE_RESULT_ERROR_INVALID_ARGUMENT);
    CHECK(zeMemGetAddressRange(c, a, &base, &size) != ZE_RESULT_SUCCESS);
    CHECK(mem_type(c, a, &id) == ZE_MEMORY_TYPE_DEVICE && id == ida); /* still the pool */
    ma = h_open(d, ha);
    CHECK(ma && ma[0] == 'a' && zeMemCloseIpcHandle(d, ma) == ZE_RESULT_SUCCESS);
    CHECK(zeMemFree(c, x) == ZE_RESULT_SUCCESS && fd_open(h_fd(&hb)));
    CHECK(zeMemFree(c, b) == ZE_RESULT_SUCCESS && !fd_open(h_fd(&hb)));
    CHECK(h_open(d, hb) == NULL);
    /* Host memory pools apart; shared, uncached and exported memory never. */
    CHECK(zeMemAllocHost(c, &hd, 64, 0, &hp) == ZE_RESULT_SUCCESS &&
          mem_type(c, hp, &idh) == ZE_MEMORY_TYPE_HOST && idh != ida);
    CHECK(zeMemGetIpcHandle(c, (char *)hp + 8, &hh) == ZE_RESULT_SUCCESS && (uint8_t)hh.data[16] == 1 &&
          h_off(&hh) % 512 == 8);
    CHECK(zeMemAllocShared(c, &dd, &hd, 64, 0, dev, &sh) == ZE_RESULT_SUCCESS &&
          mem_type(c, sh, &ids) == ZE_MEMORY_TYPE_SHARED &&
          zeMemGetAddressRange(c, sh, &base, &size) == ZE_RESULT_SUCCESS && size == 64);
    dd.flags = ZE_DEVICE_MEM_ALLOC_FLAG_BIAS_UNCACHED;
    CHECK(zeMemAllocDevice(c, &dd, 64, 0, dev, &un) == ZE_RESULT_SUCCESS &&
          mem_type(c, un, &idn) == ZE_MEMORY_TYPE_DEVICE && idn > ids);
    zeMemFree(c, hp);
    zeMemFree(c, sh);
    zeMemFree(c, un);
    /* A full pool (512 chunks of 4 KiB) makes another one. */
    for (int i = 0; i < 513; i++) {
        many[i] = dev_alloc(c, 4096, 0);
        CHECK(many[i] && mem_type(c, many[i], &id) == ZE_MEMORY_TYPE_DEVICE);
        distinct += i > 0 && id != idb;
        idb = id;
    }
    CHECK(distinct == 1);
    for (int i = 0; i < 513; i++)
        zeMemFree(c, many[i]);
    zeMemFree(c, l);
    zeContextDestroy(d);
    zeContextDestroy(c);
}

/* EnableDeviceUsmAllocationPool=0: every allocation its own. */
static void scenario_no_pool(void)
{
    ze_context_handle_t c;
    ze_ipc_mem_handle_t h;
    uint64_t id1 = 0, id2 = 0;
    char *p, *q;

    init();
    c = ctx_new();
    p = dev_alloc(c, 4096, 0);
    q = dev_alloc(c, 4096, 0);
    CHECK(p && q && mem_type(c, p, &id1) == ZE_MEMORY_TYPE_DEVICE &&
          mem_type(c, q, &id2) == ZE_MEMORY_TYPE_DEVICE && id1 != id2);
    CHECK(zeMemGetIpcHandle(c, q + 100, &h) == ZE_RESULT_SUCCESS && h_off(&h) == 0);
    zeMemFree(c, p);
    zeMemFree(c, q);
    zeContextDestroy(c);
}

/* Runs fn in a child with the variables of env set ("NAME=value", NULL
 * terminated) and adds its counts to ours. */
static void run(const char *name, void (*fn)(void), const char *const *env)
{
    int fds[2], st = -1, counts[2] = {0, 0};
    pid_t pid;

    if (pipe(fds) != 0)
        return;
    fflush(NULL);
    pid = fork();
    if (pid == 0) {
        close(fds[0]);
        passed = failed = 0;
        for (int i = 0; env && env[i]; i++)
            putenv((char *)env[i]);
        fn();
        counts[0] = passed;
        counts[1] = failed;
        if (write(fds[1], counts, sizeof(counts)) != (ssize_t)sizeof(counts))
            _exit(1);
        _exit(0);
    }
    close(fds[1]);
    if (read(fds[0], counts, sizeof(counts)) != (ssize_t)sizeof(counts)) {
        fprintf(stderr, "FAIL: scenario %s died\n", name);
        failed++;
    }
    close(fds[0]);
    waitpid(pid, &st, 0);
    passed += counts[0];
    failed += counts[1];
}

int main(void)
{
    static char ledger[96], ledger_env[128];
    static const char *const address[] = {"ZEDRV_ALLOC_ID=address", NULL};
    static const char *const keep[] = {"ZEDRV_CONTEXT_DESTROY=keep", NULL};
    static const char *const all[] = {"ZEDRV_CONTEXT_DESTROY=all", NULL};
    static const char *const debug[] = {"ZEDRV_DEBUG=1", NULL};
    static const char *const no_pool[] = {"EnableDeviceUsmAllocationPool=0", NULL};
    const char *churn[] = {"ZEDRV_TOTAL_MEM=32M", "ZEDRV_IPC_LAYOUT=opaque", ledger_env, NULL};

    if (!getenv("ZE_ENABLE_ALT_DRIVERS")) {
        fprintf(stderr, "zedrv_check: set ZE_ENABLE_ALT_DRIVERS to the test driver\n");
        return 2;
    }
    snprintf(ledger, sizeof(ledger), "/tmp/zedrv_check.%d.ledger", (int)getpid());
    snprintf(ledger_env, sizeof(ledger_env), "ZEDRV_LEDGER=%s", ledger);
    run("default", scenario_default, NULL);
    run("USM pools", scenario_pool, NULL);
    run("USM pools off", scenario_no_pool, no_pool);
    run("address ids", scenario_address, address);
    run("context destroy keep", scenario_keep, keep);
    run("context destroy all", scenario_all, all);
    run("memory limit", scenario_limit, churn);
    run("fork with a thread inside the driver", scenario_fork, debug);
    unlink(ledger);
    /* This process watches the ledger too: it needs the same variables. */
    for (int i = 0; churn[i]; i++)
        putenv((char *)churn[i]);
    run("churn, importer closes", scenario_churn_close, NULL);
    unlink(ledger);
    run("churn, importer holds", scenario_churn_hold, NULL);
    unlink(ledger);
    printf("zedrv_check: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
