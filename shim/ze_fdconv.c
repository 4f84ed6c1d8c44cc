/* SPDX-License-Identifier: MIT */
/*
 * ze_fdconv.c - zeMemGetFileDescriptorFromIpcHandleExp and
 * zeMemGetIpcHandleFromFileDescriptorExp (spec 1.6) with by-value handles.
 *
 * The driver answers both from its own table of exports
 * (compute-runtime's Context::getFdFromIpcHandle / getIpcHandleFromFd
 * look the handle's fd number up in its IPC map): in the exporting
 * process they convert, anywhere else they fail, or worse, return an
 * export of the importing process whose number happens to be the
 * exporter's. So, for another process's by-value handle, the fd returned
 * is a local duplicate of the exporter's object, fetched and checked as
 * an open's is, and an fd built back into a handle gives the by-value
 * handle it came from. The duplicate is the caller's to close: ipcbyval
 * never closes an fd it handed out (it may be in use), and hands out the
 * same one again while it stays open on the same object, so a caller that
 * never closes it does not collect descriptors. In the exporting process
 * both calls are the driver's, and the handle built from the driver's fd
 * is the by-value handle the export cache holds for it.
 */
#include <fcntl.h>
#include <string.h>

#include "cache/imports.h"
#include "cache/locks.h"
#include "cache/transport.h"
#include "shim/config.h"
#include "shim/init.h"
#include "shim/log.h"
#include "shim/ze.h"

#define API_FD "zeMemGetFileDescriptorFromIpcHandleExp"
#define DUPS 64

/* Duplicates handed out: which by-value handle each came from. */
static struct {
    byval_lock_t lock;
    struct dup {
        int fd1; /* the fd + 1; 0: free */
        uint32_t ino;
        ze_ipc_mem_handle_t handle;
    } d[DUPS];
    unsigned next;
} dups = {.lock = BYVAL_LOCK_INIT(ZE_FDCONV)};

/* fork: the table stays right in the child (it inherits the duplicates,
 * open); only the lock must not be inherited held. A leaf: nothing is
 * taken or called out under it but fcntl and fstat. */
BYVAL_LOCK_STATIC(ze_fdconv, &dups.lock);

/* 1 while fd is open on the object whose inode's low bits are ino. */
static int still_names(int fd, uint32_t ino)
{
    return fd >= 0 && fcntl(fd, F_GETFD) >= 0 && (uint32_t)byval_fd_inode(fd) == ino;
}

/* The duplicate handed out for handle (fd < 0), or fd as a duplicate
 * (its handle in *out), while it names what it did: the fd, or -1. */
static int dup_find(const ze_ipc_mem_handle_t *handle, int fd, ze_ipc_mem_handle_t *out)
{
    int found = -1;
    byval_lock(&dups.lock);
    for (int i = 0; i < DUPS && found < 0; i++)
        if (dups.d[i].fd1 &&
            (fd < 0 ? !memcmp(&dups.d[i].handle, handle, sizeof(*handle))
                    : dups.d[i].fd1 == fd + 1) &&
            still_names(dups.d[i].fd1 - 1, dups.d[i].ino)) {
            found = dups.d[i].fd1 - 1;
            if (out)
                *out = dups.d[i].handle;
        }
    byval_unlock(&dups.lock);
    return found;
}

static void dup_remember(int fd, uint32_t ino, const ze_ipc_mem_handle_t *handle)
{
    byval_lock(&dups.lock);
    unsigned slot = DUPS;
    for (unsigned i = 0; i < DUPS && slot == DUPS; i++)
        if (dups.d[i].fd1 == fd + 1 || !dups.d[i].fd1) /* a number reused, or free */
            slot = i;
    if (slot == DUPS)
        slot = dups.next++ % DUPS; /* forget the oldest (never closed: the caller's) */
    dups.d[slot] = (struct dup){fd + 1, ino, *handle};
    byval_unlock(&dups.lock);
}

ze_result_t byval_ze_fd_from_ipc(byval_ze_fd_from_ipc_fn next, ze_context_handle_t ctx,
                                 ze_ipc_mem_handle_t handle, uint64_t *fd_p)
{
    byval_record_t rec;
    if (!next)
        return ZE_RESULT_ERROR_UNSUPPORTED_FEATURE;
    if (!fd_p || !byval_init() || !byval_cfg.ze)
        return next(ctx, handle, fd_p);
    if (!byval_ze_foreign(handle.data, &rec)) {
        ze_result_t r = next(ctx, handle, fd_p);
        /* The caller may hand this fd to a peer by number (its own
         * pidfd_getfd): the rescue may serve it (shim/syscall.c). */
        if (r == ZE_RESULT_SUCCESS && *fd_p <= INT32_MAX)
            byval_export_register_fd((int)*fd_p);
        return r;
    }
    int fd = dup_find(&handle, -1, NULL);
    if (fd < 0) {
        ze_result_t r = byval_ze_resolve_as(API_FD, &rec, &fd);
        if (r != ZE_RESULT_SUCCESS)
            return r;
        dup_remember(fd, rec.fd_ino, &handle);
        BYVAL_LOG_DEBUG(API_FD ": pid %u fd %u is fd %d here (the caller's to close)", rec.pid,
                        rec.fd, fd);
    }
    *fd_p = (uint64_t)fd;
    byval_export_register_fd(fd); /* as above: GPU memory the caller may pass on */
    return ZE_RESULT_SUCCESS;
}

ze_result_t byval_ze_ipc_from_fd(byval_ze_ipc_from_fd_fn next, ze_context_handle_t ctx, uint64_t fd,
                                 ze_ipc_mem_handle_t *handle)
{
    if (!next)
        return ZE_RESULT_ERROR_UNSUPPORTED_FEATURE;
    if (!handle || fd > INT32_MAX || !byval_init() || !byval_cfg.ze)
        return next(ctx, fd, handle);
    /* One of our duplicates: the by-value handle it came from. */
    if (dup_find(NULL, (int)fd, handle) >= 0)
        return ZE_RESULT_SUCCESS;
    /* The driver's own export (else its error, as natively). */
    byval_ze_pattern((uint8_t *)handle->data, BYVAL_ZE_RECORD_OFF, 1);
    byval_enter();
    ze_result_t r = next(ctx, fd, handle);
    byval_leave();
    if (r != ZE_RESULT_SUCCESS)
        return r;
    /* What zeMemGetIpcHandle handed out for it, record and all. */
    if (byval_ze_export_by_fd((int)fd, handle))
        return r;
    /* Exported another way (the export cache full, zex): describe the
     * object alone; importers then release their mapping at its close. */
    uint64_t id = BYVAL_ZE_FD_ALLOC_BIT | (uint32_t)byval_fd_inode((int)fd);
    byval_ze_describe((uint8_t *)handle->data, ctx, NULL, id, NULL, 0);
    return r;
}
