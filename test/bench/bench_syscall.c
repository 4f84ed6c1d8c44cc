/* SPDX-License-Identifier: MIT */
/*
 * bench_syscall - what ipcbyval's syscall() adds to a system call that is
 * not pidfd_getfd. An ordinary program: under ipcbyval-run, "syscall" in
 * the global scope is ipcbyval's entry, and the C library's own syscall
 * is found in libc.so.6 itself; both are called through a pointer, on the
 * same cheap system call (getppid), in interleaved blocks, and the median
 * block of each is reported (ns per call). Natively both are the C
 * library's, which shows the noise floor.
 *   output: syscall_direct_ns N, syscall_global_ns N, interposed 0|1
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

typedef long (*syscall_fn)(long, ...);

#define BLOCKS 301
#define CALLS 2000

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static double block(volatile syscall_fn fn)
{
    double t0 = now_ns();
    for (int i = 0; i < CALLS; i++)
        fn(SYS_getppid);
    return (now_ns() - t0) / CALLS;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(void)
{
    void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    syscall_fn direct = libc ? (syscall_fn)dlsym(libc, "syscall") : NULL;
    syscall_fn global = (syscall_fn)dlsym(RTLD_DEFAULT, "syscall");
    if (!direct || !global) {
        fprintf(stderr, "bench_syscall: cannot find syscall in libc.so.6 and the global scope\n");
        return 1;
    }
    static double d[BLOCKS], g[BLOCKS];
    for (int i = 0; i < 20; i++) { /* warm up both paths */
        block(direct);
        block(global);
    }
    for (int i = 0; i < BLOCKS; i++) {
        d[i] = block(direct);
        g[i] = block(global);
    }
    qsort(d, BLOCKS, sizeof(double), cmp);
    qsort(g, BLOCKS, sizeof(double), cmp);
    printf("syscall_direct_ns %.1f\nsyscall_global_ns %.1f\ninterposed %d\n", d[BLOCKS / 2],
           g[BLOCKS / 2], direct != global);
    return 0;
}
