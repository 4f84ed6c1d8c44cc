/* SPDX-License-Identifier: MIT */
/* fdkind.h - the kinds of object an exporter's fd may be and their proofs
 * (fdkind.c), shared by the checks before and after pidfd_getfd
 * (fdcheck.c); internal to handles/. */
#ifndef BYVAL_HANDLES_FDKIND_H
#define BYVAL_HANDLES_FDKIND_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "handles/resolve.h"

enum { FDK_NONE, FDK_SHMEM, FDK_DMABUF, FDK_DMABUF_ANON, FDK_NVIDIA, FDK_PIPE };

/* "a memfd", "a dma-buf"... by FDK_* (FDK_NONE: ""). */
extern const char *const byval_fdk_name[];

/* The device of what stx describes. */
uint64_t byval_fdk_dev(const struct statx *stx);

/* statx from the kernel's cached attributes (AT_STATX_DONT_SYNC): never a
 * FUSE daemon's or a network server's round trip. */
int byval_fdk_stat(int dirfd, const char *path, int flags, struct statx *stx);

/* The kind statx alone proves (memfd, pipe, NVIDIA, a dma-buf of the
 * device seen before), else FDK_NONE. */
int byval_fdk_classify_fast(const struct statx *stx);

/* The same, then from the link text of its /proc fd link and the path of
 * its fdinfo (a dma-buf not seen yet, an old kernel's). */
int byval_fdk_classify(const struct statx *stx, const char *link, const char *fdinfo);

/* 1 if an object of kind may be what obj asks for. */
int byval_fdk_allowed(int kind, byval_obj_t obj);

/* What obj asks for, in words. */
const char *byval_fdk_expected(byval_obj_t obj);

/* The link text at path into buf ("" if unreadable). */
const char *byval_fdk_link(const char *path, char *buf, size_t len);

#endif
