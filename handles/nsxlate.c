/* SPDX-License-Identifier: MIT */
/* nsxlate.c - pid translation into an ancestor pid namespace (see
 * nsxlate.h). O(processes) per call: only the first import-cache miss of
 * an exporter in another namespace pays it (peers.c remembers the
 * answer). Importers call it from any thread: strtok_r, no shared state. */
#include "handles/nsxlate.h"

#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "handles/resolve_internal.h"

/* Last field of the NSpid line of /proc/<dir>/status, or 0. */
static uint32_t innermost_pid(const char *dir)
{
    char path[300], line[512]; /* NSpid: up to 32 levels of 10 digits */
    snprintf(path, sizeof(path), "/proc/%s/status", dir);
    FILE *f = fopen(path, "re");
    if (!f)
        return 0;
    uint32_t last = 0;
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, "NSpid:", 6) != 0)
            continue;
        char *save = NULL;
        for (char *tok = strtok_r(line + 6, " \t\n", &save); tok;
             tok = strtok_r(NULL, " \t\n", &save))
            last = (uint32_t)strtoul(tok, NULL, 10);
        break;
    }
    fclose(f);
    return last;
}

byval_status_t byval_ns_translate(const byval_record_t *rec, uint32_t *local_pid_p, char *msg,
                                  size_t msglen)
{
    /* Translation reads pids off /proc: they must be pids of OUR namespace,
     * or pidfd_open would reach whatever holds that number here. A /proc
     * mounted for another namespace (unshare --pid without --mount-proc)
     * shows /proc/self as a pid that is not ours. */
    char self_link[32];
    ssize_t n = readlink("/proc/self", self_link, sizeof(self_link) - 1);
    if (n <= 0 || (self_link[n] = '\0', strtol(self_link, NULL, 10) != (long)getpid())) {
        byval_msg(msg, msglen,
                  "exporter pid %u lives in pid namespace pid:[%u], not below ours as far as "
                  "we can tell: this /proc belongs to another pid namespace (mount one for "
                  "ours to translate pids)",
                  rec->pid, rec->pidns);
        return BYVAL_E_FOREIGN_NS;
    }
    DIR *d = opendir("/proc");
    if (!d) {
        byval_msg(msg, msglen, "cannot read /proc to find pid %u of pid:[%u]", rec->pid,
                  rec->pidns);
        return BYVAL_E_FOREIGN_NS;
    }
    struct dirent *e;
    byval_status_t st = BYVAL_E_FOREIGN_NS;
    while ((e = readdir(d))) {
        if (!isdigit((unsigned char)e->d_name[0]) || innermost_pid(e->d_name) != rec->pid)
            continue;
        char path[300];
        struct stat sb;
        snprintf(path, sizeof(path), "/proc/%s/ns/pid", e->d_name);
        if (stat(path, &sb) == 0 && (uint32_t)sb.st_ino == rec->pidns) {
            *local_pid_p = (uint32_t)strtoul(e->d_name, NULL, 10);
            st = BYVAL_OK;
            break;
        }
    }
    closedir(d);
    if (st != BYVAL_OK)
        byval_msg(msg, msglen,
                  "exporter pid %u lives in pid namespace pid:[%u], which is not below ours: "
                  "not visible from here",
                  rec->pid, rec->pidns);
    return st;
}
