/* SPDX-License-Identifier: MIT */
/* transport.c - the IPCBYVAL_TRANSPORT policy (see transport.h): the
 * configured mode handed to the resolution (handles/resolve.c), the
 * exporter's kept pidfd lent to it, and the log line. */
#include "cache/transport.h"
#include "cache/exporters.h"

#include <errno.h>

#include "cache/config.h"
#include "cache/log.h"
#include "cache/stats.h"
#include "handles/broker.h"
#include "handles/registry_view.h"
#include "handles/rendezvous.h"
#include "handles/tag.h"
#include "handles/transport.h"

_Static_assert(BYVAL_MODE_AUTO == BYVAL_TRANSPORT_AUTO &&
                   BYVAL_MODE_PIDFD == BYVAL_TRANSPORT_PIDFD &&
                   BYVAL_MODE_SOCKET == BYVAL_TRANSPORT_SOCKET,
               "handles/transport.h modes are IPCBYVAL_TRANSPORT's values");

#define EXPORTER_OF(rec) ((byval_exporter_id_t){(rec)->pidns, (rec)->pid, (rec)->identity})

static __thread int fetch_route __attribute__((tls_model("initial-exec")));

int byval_fetch_route(void)
{
    return fetch_route;
}

byval_status_t byval_fetch_fd(const byval_record_t *rec, const byval_self_t *self, int *fd_p,
                              int *pidfd_p, char *msg, size_t msglen)
{
    /* A kept pidfd is matched by (pidns, pid, identity), which another
     * host's record could repeat: same boot only. */
    int kept = -1;
    if (rec->boot == self->boot) {
        byval_exporter_id_t id = EXPORTER_OF(rec);
        kept = byval_exporters_hold(&id);
    }
    byval_fetch_info_t info;
    byval_status_t st = byval_transport_fetch(rec, self, byval_cfg.transport, kept, fd_p, pidfd_p,
                                              &info, msg, msglen);
    /* Counted by what served it: pidfd_getfd (directly, or on a kept
     * pidfd), or the exporter's socket (abstract, or in the rendezvous
     * directory). */
    fetch_route = info.via == BYVAL_VIA_SOCKET ? BYVAL_ROUTE_SOCKET
        : info.via == BYVAL_VIA_RENDEZVOUS     ? BYVAL_ROUTE_RENDEZVOUS
                                               : BYVAL_ROUTE_PIDFD;
    if (st != BYVAL_OK)
        return st;
    if (fetch_route == BYVAL_ROUTE_RENDEZVOUS) /* first contact or not */
        BYVAL_STAT_INC(open_rendezvous);
    if (kept >= 0 && fetch_route != BYVAL_ROUTE_PIDFD)
        BYVAL_STAT_INC(open_kept_socket);
    else if (kept >= 0)
        BYVAL_STAT_INC(open_kept_pidfd);
    else if (info.via == BYVAL_VIA_SOCKET) /* first contact */
        BYVAL_STAT_INC(via_socket);
    else if (info.via == BYVAL_VIA_RENDEZVOUS)
        BYVAL_STAT_INC(via_rendezvous);
    else
        BYVAL_STAT_INC(via_pidfd);
    if (info.fell_back)
        BYVAL_LOG_INFO(
            "pid %u: %s; using the socket fallback%s for this exporter", rec->pid, info.why,
            info.via == BYVAL_VIA_RENDEZVOUS ? " (through the rendezvous directory)" : "");
    else if (info.via == BYVAL_VIA_XLATED)
        BYVAL_LOG_DEBUG("pid %u of pid:[%u] is pid %u here (identity verified)", rec->pid,
                        rec->pidns, info.local_pid);
    return st;
}

void byval_fetch_done(const byval_record_t *rec, int pidfd)
{
    byval_exporter_id_t id = EXPORTER_OF(rec);
    byval_exporters_release(&id, pidfd);
}

/* ---- the export core's sink (cache/exports.h) -------------------------- */

