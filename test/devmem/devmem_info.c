/* SPDX-License-Identifier: MIT */
/*
 * devmem_info PREFIX [DEVICE]: prints the device-memory totals of the
 * ledger that PREFIX_LEDGER (or PREFIX_TOTAL_MEM's default path) names, as
 * the test drivers see it, e.g. with CUDADRV_LEDGER=/tmp/l:
 *   devmem_info CUDADRV 0
 *   total 67108864 used 16777216 freed_held 16777216 allocs 1 shared 1
 * Slots of processes that exited are reclaimed first. PREFIX is CUDADRV
 * or ZEDRV. Exit 0, or 2 on bad usage.
 */
#include "test/devmem/devmem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    struct devmem_stats st;
    int dev = argc > 2 ? atoi(argv[2]) : 0;

    if (argc < 2 || argc > 3 || (strcmp(argv[1], "CUDADRV") != 0 && strcmp(argv[1], "ZEDRV") != 0) ||
        dev < 0 || dev >= DEVMEM_MAX_DEVICES) {
        fprintf(stderr, "usage: devmem_info CUDADRV|ZEDRV [DEVICE]\n");
        return 2;
    }
    devmem_setup(argv[1], 0);
    devmem_stats(dev, &st);
    printf("total %llu used %llu freed_held %llu allocs %u shared %u\n",
           (unsigned long long)st.total, (unsigned long long)st.used,
           (unsigned long long)st.freed_held, st.allocs, st.shared);
    return 0;
}
