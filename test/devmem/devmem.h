/* SPDX-License-Identifier: MIT */
/*
 * devmem: device-memory accounting for the test drivers (the CUDA double
 * in test/cudadrv, the Level Zero driver in test/zedrv), shared by every
 * process that uses the same ledger.
 *
 * On a GPU an allocation stays allocated while anything refers to it: the
 * exporter's allocation and every importer's mapping. An exporter that
 * frees memory an importer still maps does not get it back until the
 * importer unmaps (measured on an H100 with driver 580: cuMemGetInfo in
 * the exporter stays 1 GiB lower after its cuMemFree until the importer's
 * cuIpcCloseMemHandle). The doubles back allocations with memfds, which
 * the kernel keeps alive the same way, but no process can see what the
 * others hold. The ledger makes it visible: a file of slots, one per
 * physical allocation (size, device, "the allocating process freed it"),
 * and per slot a byte-range read lock (F_OFD_SETLK) held by every process
 * that refers to the allocation. The kernel drops a process's locks when
 * it exits, however it exits, so a slot nobody holds any more is found by
 * probing its lock (F_OFD_GETLK) and reclaimed.
 *
 * Environment, PREFIX being CUDADRV or ZEDRV (read once per process):
 *   PREFIX_TOTAL_MEM=SIZE   device memory per device (bytes; K, M, G, T
 *                           suffixes, powers of 1024). An allocation that
 *                           would take the device's use above it fails
 *                           with the API's out-of-memory error. Default:
 *                           the double's own (an H100's 81559 MiB for
 *                           CUDA, 128 GiB for Level Zero).
 *   PREFIX_LEDGER=PATH      the ledger file shared by cooperating
 *                           processes (created if missing, never
 *                           removed). Without it but with PREFIX_TOTAL_MEM
 *                           set, /dev/shm/PREFIX-ledger-<uid>-<session
 *                           id>. With neither, the ledger is a private
 *                           memfd: each process counts only what it holds.
 *
 * All functions are thread-safe. Names are hidden (-fvisibility=hidden):
 * each library that links this file has its own ledger state.
 */
#ifndef DEVMEM_H
#define DEVMEM_H

#include <stddef.h>
#include <stdint.h>

#define DEVMEM_NONE UINT32_MAX
#define DEVMEM_MAX_DEVICES 16
/* Enough for the name of a memfd: "L<16 hex>.<slot>.<generation>". */
#define DEVMEM_TAG_LEN 48

/** One process's reference to a ledger slot; slot DEVMEM_NONE: untracked. */
struct devmem_ref {
    uint32_t slot;
    uint64_t gen;
};

struct devmem_stats {
    uint64_t total;      /* PREFIX_TOTAL_MEM or the default */
    uint64_t used;       /* bytes of allocations someone still refers to */
    uint64_t freed_held; /* of those, bytes their allocator freed: held by importers */
    uint32_t allocs;     /* live slots */
    uint32_t shared;     /* 1 when the ledger is shared between processes */
};

/** Reads PREFIX_TOTAL_MEM and PREFIX_LEDGER and opens the ledger; later
 * calls do nothing. default_total applies when PREFIX_TOTAL_MEM is unset. */
void devmem_setup(const char *prefix, uint64_t default_total);

/** A new allocation of size bytes on dev, held by this process. Returns 0
 * (ref set; slot DEVMEM_NONE when accounting is unavailable) or -1 when
 * the device's use would exceed the total (out of memory). */
int devmem_alloc(int dev, uint64_t size, struct devmem_ref *ref);

/** Takes a reference to the allocation that tag (devmem_tag of its
 * allocator, carried in the memfd name) names. An allocation of another
 * ledger, one already reclaimed, or an empty tag gets a slot of its own
 * (the memory is held, whoever allocated it). Never fails for the limit:
 * importing existing memory allocates none. */
void devmem_acquire(const char *tag, int dev, uint64_t size, struct devmem_ref *ref);

/** Drops this reference. owner: the allocating side frees its allocation
 * (the slot is marked freed; importers may still hold it). ref is reset. */
void devmem_release(struct devmem_ref *ref, int owner);

/** Writes the slot's tag, or "" for an untracked reference. */
void devmem_tag(const struct devmem_ref *ref, char *buf, size_t len);

/** Totals for dev (after reclaiming slots whose holders all exited). */
void devmem_stats(int dev, struct devmem_stats *st);

/** Parses "123", "64K", "512M", "2G", "1T"; 0 on a malformed value. */
uint64_t devmem_parse_size(const char *s);

#endif
