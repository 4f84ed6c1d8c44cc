/* SPDX-License-Identifier: MIT */
/*
 * cudadrv: what a VMM export fd is (drv_vmm.c exports and imports them).
 *
 * Export fds share ONE inode, as on the real driver, where every export is
 * a new open file of /dev/nvidiactl (so an inode cannot tell a freed
 * export's reused fd number from a live one: issue 22, defect 0). Here the
 * shared file is a per-process control memfd ("cudadrv-vmmctl"): each
 * export reopens it (a new open file) with its file position at a record
 * naming the allocation's memfd in the exporter (number and inode), and
 * the exporter's pid as the open file's owner (F_SETOWN), which the
 * kernel translates into each reader's pid namespace. An importer reopens
 * that memfd through /proc/<owner>/fd/<number> and checks its inode: an
 * allocation freed since (its memfd closed or the number reused) is
 * CUDA_ERROR_INVALID_VALUE.
 *
 * That reopen needs the exporter's /proc, which an importer in another
 * pid and mount namespace does not see (the real driver's fds carry the
 * object themselves). CUDADRV_VMM_EXPORT=memfd exports the allocation's
 * memfd itself instead (one inode per allocation, reachable anywhere): the
 * cross-namespace tests use it; the shared-inode default is what the
 * per-chunk proof is tested against. Imports accept both.
 */
#include "cudadrv.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define CTL_NAME "cudadrv-vmmctl"
#define CTL_MAGIC 0x6c74636d6d766364ull /* "dcvmmctl" */

/* One export's record in the control memfd. */
struct ctl_rec {
    uint64_t magic;
    uint64_t ino; /* the allocation memfd's inode */
    int32_t memfd; /* its number in the exporter */
    int32_t pad;
};

static int ctl_fd = -1;  /* this process's control memfd, under cudadrv_lock */
static pid_t ctl_pid;    /* the process that made it (a fork child makes its own) */
static uint64_t ctl_next; /* records written */

/* A new open file of the control memfd positioned at a record naming a's
 * memfd (see the top comment), or -1. Caller holds cudadrv_lock. */
int cudadrv_vmm_ctl_export(const struct cudadrv_alloc *a)
{
    char path[64];
    struct stat st;
    const char *mode = getenv("CUDADRV_VMM_EXPORT");
    if (mode && !strcmp(mode, "memfd"))
        return fcntl(a->fd, F_DUPFD_CLOEXEC, 0);
    if (ctl_pid != getpid()) {
        if (ctl_fd >= 0)
            close(ctl_fd); /* the parent's: a fork child exports its own */
        ctl_fd = memfd_create(CTL_NAME, MFD_CLOEXEC);
        ctl_pid = getpid();
        ctl_next = 0;
    }
    if (ctl_fd < 0 || fstat(a->fd, &st) != 0)
        return -1;
    struct ctl_rec rec = {CTL_MAGIC, (uint64_t)st.st_ino, a->fd, 0};
    off_t at = (off_t)(ctl_next * sizeof(rec));
    if (pwrite(ctl_fd, &rec, sizeof(rec), at) != (ssize_t)sizeof(rec))
        return -1;
    ctl_next++;
    snprintf(path, sizeof(path), "/proc/self/fd/%d", ctl_fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd >= 0 && (fcntl(fd, F_SETOWN, getpid()) != 0 || lseek(fd, at, SEEK_SET) != at)) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* The allocation memfd an export fd of any process names, opened anew
 * (O_CLOEXEC), or -1 when it is no export or its allocation is gone. */
int cudadrv_vmm_ctl_import(int fd)
{
    char path[64], link[160];
    struct ctl_rec rec;
    struct stat st;
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(path, link, sizeof(link) - 1);
    link[n < 0 ? 0 : n] = '\0';
    off_t at = lseek(fd, 0, SEEK_CUR);
    int owner = fcntl(fd, F_GETOWN);
    if (strcmp(link, "/memfd:" CTL_NAME " (deleted)") != 0 || at < 0 || owner <= 0 ||
        pread(fd, &rec, sizeof(rec), at) != (ssize_t)sizeof(rec) || rec.magic != CTL_MAGIC ||
        rec.memfd < 0)
        return -1;
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", owner, rec.memfd);
    int mfd = open(path, O_RDWR | O_CLOEXEC);
    if (mfd >= 0 && (fstat(mfd, &st) != 0 || (uint64_t)st.st_ino != rec.ino)) {
        close(mfd);
        mfd = -1;
    }
    return mfd;
}
