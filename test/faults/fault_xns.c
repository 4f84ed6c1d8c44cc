/* SPDX-License-Identifier: MIT */
/*
 * fault_xns.c - exporter and importer as separate programs, so that the
 * script can put them in different pid (and network) namespaces:
 *   fault_main xns-export FILE   export a buffer, write the handle to FILE,
 *                                wait for FILE.done
 *   fault_main xns-import FILE [expect-fail]
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
    void *buf = zeapp_alloc_device(&app, FAULT_BUF);
    zeapp_pattern(stage, 0, FAULT_BUF, XNS_SEED);
    zeapp_copy(&app, buf, stage, FAULT_BUF);
    ze_ipc_mem_handle_t h;
    if (zeapp_ipc_get(&app, buf, &h) != ZE_RESULT_SUCCESS)
        return 1;
    FILE *f = fopen(tmp, "w");
    if (!f || fwrite(&h, sizeof(h), 1, f) != 1 || fclose(f) != 0 || rename(tmp, file) != 0)
        return 1;
    return wait_for(done, 30) == 0 ? 0 : 1;
}

int fault_xns_import(const char *file, int expect_fail)
{
    char done[512];
    snprintf(done, sizeof(done), "%s.done", file);
    ze_ipc_mem_handle_t h;
    FILE *f = wait_for(file, 10) == 0 ? fopen(file, "r") : NULL;
    int got = f && fread(&h, sizeof(h), 1, f) == 1;
    if (f)
        fclose(f);
    ze_result_t res = ZE_RESULT_SUCCESS;
    int c = got ? fault_open_check(&h, XNS_SEED, &res) : -2;
    FILE *d = fopen(done, "w");
    if (d)
        fclose(d);
    char detail[160];
    const char *label = getenv("XNS_LABEL");
    snprintf(detail, sizeof(detail), "%s%sopen: %s (0x%x)", label ? label : "", label ? "; " : "",
             c == 1 ? "exporter's data" : c == 0 ? "WRONG data" : c == -1 ? "refused" : "no handle",
             (unsigned)res);
    if (expect_fail)
        fault_result("exporter in an unrelated pid and network namespace: refused", c == -1, detail);
    else
        fault_result("exporter in a child pid namespace: opened from the parent", c == 1, detail);
    return 0;
}
