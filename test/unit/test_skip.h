/* SPDX-License-Identifier: MIT */
/* test_skip.h - a cmocka test that cannot run here says why and skips. */
#ifndef BYVAL_TEST_SKIP_H
#define BYVAL_TEST_SKIP_H

#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

/* reason: NULL when the test can run, else why not. Needs <cmocka.h>. */
#define BYVAL_NEED(reason)                                                                         \
    do {                                                                                           \
        if (reason) {                                                                              \
            printf("skipped: %s\n", (reason));                                                     \
            skip();                                                                                \
        }                                                                                          \
    } while (0)

/* A reason for BYVAL_NEED when pidfd_open does not work here, else NULL. */
static inline const char *byval_test_no_pidfd(void)
{
    int fd = (int)syscall(SYS_pidfd_open, getpid(), 0);
    if (fd < 0)
        return "pidfd_open is not available";
    close(fd);
    return NULL;
}

#endif
