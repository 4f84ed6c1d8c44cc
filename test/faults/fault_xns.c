/* SPDX-License-Identifier: MIT */
/*
 * fault_xns.c - exporter and importer as separate programs, so that the
 * script can put them in different pid (and network) namespaces:
 *   fault_main xns-export FILE   export XNS_ROUNDS buffers (default 1),
 *                                write their handles to FILE, wait for
 *                                FILE.done
 *   fault_main xns-import FILE [expect-fail]   open each handle once
 * Each buffer holds its own pattern, so an open that reached another
 * buffer (or another process's fd) reads WRONG data.
 */
#include "test/faults/fault.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern struct zeapp app;
void fault_result(const char *name, int ok, const char *detail);
int fault_open_check(const ze_ipc_mem_handle_t *h, uint64_t seed, ze_result_t *r_p);

#define XNS_SEED 71
#define XNS_MAX 64

static int rounds(void)
{
    const char *r = getenv("XNS_ROUNDS");
    int n = r ? atoi(r) : 1;
    return n < 1 ? 1 : n > XNS_MAX ? XNS_MAX : n;
}

static int wait_for(const char *path, int seconds)
{
    for (int i = 0; i < seconds * 100; i++) {
        if (access(path, F_OK) == 0)
            return 0;
        usleep(10000);
    }
    return -1;
}

int fault_xns_export(const char *file)
{
    char tmp[512], done[512];
    snprintf(tmp, sizeof(tmp), "%s.tmp", file);
    snprintf(done, sizeof(done), "%s.done", file);
    void *stage = zeapp_alloc_host(&app, FAULT_BUF);
    int n = rounds();
    ze_ipc_mem_handle_t h[XNS_MAX];
    for (int i = 0; i < n; i++) {
        void *buf = zeapp_alloc_device(&app, FAULT_BUF);
        zeapp_pattern(stage, 0, FAULT_BUF, XNS_SEED + (uint64_t)i);
        zeapp_copy(&app, buf, stage, FAULT_BUF);
        if (zeapp_ipc_get(&app, buf, &h[i]) != ZE_RESULT_SUCCESS)
            return 1;
    }
    printf("xns-export: pid %d\n", (int)getpid()); /* in its own namespace */
    fflush(stdout);
    FILE *f = fopen(tmp, "w");
    if (!f || fwrite(h, sizeof(h[0]), (size_t)n, f) != (size_t)n || fclose(f) != 0 ||
        rename(tmp, file) != 0)
        return 1;
    return wait_for(done, 30) == 0 ? 0 : 1;
}

int fault_xns_import(const char *file, int expect_fail)
{
    char done[512];
    snprintf(done, sizeof(done), "%s.done", file);
    ze_ipc_mem_handle_t h[XNS_MAX];
    int n = rounds();
    FILE *f = wait_for(file, 10) == 0 ? fopen(file, "r") : NULL;
    int got = f && fread(h, sizeof(h[0]), (size_t)n, f) == (size_t)n;
    if (f)
        fclose(f);
    ze_result_t res = ZE_RESULT_SUCCESS, first_bad = ZE_RESULT_SUCCESS;
    int ok = 0, wrong = 0, refused = 0, c = -2;
    for (int i = 0; got && i < n; i++) {
        /* fault_open_check: 1 the buffer's own data, 0 wrong data, -1 refused */
        c = fault_open_check(&h[i], XNS_SEED + (uint64_t)i, &res);
        ok += c == 1;
        wrong += c == 0;
        refused += c == -1;
        if (c != 1 && first_bad == ZE_RESULT_SUCCESS)
            first_bad = res;
    }
    FILE *d = fopen(done, "w");
    if (d)
        fclose(d);
    char detail[200];
    const char *label = getenv("XNS_LABEL");
    snprintf(detail, sizeof(detail), "%s%s%d opens: %d exporter's data, %d WRONG data, %d "
             "refused%s (first refusal 0x%x)", label ? label : "", label ? "; " : "", n, ok,
             wrong, refused, got ? "" : ", no handle", (unsigned)first_bad);
    if (expect_fail)
        fault_result("exporter in an unrelated pid and network namespace: refused",
                     got && refused == n, detail);
    else
        fault_result("exporter in a child pid namespace: opened from the parent",
                     got && ok == n, detail);
    return 0;
}
