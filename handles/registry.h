/* SPDX-License-Identifier: MIT */
/*
 * registry.h - the exporter's table of what it exported, shared with its
 * importers read-only. An importer keeps closed mappings cached, but
 * natively the memory returns to the exporter when it frees it and every
 * importer closed it; so the exporter publishes per export whether it is
 * live, and wakes its importers at each free.
 *
 * Layout: a sealed memfd named "ipcbyval-registry", a 64-byte header then
 * BYVAL_REG_SLOTS slots of 32 bytes. A slot's serial is non-zero while its
 * export lives and never reused, so (slot, serial) noted at attach tells
 * "freed" from "reused" in one load. At a free the exporter stores 0, bumps
 * the header's seq and writes a byte to a pipe whose read end importers
 * watch (its hang-up: the exporter's image is gone). Both are fetched
 * through the transport like exported fds and offered to the broker.
 *
 * Trust: the page is sealed against resizing and writes and served
 * read-only; importers read every field as hostile (counts clamped,
 * values only compared). Importers never read the pipe; the exporter
 * empties it when full through an open file of its own. man/ipcbyval.7
 * (SECURITY) has the rest.
 */
#ifndef BYVAL_HANDLES_REGISTRY_H
#define BYVAL_HANDLES_REGISTRY_H

#include "handles/wire.h"

#define BYVAL_REG_MAGIC UINT64_C(0x3167657279627969) /* "iybyreg1" */
#define BYVAL_REG_VERSION 1u
#define BYVAL_REG_SLOTS 8192u /* twice the default export cache */
#define BYVAL_REG_NAME "ipcbyval-registry"

/* Where an exporter keeps its registry's fd (the lowest free number from
 * here): importers read one link, /proc/PID/fd/1000, instead of listing
 * the whole fd table; where it is taken they list it. Below the usual
 * soft limit, above what programs and shells take. */
#define BYVAL_REG_FD_HINT 1000

typedef struct byval_reg_header {
    uint64_t magic;
    uint32_t version;
    uint32_t nslots;
    uint32_t pid;      /* the exporter, in its own pid namespace */
    uint32_t pipe_fd;  /* the wake-up pipe's read end, in the exporter */
    uint64_t identity; /* as in its records (pidfs inode or start time) */
    uint32_t high;     /* slots [0, high) have been used */
    uint32_t pipe_ino;
    uint64_t seq; /* bumped at every free */
    uint8_t pad[16];
} byval_reg_header_t;

typedef struct byval_reg_slot {
    uint64_t key;    /* the allocation, as the shim names it */
    uint32_t ino;    /* the exported fd's inode (low 32 bits), 0: none */
    uint32_t fd;     /* the exported fd's number in the exporter */
    uint64_t serial; /* != 0 while live; never reused */
    uint64_t size;   /* bytes exported */
} byval_reg_slot_t;

_Static_assert(sizeof(byval_reg_header_t) == 64, "registry header is 64 bytes");
_Static_assert(sizeof(byval_reg_slot_t) == 32, "registry slot is 32 bytes");

/* The page's size: what the seals fix it at. */
#define BYVAL_REG_BYTES (sizeof(byval_reg_header_t) + BYVAL_REG_SLOTS * sizeof(byval_reg_slot_t))

/* Registry keys: what an allocation is named by in both processes. */
#define BYVAL_REG_KEY(kind, alloc_id) \
    ((uint64_t)(kind) << 56 | ((alloc_id)&BYVAL_WIRE_MAX_ALLOC_ID))
/* A legacy CUDA handle names itself: a hash of its 64 bytes. */
uint64_t byval_reg_key_bytes(const void *bytes, size_t len);

/* Exporter (the export core, cache/exports.h): publish a live export (the
 * registry is made at the first). 0, or -1 (not tracked by importers).
 * Adding a live (key, ino, fd) again is a no-op. _serial: the export's
 * serial in *serial_p (what a short record names). */
int byval_reg_add(uint64_t key, uint32_t ino, uint32_t fd, uint64_t size);
int byval_reg_add_serial(uint64_t key, uint32_t ino, uint32_t fd, uint64_t size,
                         uint64_t *serial_p);

/* The allocation behind (key, ino) is gone (before the driver can close
 * its fd): mark it and wake importers. ino 0 matches any. */
void byval_reg_remove(uint64_t key, uint32_t ino);

/* The page's read-only fd and the pipe's read end, to offer to the
 * broker: 0 once per registry, else -1. */
int byval_reg_fds_to_offer(int *page_fd_p, int *pipe_rd_p);

/* Broker: a duplicate (O_CLOEXEC) of the page's read-only fd, for an
 * importer that cannot see our /proc. 0, -EBADF (none yet), -ESTALE. */
int32_t byval_reg_dup_page(int *dup_p);

/* By fd (registry_fds.c): fd was handed out as exported GPU memory (ours
 * or the application's), so the broker may serve that number to a peer
 * whose pidfd_getfd the kernel refused, while it refers to the same open
 * file. 0, or -1 with errno (ENOTSUP: cannot be proven; ENOSPC: full). */
int byval_reg_add_fd(int fd);

/* The export that handed out fd ends: the number is served no more. */
void byval_reg_drop_fd(int fd);

/* Broker: *dup_p = a duplicate (O_CLOEXEC) of fd when it is registered and
 * still the exported open file; returns 0, -EBADF (never registered),
 * -ESTALE (closed or reused since: dropped), or -errno of the duplicate. */
int byval_reg_dup_fd(int fd, int *dup_p);

/* Registered numbers (tests), and requests served and refused. */
unsigned byval_reg_fds_live(void);
void byval_reg_fd_counts(uint64_t *served_p, uint64_t *refused_p);

#endif
