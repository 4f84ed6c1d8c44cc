/* SPDX-License-Identifier: MIT */
/* test_skip.h - a cmocka test that cannot run here says why and skips. */
#ifndef BYVAL_TEST_SKIP_H
#define BYVAL_TEST_SKIP_H

#include <stdio.h>

/* reason: NULL when the test can run, else why not. Needs <cmocka.h>. */
#define BYVAL_NEED(reason)                                                                         \
    do {                                                                                           \
        if (reason) {                                                                              \
            printf("skipped: %s\n", (reason));                                                     \
            skip();                                                                                \
        }                                                                                          \
    } while (0)

#endif
