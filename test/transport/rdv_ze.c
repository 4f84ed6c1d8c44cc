/* SPDX-License-Identifier: MIT */
/* rdv_ze - rdv_pair (rdv_pair.h) on Level Zero, through zeapp (the
 * loader, the symbol route by default; --route ROUTE as zeapp names it). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test/mpi/zeapp.h"
#include "test/devmem/devmem.h" /* the ledger the doubles share */
#include "test/transport/rdv_pair.h"

static struct zeapp app;
static int route = -1; /* zeapp's default */

struct alloc {
    void *dev;
};

static int option(int argc, char **argv, int i)
{
    int r;
    if (strcmp(argv[i], "--route") || i + 1 >= argc)
        return 0;
    if ((r = zeapp_route_parse(argv[i + 1])) < 0) {
        fprintf(stderr, "rdv_ze: unknown route %s\n", argv[i + 1]);
        exit(2);
    }
    route = r;
    return 2;
}

static int init(int exporter)
{
    zeapp_init(&app, route < 0 ? ZEAPP_DEFAULT_ROUTE : (enum zeapp_route)route,
               exporter ? "exporter" : "importer", zeapp_exit);
    return 0;
}

static int export_one(size_t size, uint64_t seed, uint8_t h[RDV_HANDLE], void **alloc_p)
{
    uint8_t *stage = zeapp_alloc_host(&app, size);
    void *dev = zeapp_alloc_device(&app, size);
    rdv_fill(stage, size, seed);
    zeapp_copy(&app, dev, stage, size);
    zeapp_free(&app, stage);
    ze_ipc_mem_handle_t ipc;
    ze_result_t r = zeapp_ipc_get(&app, dev, &ipc);
    if (r != ZE_RESULT_SUCCESS) {
        zeapp_fail(&app, zeapp_ipc_get_name(&app), r);
        return 1;
    }
    memcpy(h, ipc.data, RDV_HANDLE);
    *alloc_p = dev;
    return 0;
}

static int free_one(void *dev)
{
    zeapp_free(&app, dev);
    return 0;
}

static int import_one(const uint8_t h[RDV_HANDLE], size_t size, uint64_t seed, int *right_p)
{
    ze_ipc_mem_handle_t ipc;
    void *p = NULL;
    memcpy(ipc.data, h, RDV_HANDLE);
    ze_result_t r = zeapp_ipc_open(&app, &ipc, &p);
    if (r != ZE_RESULT_SUCCESS) {
        fprintf(stderr, "rdv_ze: importer: %s failed: %s\n", zeapp_ipc_open_name(&app),
                zeapp_result_name(r));
        return 1;
    }
    uint8_t *stage = zeapp_alloc_host(&app, size);
    zeapp_copy(&app, stage, p, size);
    *right_p = rdv_check(stage, size, seed);
    zeapp_free(&app, stage);
    r = zeapp_ipc_close(&app, p);
    if (r != ZE_RESULT_SUCCESS) {
        fprintf(stderr, "rdv_ze: importer: close failed: %s\n", zeapp_result_name(r));
        return 1;
    }
    if (rdv_double_close && (r = zeapp_ipc_close(&app, p)) == ZE_RESULT_SUCCESS) {
        fprintf(stderr, "rdv_ze: importer: a second close succeeded\n");
        *right_p = 0;
    }
    return 0;
}

/* The test driver's ledger (zedrvMemStats). */
static int ledger(uint64_t *used_p, uint64_t *freed_held_p)
{
    static int (*stats)(struct devmem_stats *);
    const char *drv = getenv("ZE_ENABLE_ALT_DRIVERS");
    if (!stats && drv) {
        void *h = dlopen(drv, RTLD_NOLOAD | RTLD_LAZY);
        if (h)
            stats = (int (*)(struct devmem_stats *))dlsym(h, "zedrvMemStats");
    }
    struct devmem_stats st = {0};
    if (!stats || stats(&st) != 0 || !st.shared)
        return -1;
    *used_p = st.used;
    *freed_held_p = st.freed_held;
    return 0;
}

static int pool_export(uint8_t h[RDV_HANDLE], void **pool_p)
{
    struct zeapp_pool *p = calloc(1, sizeof(*p));
    ze_ipc_event_pool_handle_t ipc;
    if (!p)
        return 1;
    zeapp_pool_create(&app, p);
    zeapp_pool_export(&app, p, &ipc);
    memcpy(h, ipc.data, RDV_HANDLE);
    *pool_p = p;
    return 0;
}

static int pool_wait(void *pool)
{
    struct zeapp_pool *p = pool;
    zeapp_pool_check(&app, p, "the importer");
    zeapp_pool_destroy(&app, p);
    free(p);
    return 0;
}

static int pool_import(const uint8_t h[RDV_HANDLE])
{
    ze_ipc_event_pool_handle_t ipc;
    memcpy(ipc.data, h, RDV_HANDLE);
    zeapp_pool_import(&app, &ipc, -1, "the exporter"); /* dies on failure */
    return 0;
}

static int seq_open(const uint8_t h[RDV_HANDLE], void **map_p)
{
    ze_ipc_mem_handle_t ipc;
    memcpy(ipc.data, h, RDV_HANDLE);
    return (int)zeapp_ipc_open(&app, &ipc, map_p);
}

static int seq_check(void *map, size_t size, uint64_t seed)
{
    uint8_t *stage = zeapp_alloc_host(&app, size);
    zeapp_copy(&app, stage, map, size);
    int right = rdv_check(stage, size, seed);
    zeapp_free(&app, stage);
    return right;
}

static int seq_close(void *map)
{
    return (int)zeapp_ipc_close(&app, map);
}

/* zeContextDestroy (its code), then a new context and command list. */
static int seq_ctx_renew(void)
{
    ze_context_desc_t cdesc = {.stype = ZE_STRUCTURE_TYPE_CONTEXT_DESC};
    ze_command_queue_desc_t qdesc = {.stype = ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC,
                                     .mode = ZE_COMMAND_QUEUE_MODE_SYNCHRONOUS};
    app.CommandListDestroy(app.list);
    int rc = (int)app.ContextDestroy(app.context);
    if (app.ContextCreate(app.driver, &cdesc, &app.context) != ZE_RESULT_SUCCESS ||
        app.CommandListCreateImmediate(app.context, app.device, &qdesc, &app.list) !=
            ZE_RESULT_SUCCESS)
        zeapp_die(&app, "no new context after zeContextDestroy");
    return rc;
}

int main(int argc, char **argv)
{
    static const struct rdv_ops ops = {"ze",        option,       init,     export_one,
                                       free_one,    import_one,   ledger,   pool_export,
                                       pool_wait,   pool_import,  seq_open, seq_check,
                                       seq_close,   seq_ctx_renew};
    return rdv_main(argc, argv, &ops);
}
