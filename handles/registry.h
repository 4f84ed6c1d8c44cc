/* SPDX-License-Identifier: MIT */
/*
 * registry.h - the exporter's table of what it exported, shared with its
 * importers read-only, and the importers' reader of it.
 *
 * Why: an importer keeps a closed mapping cached for a cheap re-open, but
 * natively the memory comes back to the exporter when it frees the
 * allocation and every importer closed it. So the exporter publishes, per
 * export, whether the allocation is still live, and wakes its importers
 * when one is freed; an importer releases its closed mappings of a freed
 * allocation at once, and its hit path refuses a freed one.
 *
 * Layout: a memfd named "ipcbyval-registry" (a 64-byte header, then
 * BYVAL_REG_SLOTS slots of 32 bytes). A slot's serial is non-zero while
 * its export is live; the exporter stores 0 (release) when the allocation
 * is freed, then bumps the header's seq and writes a byte to a pipe whose
 * read end importers hold (epoll, edge-triggered: every write wakes every
 * importer; the write end closes at the exporter's exit or exec, which
 * importers see as a hang-up: that process image's exports are all gone;
 * as a peer can hold a write end too, importers that see the exporter in
 * /proc also check once a second that it still holds its registry).
 * Serials are never reused in a process image, so an importer that noted
 * (slot, serial) at attach time tells "freed" from "slot reused" with one
 * load. Importers find the memfd by its name at /proc/PID/fd/1000
 * (BYVAL_REG_FD_HINT; readlink opens nothing), else in the list of
 * /proc/PID/fd, and fetch it and the pipe's read end through the same
 * transport as the exported fds (both are offered to the socket broker).
 *
 * Trust (issue 22): the exporter owns the page and the pipe. It keeps its
 * own bookkeeping in private memory and only writes the page; the page is
 * sealed (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL)
 * and reachable only as a read-only open file, so a peer can neither
 * resize it (no SIGBUS for anyone) nor write it. An importer refuses a
 * page without those seals, maps it PROT_READ, and reads every field as
 * written by a hostile exporter (which its own exporter may be): counts
 * are clamped to the table, nothing read indexes anything unchecked. The
 * pipe's read end is shared by every holder: importers only watch it
 * (never read: a byte one reader takes is a wake-up another may miss,
 * registry_watch.c), and the exporter empties a full pipe through an open
 * file of its own (registry.c). A peer that can open the pipe can write
 * it: what that costs an importer is bounded per exporter
 * (registry_watch.c); a peer that reads it can delay a release until the
 * next free or the exporter's exit (the same uid: it could as well ptrace
 * either side).
 *
 * No GPU API here: keys are whatever the shim names an allocation by.
 */
#ifndef BYVAL_HANDLES_REGISTRY_H
#define BYVAL_HANDLES_REGISTRY_H

#include <stddef.h>
#include <stdint.h>

#include "handles/wire.h"

#define BYVAL_REG_MAGIC UINT64_C(0x3167657279627969) /* "iybyreg1" */
#define BYVAL_REG_VERSION 1u
#define BYVAL_REG_SLOTS 8192u /* twice the default export cache */
#define BYVAL_REG_NAME "ipcbyval-registry"

/* Where an exporter keeps its registry's fd: the lowest free number from
 * here (F_DUPFD_CLOEXEC), so that an importer reads one link,
 * /proc/PID/fd/1000, instead of listing the exporter's whole fd table
 * (100-150 us for 40 fds, and it grows with them). What it finds there
 * is proven exactly as a listed one (registry_view.c); where the number
 * was taken, or the exporter's RLIMIT_NOFILE is below it, the registry
 * stays where memfd_create put it and importers list the table. Below
 * the usual soft limit (1024), above what most programs reach, and none
 * of the numbers shells take for themselves (10 and up, 255). It also
 * keeps the application's own fd numbers what they are natively. */
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

/* ---- exporter side ----------------------------------------------------
 * Who owns an export's entry: the export core (cache/exports.h, through
 * the shim's sink) adds it when the export starts and removes it when the
 * export ends (free, context or event-pool destroy, eviction), before the
 * driver can close the fd it names; entries of one (key, ino) held by
 * several exports are removed with the last. */

/* Publish a live export (created on first use, with its pipe). Returns 0,
 * or -1 (no memfd/pipe/slot: importers will not track this export and
 * keep it only within their byte budget). Adding a live (key, ino) again
 * is a no-op. */
int byval_reg_add(uint64_t key, uint32_t ino, uint32_t fd, uint64_t size);

/* The same, with the export's serial (the live entry's when it was
 * published already) in *serial_p: what a short record names
 * (handles/wire.h). */
int byval_reg_add_serial(uint64_t key, uint32_t ino, uint32_t fd, uint64_t size,
                         uint64_t *serial_p);

/* The allocation behind (key, ino) is gone: mark it and wake importers.
 * ino 0 matches any. Cheap when the key was never published. */
void byval_reg_remove(uint64_t key, uint32_t ino);

/* Exports published and not withdrawn (a relaxed read: a hint). */
unsigned byval_reg_exports_live(void);

/* The registry page's read-only fd and the pipe's read end, to offer them
 * to the socket broker: 0 once per registry (the first call after it was
 * made; a fork child's exports make a new one), else -1. */
int byval_reg_fds_to_offer(int *page_fd_p, int *pipe_rd_p);

/* A duplicate (O_CLOEXEC) of the page's read-only fd, what peers get, for
 * an importer that cannot find its number in our /proc (another pid
 * namespace: handles/rendezvous_registry.c). 0, -EBADF (no registry yet)
 * or -errno. */
int32_t byval_reg_dup_page(int *dup_p);

/* ---- exporter side, by fd (registry_fds.c) ------------------------------
 * fd was handed out as exported GPU memory (ours or the application's):
 * the socket broker may serve that number to a peer whose pidfd_getfd the
 * kernel refused, for as long as it refers to the same open file. 0, or -1
 * with errno: ENOTSUP when the file can be proven neither by epoll nor by
 * its inode (see registry_fds.c), ENOSPC when the table is full of live
 * exports. Registering a number again is a no-op (or a new export when the
 * number now holds another file). */
int byval_reg_add_fd(int fd);

/* The export that handed out fd ends (the export core, before the driver
 * can close fd): the number is served no more. No-op when not registered. */
void byval_reg_drop_fd(int fd);

/* Broker: *dup_p = a duplicate (O_CLOEXEC) of fd when it is registered and
 * still the exported open file; returns 0, -EBADF (never registered),
 * -ESTALE (closed or reused since: dropped), or -errno of the duplicate. */
int byval_reg_dup_fd(int fd, int *dup_p);

/* Registered numbers (tests), and requests served and refused. */
unsigned byval_reg_fds_live(void);
void byval_reg_fd_counts(uint64_t *served_p, uint64_t *refused_p);

/* fork(): the registry holds its lock across fork; the child forgets the
 * parent's registry (its own exports start a new one). */

#endif
