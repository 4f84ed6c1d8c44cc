/* SPDX-License-Identifier: MIT */
/*
 * rdv_seq - the seq case of rdv_pair (rdv_pair.h): what a program sees
 * from a fixed sequence, as return codes, so that a run across
 * namespaces can be held against one in a single namespace (issue 24:
 * "double close, context destroy and id reuse behave as in one
 * namespace"). The importer:
 *   open       open the handle (a first open)           -> code; check
 *   close      close it                                  -> code
 *   close2     close it again (a double close)           -> code
 *   reopen     open it again (a cache may serve it)      -> code; check
 *   ctx        destroy our context while that mapping is open, make a
 *              new one current (same handle value, where the driver
 *              reuses it)                                -> code
 *   close_dead close the mapping of the dead context     -> code
 *   open_new   open the handle in the new context        -> code; check
 * then tells the exporter, which destroys ITS context while the importer
 * holds that mapping (exp_ctx -> code), and:
 *   check_held the held mapping's bytes                  -> 1 right, 0 wrong
 *   close_held close it                                  -> code
 *   open_after open the handle again                     -> code
 * and prints all as "SEQ name=value ...". Codes are the API's (0:
 * success); a check of a failed open is -1.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "test/io_all.h"
#include "test/transport/rdv_pair.h"

#define SEED 0x5eedf00dull

int rdv_seq_exporter(const struct rdv_ops *ops, int hfd, int afd, size_t size)
{
    struct rdv_msg m = {.round = 1, .seed = SEED, .size = size};
    void *alloc = NULL;
    int32_t ack = 0;
    if (!ops->seq_ctx_renew) {
        fprintf(stderr, "rdv %s: no seq case\n", ops->name);
        return 1;
    }
    if (ops->export_one(size, m.seed, m.h, &alloc) || test_io_all(hfd, &m, sizeof(m), 1) ||
        test_io_all(afd, &ack, sizeof(ack), 0)) {
        fprintf(stderr, "rdv exporter: seq: the importer is gone\n");
        return 1;
    }
    /* The importer holds a mapping: our context goes, the allocation not freed. */
    struct rdv_msg done = {.round = 2, .seed = (uint64_t)(int64_t)ops->seq_ctx_renew()};
    if (test_io_all(hfd, &done, sizeof(done), 1) || test_io_all(afd, &ack, sizeof(ack), 0))
        return 1;
    printf("rdv exporter: seq done\n");
    return 0;
}

/* Open h and check it: the open's code; *right_p 1, 0, or -1 (not open). */
static int open_check(const struct rdv_ops *ops, const struct rdv_msg *m, void **map_p,
                      int *right_p)
{
    *map_p = NULL;
    int rc = ops->seq_open(m->h, map_p);
    *right_p = rc == 0 ? ops->seq_check(*map_p, m->size, m->seed) : -1;
    return rc;
}

int rdv_seq_importer(const struct rdv_ops *ops, int hfd, int afd)
{
    struct rdv_msg m, done;
    void *p = NULL, *held = NULL;
    int v1, v2, v3, held_right = -1;
    int32_t ack = 1;
    if (!ops->seq_open || test_io_all(hfd, &m, sizeof(m), 0) || m.round != 1) {
        printf("FAILED rdv seq: no handle\n");
        return 1;
    }
    int open1 = open_check(ops, &m, &p, &v1);
    int close1 = open1 == 0 ? ops->seq_close(p) : -1;
    int close2 = open1 == 0 ? ops->seq_close(p) : -1;
    int reopen = open_check(ops, &m, &p, &v2);
    int ctx = ops->seq_ctx_renew();
    int close_dead = reopen == 0 ? ops->seq_close(p) : -1;
    int open_new = open_check(ops, &m, &held, &v3);
    if (test_io_all(afd, &ack, sizeof(ack), 1) || test_io_all(hfd, &done, sizeof(done), 0) ||
        done.round != 2) {
        printf("FAILED rdv seq: the exporter is gone\n");
        return 1;
    }
    if (open_new == 0)
        held_right = ops->seq_check(held, m.size, m.seed);
    int close_held = open_new == 0 ? ops->seq_close(held) : -1;
    int open_after = ops->seq_open(m.h, &p);
    if (open_after == 0)
        ops->seq_close(p);
    (void)test_io_all(afd, &ack, sizeof(ack), 1);
    printf("SEQ open=%#x check=%d close=%#x close2=%#x reopen=%#x check=%d ctx=%#x "
           "close_dead=%#x open_new=%#x check=%d exp_ctx=%#x check_held=%d close_held=%#x "
           "open_after=%#x\n",
           open1, v1, close1, close2, reopen, v2, ctx, close_dead, open_new, v3,
           (int)(int64_t)done.seed, held_right, close_held, open_after);
    return 0;
}
