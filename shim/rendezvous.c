/* SPDX-License-Identifier: MIT */
/* rendezvous.c - the rendezvous directory's configuration and log lines
 * (see rendezvous.h; the directory itself is handles/rendezvous.c). */
#include "shim/rendezvous.h"

#include <errno.h>
#include <unistd.h>

#include "handles/rendezvous.h"
#include "shim/config.h"
#include "shim/log.h"

void byval_rendezvous_configure(void)
{
    char msg[512];
    if (!byval_cfg.rendezvous_dir[0]) {
        if (byval_cfg.rendezvous_gid >= 0)
            BYVAL_LOG_WARN("IPCBYVAL_RENDEZVOUS_GID is set without IPCBYVAL_RENDEZVOUS_DIR: "
                           "ignored");
        return;
    }
    if (byval_cfg.transport == BYVAL_TRANSPORT_PIDFD) {
        BYVAL_LOG_WARN("IPCBYVAL_RENDEZVOUS_DIR is ignored with IPCBYVAL_TRANSPORT=pidfd (the "
                       "directory carries the socket fallback: use auto or socket)");
        return;
    }
    long gid = byval_cfg.rendezvous_gid >= 0 ? byval_cfg.rendezvous_gid : BYVAL_RENDEZVOUS_NO_GID;
    if (byval_rendezvous_setup(byval_cfg.rendezvous_dir, gid, msg, sizeof(msg)) != 0)
        BYVAL_LOG_WARN("%s", msg);
    else
        BYVAL_LOG_INFO("rendezvous directory %s (peers of uid %u%s)", byval_cfg.rendezvous_dir,
                       (unsigned)geteuid(), gid >= 0 ? " and of the group" : "");
}

void byval_rendezvous_report(void)
{
    char msg[512];
    int err = errno;
    if (byval_rendezvous_take_error(msg, sizeof(msg)))
        BYVAL_LOG_WARN("%s", msg);
    errno = err;
}
