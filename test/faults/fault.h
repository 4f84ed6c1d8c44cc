/* SPDX-License-Identifier: MIT */
/* fault.h - shared by the fault-suite programs (test/faults). */
#ifndef BYVAL_TEST_FAULT_H
#define BYVAL_TEST_FAULT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "test/mpi/zeapp.h"

#define FAULT_BUF 4096 /* every test buffer: one page */

enum fault_op {
    FAULT_OP_ALLOC = 1, /* allocate slot index, fill with seed, export */
    FAULT_OP_REALLOC,   /* free slot index, allocate again, fill, export */
    FAULT_OP_FREE,      /* free slot index */
    FAULT_OP_REUSE_FD,  /* close slot's exported fd, another memfd there */
    FAULT_OP_EXIT,      /* _exit(0), no reply */
};

struct fault_cmd {
    uint32_t op;
    uint32_t index;
    uint64_t seed;
};

struct fault_reply {
    int32_t status; /* 0 ok */
    uint64_t addr;  /* the exporter's buffer address (reuse checks) */
    ze_ipc_mem_handle_t handle;
};

/* Fork an exporter (as uid when non-zero); *sock_p talks to it. */
pid_t fault_exporter_start(int *sock_p, uid_t uid);
/* Send one command and wait for its reply (none for EXIT). Returns the
 * reply's status, or -1 when the exporter is gone. */
int fault_exporter_cmd(int sock, uint32_t op, uint32_t index, uint64_t seed,
                       struct fault_reply *r);
int fault_send(int sock, const void *buf, size_t len);
int fault_recv(int sock, void *buf, size_t len);

#endif
