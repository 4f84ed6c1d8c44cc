/* SPDX-License-Identifier: MIT */
/*
 * registry_find.c - where an exporter keeps its registry's fd, as an
 * importer finds it before anything is duplicated: at the number the
 * library puts it (BYVAL_REG_FD_HINT, one statx), else in the list of
 * /proc/PID/fd.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "handles/fdkind.h"
#include "handles/registry_internal.h"

/* Is the fd `name` of dirfd (a /proc/PID/fd) our registry? Its link names
 * our memfd (readlink opens nothing) and the kernel's cached attributes
 * (AT_STATX_DONT_SYNC: never a FUSE daemon's answer, whatever a hostile
 * exporter mounted at a path reading like ours) show a regular file of
 * the page's size; the fetch proves the rest (fdcheck.c). */
static int registry_at(int dirfd, const char *name, uint32_t *ino_p)
{
    static const char want[] = "/memfd:" BYVAL_REG_NAME " (deleted)";
    char link[128];
    struct statx stx;
    ssize_t n = readlinkat(dirfd, name, link, sizeof(link) - 1);
    if (n != (ssize_t)sizeof(want) - 1 || memcmp(link, want, (size_t)n) != 0 ||
        byval_fdk_stat(dirfd, name, 0, &stx) != 0 || !S_ISREG(stx.stx_mode) ||
        stx.stx_size != BYVAL_REG_BYTES)
        return 0;
    *ino_p = (uint32_t)stx.stx_ino;
    return 1;
}

/* Its registry's fd number and inode. First (try_hint) at BYVAL_REG_FD_HINT, where
 * the library puts it: one statx of /proc/PID/fd/1000 (opening nothing,
 * cached attributes) that PROVES before anything is duplicated what the
 * check before pidfd_getfd proves of any object (fdcheck.c): a file of
 * the kernel's shmem mount, of the page's exact size; *seen then holds
 * it for the check after (same device and inode), and the seals, the
 * magic and the identity in the header come after that (view_map). The
 * link text is not read: any path can read like a memfd's, a device
 * cannot. Else the list of /proc/PID/fd (seen->kind 0: the fetch's own
 * precheck runs). 0, or an errno: ENOENT (none), EACCES/EPERM (ptrace
 * rules), EMFILE... */
int byval_reg_find_page(int pid, int try_hint, uint32_t *fd_p, uint32_t *ino_p,
                        byval_fd_seen_t *seen)
{
    char dir[64];
    struct statx stx;
    memset(seen, 0, sizeof(*seen));
    snprintf(dir, sizeof(dir), "/proc/%d/fd/%u", pid, BYVAL_REG_FD_HINT);
    if (try_hint && byval_fdk_stat(AT_FDCWD, dir, 0, &stx) == 0 &&
        stx.stx_size == BYVAL_REG_BYTES && byval_fdk_classify_fast(&stx) == FDK_SHMEM) {
        *fd_p = BYVAL_REG_FD_HINT;
        *ino_p = (uint32_t)stx.stx_ino;
        *seen = (byval_fd_seen_t){byval_fdk_dev(&stx), stx.stx_ino, FDK_SHMEM};
        return 0;
    }
    snprintf(dir, sizeof(dir), "/proc/%d/fd", pid);
    DIR *d = opendir(dir);
    if (!d)
        return errno;
    int rc = ENOENT;
    for (struct dirent *e; rc != 0 && (e = readdir(d)) != NULL;) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9' || !registry_at(dirfd(d), e->d_name, ino_p) ||
            (!try_hint && atoi(e->d_name) == (int)BYVAL_REG_FD_HINT))
            continue;
        *fd_p = (uint32_t)atoi(e->d_name);
        rc = 0;
    }
    closedir(d);
    return rc;
}
