/* SPDX-License-Identifier: MIT */
/*
 * rendezvous_registry.c - an exporter's registry (registry.h) for an
 * importer that reached it through the rendezvous directory: the
 * importer finds the registry's fd by reading /proc/PID/fd, which shows
 * nothing of a process in another pid namespace, so it asks the
 * exporter's broker instead, with a request the protocol already carries
 * (a rescue request, broker_internal.h, for fd number INT32_MAX, which no
 * process can have open: the kernel's fd limit stays below it). The
 * listener is proven as for every fetch; the memfd that comes back is
 * checked as the importer checks any registry (its kind here, its seals,
 * size and the exporter's identity in its header in registry_view.c),
 * and its wake-up pipe is then fetched by the number and inode the
 * registry names, as always.
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "handles/broker.h"
#include "handles/registry.h"
#include "handles/rendezvous.h"
#include "handles/resolve_internal.h"

int32_t byval_rendezvous_registry_dup(int *dup_p)
{
    return byval_reg_dup_page(dup_p);
}

byval_status_t byval_rendezvous_registry(const byval_record_t *rec, int *mfd_p, char *msg,
                                         size_t msglen)
{
    struct stat st;
    byval_status_t s = byval_broker_rescue(rec, BYVAL_RENDEZVOUS_FD_REGISTRY, mfd_p, msg, msglen);
    if (s != BYVAL_OK)
        return s;
    if (fstat(*mfd_p, &st) != 0)
        s = BYVAL_E_SYS;
    else
        s = byval_check_fd_kind(*mfd_p, rec->pid, BYVAL_RENDEZVOUS_FD_REGISTRY, (uint32_t)st.st_ino,
                                0, BYVAL_OBJ_REGISTRY, NULL, msg, msglen);
    if (s != BYVAL_OK) {
        byval_fd_release(*mfd_p);
        *mfd_p = -1;
    }
    return s;
}
