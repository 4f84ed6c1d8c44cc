/* SPDX-License-Identifier: MIT */
/*
 * init.c - once-only initialisation, fork and exit, and ipcbyval-run's
 * helper. Nothing runs at load time but one getenv() for that helper and
 * the one pthread_atfork (cache/locks.c): a process that never calls a GPU
 * API gets no threads, no files and no output from ipcbyval.
 */
#include "cache/init.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/config.h"
#include "cache/locks.h"
#include "cache/log.h"
#include "cache/stats.h"
#include "handles/registry_view.h"
#include "handles/rendezvous.h"
#include "handles/self.h"

static byval_once_t init_once = BYVAL_ONCE_INIT;
int byval_init_enabled_;
int byval_init_done_;
/* >0 while this thread runs ipcbyval code. Initial-exec: the default model
 * for a shared object's TLS calls __tls_get_addr on every wrapped call. */
__thread int byval_init_depth_ __attribute__((tls_model("initial-exec")));

/* ipcbyval-run's helper (print nothing else); the warnings about the
 * environment's values; the helper's variables seen in another process. */
static int init_quiet_exit, init_problems, init_helper_ignored;

/* The child has a new pid: its exporter identity is recomputed, the caches
 * empty themselves (cache/lru_fork.c) and the counters start from zero
 * (each process reports its own calls; a job's table adds them up). */
static void init_fork_child(void)
{
    byval_self_reset();
    memset(byval_stats, 0, sizeof(byval_stats));
}
BYVAL_FORK_CHILD(init, init_fork_child);

static void init_at_exit(void)
{
    if (byval_cfg.stats)
        byval_stats_print();
    if (byval_cfg.stats_dir[0])
        byval_stats_write_file(byval_cfg.stats_dir);
}

/* IPCBYVAL_RENDEZVOUS_DIR and _GID: use the directory, or say once why not
 * (then everything behaves as without it). */
static void rendezvous_configure(void)
{
    char msg[512];
    if (!byval_cfg.rendezvous_dir[0]) {
        if (byval_cfg.rendezvous_gid >= 0)
            BYVAL_LOG_WARN("IPCBYVAL_RENDEZVOUS_GID is set without IPCBYVAL_RENDEZVOUS_DIR: "
                           "ignored");
        return;
    }
    if (byval_cfg.transport == BYVAL_TRANSPORT_PIDFD) {
        BYVAL_LOG_WARN("IPCBYVAL_RENDEZVOUS_DIR is ignored with IPCBYVAL_TRANSPORT=pidfd (the "
                       "directory carries the socket fallback: use auto or socket)");
        return;
    }
    long gid = byval_cfg.rendezvous_gid >= 0 ? byval_cfg.rendezvous_gid : BYVAL_RENDEZVOUS_NO_GID;
    if (byval_rendezvous_setup(byval_cfg.rendezvous_dir, gid, msg, sizeof(msg)) != 0)
        BYVAL_LOG_WARN("%s", msg);
    else
        BYVAL_LOG_INFO("rendezvous directory %s (peers of uid %u%s)", byval_cfg.rendezvous_dir,
                       (unsigned)geteuid(), gid >= 0 ? " and of the group" : "");
}

static void init_run(void)
{
    byval_init_depth_++;
    init_problems = byval_config_load();
    byval_init_enabled_ = byval_cfg.enable;
    if (byval_init_enabled_) {
        rendezvous_configure(); /* before any export */
        /* The release watcher starts with the first closed mapping that
         * depends on an exporter's registry, not with the first open. */
        byval_reg_watch_on_demand(1);
    }
    if (init_helper_ignored)
        BYVAL_LOG_WARN("IPCBYVAL_DOCTOR and IPCBYVAL_PRINT_CONFIG are for ipcbyval-run's own "
                       "helper: ignored in this process (use ipcbyval-run --doctor or "
                       "--print-config)");
    if (!init_quiet_exit && (byval_cfg.stats || byval_cfg.stats_dir[0]))
        atexit(init_at_exit);
    if (!init_quiet_exit)
        BYVAL_LOG_INFO("ipcbyval %s %s (ze=%d cuda=%d cache=%zu export_cache=%zu)", BYVAL_VERSION,
                       byval_init_enabled_ ? "enabled" : "disabled: pure pass-through",
                       byval_cfg.ze, byval_cfg.cuda, byval_cfg.cache_size,
                       byval_cfg.export_cache_size);
    __atomic_store_n(&byval_init_done_, 1, __ATOMIC_RELEASE);
    byval_init_depth_--;
}

int byval_enabled(void)
{
    /* Inside our own initialisation, byval_once would wait for itself. */
    if (byval_init_depth_ && !__atomic_load_n(&byval_init_done_, __ATOMIC_ACQUIRE))
        return 0;
    byval_once(&init_once, init_run);
    return byval_init_enabled_;
}

int byval_init_slow(void)
{
    return byval_init_depth_ ? 0 : byval_enabled();
}

/* Is this process ipcbyval-run's own helper? IPCBYVAL_HELPER names it
 * ("PID:STARTTIME", written just before the launcher execs the helper): a
 * value inherited by any other process names another. Without /proc the
 * start time reads as 0. */
static int init_is_helper(void)
{
    const char *h = getenv("IPCBYVAL_HELPER");
    unsigned long long pid, start;
    uint64_t own = 0;
    int n = 0;
    if (!h || sscanf(h, "%llu:%llu%n", &pid, &start, &n) != 2 || h[n])
        return 0;
    byval_proc_start_time(getpid(), &own); /* own stays 0 when it fails */
    return pid == (unsigned long long)getpid() && start == own;
}

/* ipcbyval-run loads the library into /bin/true for what it asks, the only
 * work ever done at load time, and only in that helper:
 *   IPCBYVAL_PRINT_CONFIG=1      print every variable (--print-config);
 *   IPCBYVAL_PRINT_CONFIG=check  only parse them: the warnings, once for
 *                                the whole job, and exit 1 if any;
 *   IPCBYVAL_DOCTOR=1            the --doctor report and its exit status. */
__attribute__((constructor)) static void init_helper(void)
{
    const char *p = getenv("IPCBYVAL_PRINT_CONFIG"), *d = getenv("IPCBYVAL_DOCTOR");
    if ((!p && !d) || (init_helper_ignored = !init_is_helper()))
        return;
    unsetenv("IPCBYVAL_HELPER"); /* one-shot: not for the probes' children */
    int print = p && strcmp(p, "1") == 0, check = p && strcmp(p, "check") == 0;
    int doctor = d && strcmp(d, "1") == 0;
    if (!print && !check && !doctor)
        return;
    init_quiet_exit = 1;
    byval_init();
    if (print)
        byval_config_print(stdout);
    if (check)
        _exit(init_problems ? 1 : 0);
    if (doctor) {
        byval_init_depth_++; /* the probes' dlopen and dlsym are ours, not the program's */
        _exit(byval_doctor());
    }
}
