/* SPDX-License-Identifier: MIT */
/* gpu_c.h - what the plain-C GPU benchmarks (gpu_cycle.c, vmm_cold.c)
 * share: a driver call that fails the program with its error's name, and
 * a monotonic clock in microseconds. Define GPU_PROG (the program's name,
 * for messages) before including it. */
#ifndef BYVAL_GPU_C_H
#define BYVAL_GPU_C_H
#include <cuda.h>
#include <stdio.h>
#include <time.h>

#define CU(call)                                                                                   \
    do {                                                                                           \
        CUresult rc_ = (call);                                                                     \
        if (rc_ != CUDA_SUCCESS) {                                                                 \
            const char *n_ = NULL;                                                                 \
            cuGetErrorName(rc_, &n_);                                                              \
            fprintf(stderr, GPU_PROG ": %s: %s\n", #call, n_ ? n_ : "?");                          \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

static inline double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}
#endif
