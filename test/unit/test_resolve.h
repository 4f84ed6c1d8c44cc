/* SPDX-License-Identifier: MIT */
/* test_resolve.h - helpers shared by the test_resolve sources (defined in
 * test_resolve_util.c): a forked exporter that owns a memfd and sends its
 * record through a pipe, fd counting, and the failure expectation. */
#ifndef BYVAL_TEST_RESOLVE_H
#define BYVAL_TEST_RESOLVE_H

#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "handles/resolve.h"
#include "test/unit/test_skip.h"

#define SZ (3 * 4096 + 100) /* not a page multiple: the record rounds up */

enum { EXP_PLAIN, EXP_CLOSE_FD, EXP_REUSE_FD };

typedef struct exporter {
    pid_t pid;
    int go;             /* write end: a byte lets the exporter exit */
    byval_record_t rec; /* as decoded from the pipe */
} exporter_t;

extern byval_self_t self;       /* the importer (this process) */
extern const char *skip_reason; /* why pidfd tests cannot run, or NULL */

/* Tests that need pidfd_open + pidfd_getfd skip, saying why, without them. */
#define NEED_GETFD() BYVAL_NEED(skip_reason)

int nfds(void);
uint8_t pattern(size_t i);
void exporter_start(exporter_t *x, int mode);
/* Let the exporter exit; reap it, or leave it a zombie (not reaped). */
void exporter_stop(exporter_t *x, int zombie);
/* Resolve rec, expect status want, a one-line message containing needle
 * (if not NULL), no fd handed out and none leaked. */
void expect_fail(const byval_record_t *rec, byval_status_t want, const char *needle);
/* mmap fd and check the exporter's pattern. */
void check_mapping(int fd);
/* cmocka group setup: self and skip_reason. */
int resolve_setup(void **state);

/* Tests in test_resolve_more.c. */
void test_start_time_flavour(void **state);
void test_start_time_parser(void **state);
void test_identity_unverifiable(void **state);
void test_out_of_fds(void **state);
void test_invalid_records(void **state);
void test_getfd_more_errors(void **state);
void test_self_threads(void **state);
void test_proof_held_across_getfd(void **state);

#endif
