/* SPDX-License-Identifier: MIT */
/*
 * io_all.h - the whole buffer through a pipe, FIFO or socket, for the test
 * programs whose two sides talk through one (cu_pair, cu_chunks, rdv_pair):
 * one definition of "all of it, retried on EINTR, end of file an error".
 */
#ifndef BYVAL_TEST_IO_ALL_H
#define BYVAL_TEST_IO_ALL_H

#include <errno.h>
#include <stddef.h>
#include <unistd.h>

/* Read (writing 0) or write (1) exactly n bytes of buf on fd: 0, or -1
 * on an error or an early end of file. */
static inline int test_io_all(int fd, void *buf, size_t n, int writing)
{
    char *p = buf;
    while (n > 0) {
        ssize_t r = writing ? write(fd, p, n) : read(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

static inline int test_write_all(int fd, const void *buf, size_t n)
{
    return test_io_all(fd, (void *)buf, n, 1);
}

static inline int test_read_all(int fd, void *buf, size_t n)
{
    return test_io_all(fd, buf, n, 0);
}

#endif
