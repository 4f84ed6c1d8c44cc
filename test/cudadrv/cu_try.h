/* SPDX-License-Identifier: MIT */
/* cu_try.h - the CUDA test programs' TRY(call): on an error, one line
 * "FAILED <prog> <who>: <call>: <error name>" and return 1 from the caller.
 * The program defines CU_TRY_PROG and a `who` string. */
#ifndef CU_TRY_H
#define CU_TRY_H

#include <cuda.h>
#include <stdio.h>

#define TRY(call)                                                                                  \
    do {                                                                                           \
        CUresult r_ = (call);                                                                      \
        if (r_ != CUDA_SUCCESS) {                                                                  \
            const char *n_ = NULL;                                                                 \
            cuGetErrorName(r_, &n_);                                                               \
            printf("FAILED " CU_TRY_PROG " %s: %s: %s\n", who, #call, n_ ? n_ : "?");             \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

#endif
