/* SPDX-License-Identifier: MIT */
/* bench_ze.h - what bench_ze.c (the importer, main) and bench_ze_peer.c
 * (the exporter child and the helpers both use) share. */
#ifndef BYVAL_TEST_BENCH_ZE_H
#define BYVAL_TEST_BENCH_ZE_H

#include "test/mpi/zeapp.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>

#define K 64
#define BUF_SIZE 65536
#define BATCHES 1000
#define BATCH_OPS 100 /* 1000 x 100 = 100k operations per batched median */
#define PT_SAMPLES 20000
#define SETUP_RUNS 20
#define PIDFD_RUNS 2000

void die_exit(int code);
int64_t now_ns(void);
int cmp_double(const void *a, const void *b);
double median(double *v, size_t n);
void xwrite(int fd, const void *p, size_t n);
void xread(int fd, void *p, size_t n);
/* One fd over the socket by SCM_RIGHTS, and its receipt (-1: none). */
void send_fd(int sock, int fd);
int recv_fd(int sock);
/* The abstract socket address n of pid's bench. */
void abstract_addr(struct sockaddr_un *a, socklen_t *len, pid_t pid, int n);
/* fds open in this process. */
int count_fds(void);
/* The exporter child: K buffers, their handles and the export-hit time to
 * the parent, then fd requests served until told to quit. */
int run_exporter(int sock);

#endif
