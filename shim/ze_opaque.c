/* SPDX-License-Identifier: MIT */
/*
 * ze_opaque.c - the opaque layouts (compute-runtime 25.35 on) across pid
 * namespaces: a short record in their reserved bytes.
 *
 * An opaque handle names its exporter by getpid() (memory @16, event pool
 * @20) and the importer's driver does pidfd_open(that pid) +
 * pidfd_getfd(fd @0) itself. In another pid namespace (another pod) that
 * pid names another process, or none: the driver cannot import it, and
 * ipcbyval left the handle alone. With IPCBYVAL_RENDEZVOUS_DIR the
 * exporter now also writes a short record (handles/wire.h: pid, 32 bits
 * of identity, host and pid-namespace guard, registry serial; checksum
 * over the driver's bytes 0-29) into reservedHandleData @30-53, and
 * publishes the export in its registry as for a classic handle. Only when
 * those 32 bytes came back zero and the handle type @20 (memory) is an fd:
 * the driver writes fabric data there otherwise (DrmFabric), and reads it
 * only after a failed import of its own (importHandleFromReservedHandleData).
 *
 * An importer in the exporter's pid namespace gets the handle as the
 * driver wrote it (record zeroed again): the driver's own pidfd import,
 * as natively. One in another pid namespace finds the exporter through
 * the directory (rendezvous_short.c), fetches the fd, and hands its
 * driver the handle "modified by the user": fd @0 the local fd, the fd
 * copy (memory @22, event pool @8) -1, the pid 0, reserved zero, which
 * compute-runtime imports as a plain fd (getDataFromIpcHandle: the fd
 * differs from the copy, so the legacy path).
 */
#include <string.h>
#include <unistd.h>

#include "handles/rendezvous.h"
#include "handles/resolve.h"
#include "handles/wire.h"
#include "shim/config.h"
#include "shim/ze.h"
#include "shim/ze_short.h"

#define RESERVED_OFF 30 /* both layouts: reservedHandleData[32] @30-61 */
#define RESERVED_LEN 32

static int reserved_zero(const uint8_t *h)
{
    for (int i = RESERVED_OFF; i < RESERVED_OFF + RESERVED_LEN; i++)
        if (h[i])
            return 0;
    return 1;
}

int byval_ze_opaque_describable(const void *handle64, int pool)
{
    const uint8_t *h = handle64;
    /* memory: handle type @20 (0: fd); pools carry theirs @29 */
    return byval_rendezvous_enabled() && byval_cfg.transport != BYVAL_TRANSPORT_PIDFD &&
        reserved_zero(h) && (pool ? h[29] : h[20]) == 0;
}

int byval_ze_opaque_write(void *handle64, uint64_t serial)
{
    return byval_ze_short_write(handle64, RESERVED_OFF, serial);
}

int byval_ze_opaque_decode(const void *handle64, byval_short_t *s_p)
{
    const uint8_t *h = handle64;
    return byval_short_decode(h + RESERVED_OFF, h, RESERVED_OFF, s_p) == BYVAL_WIRE_OK;
}

int byval_ze_opaque_whose(const byval_short_t *s)
{
    byval_self_t self;
    if (byval_self_get(&self) != 0 || s->guard != byval_short_guard(self.boot, self.pidns))
        return 2;
    return s->pid == self.pid && s->id32 == (uint32_t)self.identity ? 0 : 1;
}

void byval_ze_opaque_strip(void *handle64)
{
    uint8_t *h = handle64;
    memset(h + RESERVED_OFF, 0, RESERVED_LEN);
}

void byval_ze_opaque_local(void *handle64, int fd, int pool)
{
    uint8_t *h = handle64;
    uint64_t fd64 = (uint64_t)fd;
    memcpy(h, &fd64, sizeof(fd64));
    /* The copy differs (the driver's test for a handle changed by the
     * user) and no pid is left to import from: a driver version that
     * goes by the pid alone (the event pools' parentProcessId) takes the
     * number as local too. */
    if (pool) {
        uint64_t none = UINT64_MAX;
        memcpy(h + 8, &none, sizeof(none));
        memset(h + 20, 0, 4);
    } else {
        int32_t none = -1;
        memcpy(h + 22, &none, sizeof(none));
        memset(h + 16, 0, 4);
    }
    byval_ze_opaque_strip(h);
}
