/* SPDX-License-Identifier: MIT */
/*
 * rdv_pair: an exporter and an importer as two separate programs that
 * share only a directory, so that the test script can put each in its own
 * pid, network and mount namespaces (two pods, one container per rank).
 * They talk through two FIFOs in that directory (DIR/c.h: handles, DIR/c.a:
 * answers; the script makes them), nothing else. The GPU API is a
 * backend (rdv_ze.c: Level Zero, rdv_cu.c: CUDA); nothing here knows
 * about ipcbyval.
 *
 *   PROG export DIR [--case C] [--rounds N] [--size BYTES] [BACKEND OPTS]
 *   PROG import DIR [--case C] [--rounds N] [BACKEND OPTS]
 * Cases:
 *   rounds  N rounds: the exporter allocates, fills, sends the handle; the
 *           importer opens, checks every byte, closes, answers; the
 *           exporter frees. The importer prints "OK rdv rounds: N of N
 *           verified" (exit 0) or "FAILED rdv: ..." (exit 1).
 *   free    as rounds, and after each free the exporter waits (3 s at
 *           most) until the device-memory ledger shows none of its freed
 *           memory held, while the importer sits idle waiting for the next
 *           handle: "OK rdv free: N rounds released, slowest X ms".
 *   exit    one round; the exporter then exits without freeing; the
 *           importer, idle, waits (3 s at most) until the ledger shows no
 *           memory held at all: "OK rdv exit: released X ms after".
 *   pools   (Level Zero) N rounds of event pools: the exporter signals,
 *           the importer opens, checks, signals back, closes.
 *   seq     one handle through a fixed sequence of opens, closes (one of
 *           them a double close) and context destructions on both sides
 *           (rdv_seq.c); the importer prints the API's return codes as
 *           one line "SEQ ...", to compare between runs (one namespace,
 *           separate namespaces, with and without ipcbyval).
 * --double-close: the importer closes each mapping twice; the second
 * close must fail (the driver's error) and change nothing: the next
 * round's open must still verify.
 * --hold FILE: wait (30 s at most) for FILE before each send (exporter)
 * or open (importer), so that the script can act in between.
 *   PROG plant PATH UID SECONDS: an impostor: listen at PATH (owned by
 *   UID) for SECONDS, then print "plant: N connections".
 *   PROG stale PATH: wait (5 s at most) until nobody listens at PATH.
 * The ledger is the test drivers' (test/devmem): ZEDRV_LEDGER or
 * CUDADRV_LEDGER in DIR, shared by both sides.
 */
#ifndef RDV_PAIR_H
#define RDV_PAIR_H

#include <stddef.h>
#include <stdint.h>

#define RDV_HANDLE 64

/* A backend: every call returns 0 on success, else prints why and
 * returns nonzero. */
struct rdv_ops {
    const char *name;
    /* Parse one backend option at argv[i] (return how many taken, 0: not ours). */
    int (*option)(int argc, char **argv, int i);
    int (*init)(int exporter);
    /* Exporter: allocate size bytes filled from seed, its handle in h. */
    int (*export_one)(size_t size, uint64_t seed, uint8_t h[RDV_HANDLE], void **alloc_p);
    int (*free_one)(void *alloc);
    /* Importer: open h, check size bytes against seed (1 right, 0 wrong), close. */
    int (*import_one)(const uint8_t h[RDV_HANDLE], size_t size, uint64_t seed, int *right_p);
    /* The ledger: bytes held in all (used) and freed but held; -1: none. */
    int (*ledger)(uint64_t *used_p, uint64_t *freed_held_p);
    /* Event pools (may be NULL): export one, import and check one. */
    int (*pool_export)(uint8_t h[RDV_HANDLE], void **pool_p);
    int (*pool_wait)(void *pool); /* the importer's signal arrived; destroy */
    int (*pool_import)(const uint8_t h[RDV_HANDLE]);
    /* The seq case (rdv_seq.c; may be NULL): each returns the API's own
     * code (0: success). open: *map_p the mapping; check: 1 when size
     * bytes at map match seed, 0 when not; ctx_renew: destroy our context
     * (its code) and make a fresh one current (a driver may hand back the
     * same handle value). */
    int (*seq_open)(const uint8_t h[RDV_HANDLE], void **map_p);
    int (*seq_check)(void *map, size_t size, uint64_t seed);
    int (*seq_close)(void *map);
    int (*seq_ctx_renew)(void);
};

/* What goes through DIR/c.h: a handle (round 0: no more). */
struct rdv_msg {
    uint32_t round;
    uint32_t pad;
    uint64_t seed, size;
    uint8_t h[RDV_HANDLE];
};

/* The seq case, each side (rdv_seq.c): 0, or 1 with why on stderr. */
int rdv_seq_exporter(const struct rdv_ops *ops, int hfd, int afd, size_t size);
int rdv_seq_importer(const struct rdv_ops *ops, int hfd, int afd);

/* --double-close given (the backends' import_one closes twice). */
extern int rdv_double_close;

/* The whole program (rdv_pair.c). */
int rdv_main(int argc, char **argv, const struct rdv_ops *ops);

/* The byte pattern of (seed), for the backends' fill and check. */
void rdv_fill(uint8_t *buf, size_t len, uint64_t seed);
int rdv_check(const uint8_t *buf, size_t len, uint64_t seed);

#endif
