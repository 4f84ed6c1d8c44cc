/* SPDX-License-Identifier: MIT */
/* test_fdcheck.h - the FUSE file system of test_fdcheck_fuse.c, for the
 * cases of test_fdcheck.c that must never wait on it. */
#ifndef BYVAL_TEST_FDCHECK_H
#define BYVAL_TEST_FDCHECK_H

#include <sys/types.h>

typedef struct fuse_world {
    char root[64]; /* a private tmpfs: mnt/ (FUSE), jail/ (chroot with proc/) */
    char mnt[96];
    pid_t daemon;
    int ctl, report;
} fuse_world_t;

/* Mount the daemon's file system at root/subdir in a private mount
 * namespace (this test process's own, from here on); root also holds a
 * chroot jail with proc/. NULL on success, else why not. Writing a pid
 * to ctl stalls that process's requests from then on; report gives the
 * count of requests seen since. */
const char *fuse_up(fuse_world_t *w, const char *subdir);
/* Kill the daemon (anything waiting returns) and unmount. */
void fuse_down(fuse_world_t *w);

#endif
