/* SPDX-License-Identifier: MIT */
/*
 * stress_ze.c - the Level Zero backend of the stress workload, on the test
 * driver (test/zedrv: device memory is host memory, read directly, so a
 * mapping unmapped under the program is a SIGSEGV). Natively (--native)
 * the handle's fd travels with SCM_RIGHTS and the importer writes its own
 * number into bytes 0-7, as programs do without ipcbyval.
 */
#include "test/mpi/zeapp.h"
#include "test/stress/stress.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static ze_driver_handle_t drv;
static ze_device_handle_t dev;
static ze_context_handle_t exp_ctx;

static int init(int importer)
{
    uint32_t n = 1;
    (void)importer;
    if (zeInit(0) != ZE_RESULT_SUCCESS || zeDriverGet(&n, &drv) != ZE_RESULT_SUCCESS || !n)
        return -1;
    n = 1;
    if (zeDeviceGet(drv, &n, &dev) != ZE_RESULT_SUCCESS || !n)
        return -1;
    ze_context_desc_t cd = {.stype = ZE_STRUCTURE_TYPE_CONTEXT_DESC};
    return importer || zeContextCreate(drv, &cd, &exp_ctx) == ZE_RESULT_SUCCESS ? 0 : -1;
}

static int alloc(void **blk, size_t *size, uint64_t serial)
{
    ze_device_mem_alloc_desc_t d = {.stype = ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC};
    *size &= ~(size_t)7;
    if (zeMemAllocDevice(exp_ctx, &d, *size, 64, dev, blk) != ZE_RESULT_SUCCESS)
        return -1;
    uint64_t *w = *blk;
    for (size_t i = 0; i < *size / 8; i++)
        w[i] = stress_word(serial, i * 8);
    return 0;
}

static int get(void *blk, struct stress_msg *m, int *fd_p)
{
    ze_ipc_mem_handle_t h;
    if (zeMemGetIpcHandle(exp_ctx, blk, &h) != ZE_RESULT_SUCCESS)
        return -1;
    memcpy(m->handle, h.data, STRESS_HANDLE);
    uint64_t fd;
    memcpy(&fd, h.data, sizeof(fd));
    *fd_p = (int)fd;
    return 0;
}

static void mfree(void *blk)
{
    zeMemFree(exp_ctx, blk);
}

static int ctx_new(struct stress_ctx *c)
{
    ze_context_desc_t cd = {.stype = ZE_STRUCTURE_TYPE_CONTEXT_DESC};
    return zeContextCreate(drv, &cd, (ze_context_handle_t *)&c->h) == ZE_RESULT_SUCCESS ? 0 : -1;
}

static void ctx_bind(const struct stress_ctx *c)
{
    (void)c;
}

static int ctx_destroy(struct stress_ctx *c)
{
    return zeContextDestroy(c->h) == ZE_RESULT_SUCCESS ? 0 : -1;
}

static int open_ipc(const struct stress_ctx *c, const struct stress_msg *m, int fd, uintptr_t *p)
{
    ze_ipc_mem_handle_t h;
    memcpy(h.data, m->handle, STRESS_HANDLE);
    if (fd >= 0) {
        uint64_t f = (uint64_t)fd;
        memcpy(h.data, &f, sizeof(f));
    }
    void *ptr = NULL;
    ze_result_t r = zeMemOpenIpcHandle(c->h, dev, h, 0, &ptr);
    *p = (uintptr_t)ptr;
    return (int)r;
}

static int close_ipc(const struct stress_ctx *c, uintptr_t p)
{
    return (int)zeMemCloseIpcHandle(c->h, (void *)p);
}

static int read_word(const struct stress_ctx *c, uintptr_t p, uint64_t *w)
{
    (void)c;
    *w = *(volatile uint64_t *)p;
    return 0;
}

static int stats(uint64_t *live, uint64_t *dead_closes)
{
    int (*fn)(uint64_t *, uint64_t *) = (int (*)(uint64_t *, uint64_t *))dlsym(RTLD_DEFAULT,
                                                                               "zedrvIpcStats");
    if (!fn) {
        void *h = dlopen(getenv("ZE_ENABLE_ALT_DRIVERS"), RTLD_NOW | RTLD_NOLOAD);
        fn = h ? (int (*)(uint64_t *, uint64_t *))dlsym(h, "zedrvIpcStats") : NULL;
    }
    return fn ? fn(live, dead_closes) : -1;
}

/* compute-runtime's semantics (ZEDRV_CONTEXT_DESTROY=keep): a context's
 * destroy leaves its IPC mappings mapped. */
static int keeps(void)
{
    const char *v = getenv("ZEDRV_CONTEXT_DESTROY");
    return v && !strcmp(v, "keep");
}

static int send_msg(int sock, const struct stress_msg *m, int fd)
{
    return zeapp_send_fd(sock, m, sizeof(*m), fd);
}

static int recv_msg(int sock, struct stress_msg *m, int *fd_p)
{
    return zeapp_recv_fd(sock, m, sizeof(*m), fd_p);
}

STRESS_BACKEND("ze");
