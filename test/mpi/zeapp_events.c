/* SPDX-License-Identifier: MIT */
/*
 * zeapp: the IPC event-pool exchange both test programs run with --events
 * (see struct zeapp_pool in zeapp.h). Event pools carry an fd in their IPC
 * handle just as memory does, so they need the same by-value treatment.
 */
#include "test/mpi/zeapp.h"

#include <string.h>
#include <unistd.h>

/* Long enough for an oversubscribed peer, short enough to fail a test. */
#define POOL_WAIT_NS 5000000000ull

static ze_event_handle_t event_new(struct zeapp *app, ze_event_pool_handle_t pool,
                                   uint32_t index)
{
    ze_event_desc_t d = {.stype = ZE_STRUCTURE_TYPE_EVENT_DESC, .index = index,
                         .signal = ZE_EVENT_SCOPE_FLAG_HOST, .wait = ZE_EVENT_SCOPE_FLAG_HOST};
    ze_event_handle_t ev = NULL;
    ze_result_t r = app->EventCreate(pool, &d, &ev);

    if (r != ZE_RESULT_SUCCESS)
        zeapp_fail(app, "zeEventCreate", r);
    return ev;
}

void zeapp_pool_create(struct zeapp *app, struct zeapp_pool *p)
{
    ze_event_pool_desc_t d = {.stype = ZE_STRUCTURE_TYPE_EVENT_POOL_DESC,
                              .flags = ZE_EVENT_POOL_FLAG_IPC | ZE_EVENT_POOL_FLAG_HOST_VISIBLE,
                              .count = 2};
    ze_result_t r = app->EventPoolCreate(app->context, &d, 1, &app->device, &p->pool);

    if (r != ZE_RESULT_SUCCESS)
        zeapp_fail(app, "zeEventPoolCreate", r);
    p->ev[0] = event_new(app, p->pool, 0);
    p->ev[1] = event_new(app, p->pool, 1);
}

void zeapp_pool_export(struct zeapp *app, struct zeapp_pool *p, ze_ipc_event_pool_handle_t *h)
{
    ze_result_t r;

    r = app->EventHostReset(p->ev[0]);
    if (r != ZE_RESULT_SUCCESS)
        zeapp_fail(app, "zeEventHostReset", r);
    r = app->EventHostSignal(p->ev[1]);
    if (r != ZE_RESULT_SUCCESS)
        zeapp_fail(app, "zeEventHostSignal", r);
    r = app->EventPoolGetIpcHandle(p->pool, h);
    if (r != ZE_RESULT_SUCCESS)
        zeapp_fail(app, "zeEventPoolGetIpcHandle", r);
}

void zeapp_pool_import(struct zeapp *app, const ze_ipc_event_pool_handle_t *h, int close_fd,
                       const char *peer)
{
    ze_event_pool_handle_t pool = NULL;
    ze_event_handle_t ev0, ev1;
    ze_result_t r;

    r = app->EventPoolOpenIpcHandle(app->context, *h, &pool);
    if (close_fd >= 0)
        close(close_fd); /* the driver holds its own reference once open */
    if (r != ZE_RESULT_SUCCESS)
        zeapp_fail(app, "zeEventPoolOpenIpcHandle", r);
    ev1 = event_new(app, pool, 1);
    r = app->EventQueryStatus(ev1);
    if (r != ZE_RESULT_SUCCESS)
        zeapp_die(app, "event 1 of %s reads 0x%08x (%s) after import, expected signalled",
                  peer, (unsigned)r, zeapp_result_name(r));
    ev0 = event_new(app, pool, 0);
    r = app->EventHostSignal(ev0);
    if (r != ZE_RESULT_SUCCESS)
        zeapp_fail(app, "zeEventHostSignal", r);
    app->EventDestroy(ev0);
    app->EventDestroy(ev1);
    r = app->EventPoolCloseIpcHandle(pool);
    if (r != ZE_RESULT_SUCCESS)
        zeapp_fail(app, "zeEventPoolCloseIpcHandle", r);
}

void zeapp_pool_check(struct zeapp *app, struct zeapp_pool *p, const char *peer)
{
    ze_result_t r = app->EventHostSynchronize(p->ev[0], POOL_WAIT_NS);

    if (r != ZE_RESULT_SUCCESS)
        zeapp_die(app, "event 0, to be signalled by %s, reads 0x%08x (%s)", peer, (unsigned)r,
                  zeapp_result_name(r));
}

void zeapp_pool_destroy(struct zeapp *app, struct zeapp_pool *p)
{
    app->EventDestroy(p->ev[0]);
    app->EventDestroy(p->ev[1]);
    app->EventPoolDestroy(p->pool);
}