/* Why the exporter does not listen in the rendezvous directory, once;
 * keeps errno. */
static void rendezvous_report(void)
{
    char msg[512];
    int err = errno;
    if (byval_rendezvous_take_error(msg, sizeof(msg)))
        BYVAL_LOG_WARN("%s", msg);
    errno = err;
}

static int sink_offer(int fd, int open)
{
    if (byval_cfg.transport == BYVAL_TRANSPORT_PIDFD)
        return -1; /* no socket route: nothing offered, nothing to withdraw */
    int rc = open ? byval_broker_offer_open(fd) : byval_broker_offer(fd);
    rendezvous_report(); /* why the directory is not listened on, once */
    if (rc == 0)
        return 0;
    /* Someone else bound our name first: importers that need the socket
     * would be talking to it, so say so loudly (once is enough). */
    static int warned;
    if (errno == EADDRINUSE && !__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
        BYVAL_LOG_WARN("the socket fallback's name is taken by another process: "
                       "importers that cannot use pidfd_getfd will be refused (%m)");
    else
        BYVAL_LOG_DEBUG("socket fallback unavailable for fd %d: %m", fd);
    return -1;
}

int byval_export_register_fd(int fd)
{
    if (byval_cfg.transport == BYVAL_TRANSPORT_PIDFD)
        return -1; /* no broker: nothing will ever be served */
    if (byval_reg_add_fd(fd) != 0) {
        static int said;
        if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
            BYVAL_LOG_INFO("exported fd %d cannot be served to peers whose pidfd_getfd is "
                           "refused: %m (said once)",
                           fd);
        return -1;
    }
    if (byval_broker_serve() != 0)
        BYVAL_LOG_DEBUG("socket fallback unavailable for exported fd %d: %m", fd);
    rendezvous_report(); /* why the directory is not listened on, once */
    return 0;
}

static uint64_t sink_publish(uint64_t key, uint32_t ino, uint32_t fd, uint64_t size)
{
    uint64_t serial = 0;
    if (byval_reg_add_serial(key, ino, fd, size, &serial) != 0) {
        BYVAL_LOG_DEBUG("export registry full or unavailable: importers keep fd %u's mappings "
                        "within their byte budget",
                        fd);
        return 0;
    }
    int page_fd, pipe_rd;
    /* Importers that cannot use pidfd_getfd fetch these from the broker:
     * offered once per registry (a fork child's exports make its own).
     * The registry's own, not an export's: never withdrawn. Open: the
     * directory's group needs them to see exports end, and they hold no
     * secret (the page is sealed, the pipe carries nothing). */
    if (byval_reg_fds_to_offer(&page_fd, &pipe_rd) == 0) {
        sink_offer(page_fd, 1);
        sink_offer(pipe_rd, 1);
    }
    return serial;
}

uint64_t byval_export_tag(uint32_t fd, uint32_t ino)
{
    uint64_t tag = 0;
    static int said;
    if (byval_tag_make(fd, ino, &tag) != 0 && !__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
        BYVAL_LOG_WARN("no key for export tags (getrandom and /dev/urandom failed: %m): peers "
                       "of IPCBYVAL_RENDEZVOUS_GID's group will be refused every export");
    return tag;
}

static const byval_exports_sink_t sink = {
    .publish = sink_publish,
    .unpublish = byval_reg_remove,
    .offer = sink_offer,
    .withdraw = byval_broker_withdraw,
    .enlist = byval_export_register_fd,
    .delist = byval_reg_drop_fd,
};

byval_exports_t *byval_export_table(const byval_backend_export_t *ops)
{
    byval_exports_set_sink(&sink);
    byval_exports_t *x = byval_exports_create(ops, byval_cfg.export_cache_size);
    if (x)
        byval_stats_register_cache(ops->name, byval_exports_lru(x));
    else
        BYVAL_LOG_ERROR("cannot allocate the %s cache: those exports pass through", ops->name);
    return x;
}
