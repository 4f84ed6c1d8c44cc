/* SPDX-License-Identifier: MIT */
/*
 * doctor.c - the report of `ipcbyval-run --doctor` (doctor.h): one line
 * per thing that decides what ipcbyval does here, then a verdict and,
 * where by-value will not work, the fix. Exit status 0 when same-node
 * ranks can exchange handles by value (by any transport).
 */
#include "cache/doctor.h"

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "handles/rendezvous.h"
#include "cache/config.h"

#define LINE(label, ...) (printf("  %-12s ", label), printf(__VA_ARGS__), putchar('\n'))

/* The value after "key:" in /proc/self/status, or "" */
static void status_field(const char *key, char *out, size_t len)
{
    char line[512];
    size_t kl = strlen(key);
    out[0] = '\0';
    FILE *f = fopen("/proc/self/status", "re");
    if (!f)
        return;
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, key, kl) == 0 && line[kl] == ':') {
            char *v = line + kl + 1;
            v += strspn(v, " \t");
            v[strcspn(v, "\n")] = '\0';
            snprintf(out, len, "%s", v);
            break;
        }
    }
    fclose(f);
}

static int read_int(const char *path, int dflt)
{
    FILE *f = fopen(path, "re");
    int v = dflt;
    if (f) {
        if (fscanf(f, "%d", &v) != 1)
            v = dflt;
        fclose(f);
    }
    return v;
}

static unsigned long ns_inode(const char *which)
{
    struct stat st;
    char path[64];
    snprintf(path, sizeof(path), "/proc/self/ns/%s", which);
    return stat(path, &st) == 0 ? (unsigned long)st.st_ino : 0;
}

typedef struct env {
    int yama; /* -1: no Yama */
    int seccomp;
    int cap_ptrace;
    byval_probe_t p;
} env_t;

/* "EPERM" rather than a sentence: the lines stay short. */
static const char *errname(int err)
{
    const char *n = strerrorname_np(err);
    return n ? n : "error";
}

static const char *yama_words(int y)
{
    switch (y) {
    case 0: return "0 (any process of the uid)";
    case 1: return "1 (descendants only: sibling ranks refused)";
    case 2: return "2 (CAP_SYS_PTRACE only)";
    case 3: return "3 (no ptrace at all)";
    default: return "off";
    }
}

/* Why a sibling's pidfd_getfd was refused, in the user's words. */
static const char *denial(const env_t *e)
{
    if (e->p.sibling_getfd_err == ENOSYS || e->p.pidfd_open_err == ENOSYS)
        return "this kernel or sandbox has no pidfd_open/pidfd_getfd (ENOSYS)";
    if (e->p.child_getfd_err && e->seccomp == 2)
        return "denied by the seccomp filter (a container's default profile)";
    if (e->yama == 3)
        return "denied by Yama ptrace_scope 3";
    if (e->yama == 2 && !e->cap_ptrace)
        return "denied by Yama ptrace_scope 2 without CAP_SYS_PTRACE";
    if (e->yama == 1 && !e->p.child_getfd_err)
        return "denied by Yama ptrace_scope 1 between sibling processes";
    if (!e->cap_ptrace)
        return "denied (no CAP_SYS_PTRACE, and ptrace access is refused)";
    return "denied";
}

/* How to get pidfd_getfd back, for the reason denial() gave. */
static const char *pidfd_fix(const env_t *e)
{
    if (e->p.sibling_getfd_err == ENOSYS || e->p.pidfd_open_err == ENOSYS)
        return "a Linux 5.6+ kernel outside the sandbox";
    if (e->p.child_getfd_err && e->seccomp == 2)
        return "run the container with --cap-add SYS_PTRACE (or a seccomp profile allowing "
               "pidfd_getfd)";
    if (e->yama == 1)
        return "IPCBYVAL_SET_PTRACER=1, or CAP_SYS_PTRACE";
    if (e->yama == 3)
        return "none while ptrace_scope is 3";
    return "CAP_SYS_PTRACE";
}

static void gpu_cuda(int *found)
{
    void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (!h) {
        LINE("libcuda", "libcuda.so.1 not found");
        return;
    }
    *found = 1;
    struct link_map *lm = NULL;
    char real[PATH_MAX] = "?", drv[160] = "";
    if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && !realpath(lm->l_name, real))
        snprintf(real, sizeof(real), "%s", lm->l_name);
    int (*get)(int *) = (int (*)(int *))dlsym(h, "cuDriverGetVersion");
    int v = 0;
    if (get && get(&v) == 0 && v > 0)
        snprintf(drv, sizeof(drv), "; CUDA driver API %d.%d", v / 1000, v % 1000 / 10);
    FILE *f = fopen("/proc/driver/nvidia/version", "re");
    char line[256];
    if (f && fgets(line, sizeof(line), f)) {
        char *k = strstr(line, "Kernel Module");
        if (k) {
            k += strlen("Kernel Module");
            k += strspn(k, " ");
            k[strcspn(k, " \n")] = '\0';
            snprintf(drv + strlen(drv), sizeof(drv) - strlen(drv), "; kernel module %s", k);
        }
    }
    if (f)
        fclose(f);
    LINE("libcuda", "%s%s", real, drv);
}

static void gpu_ze(int *found)
{
    void *h = dlopen("libze_loader.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (!h) {
        LINE("level zero", "libze_loader.so.1 not found");
        return;
    }
    *found = 1;
    struct link_map *lm = NULL;
    char real[PATH_MAX] = "?", drivers[1024] = "";
    if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && !realpath(lm->l_name, real))
        snprintf(real, sizeof(real), "%s", lm->l_name);
    /* The drivers the loader will look for: ZE_ENABLE_ALT_DRIVERS, else
     * Intel's GPU and NPU drivers by their usual names. */
    const char *alt = getenv("ZE_ENABLE_ALT_DRIVERS");
    if (alt && !*alt)
        alt = NULL;
    char list[1024];
    snprintf(list, sizeof(list), "%s",
             alt ? alt : "libze_intel_gpu.so.1,libze_intel_gpu_legacy1.so.1,libze_intel_vpu.so.1");
    size_t n = 0;
    for (char *save = NULL, *d = strtok_r(list, ",", &save); d; d = strtok_r(NULL, ",", &save)) {
        void *dh = dlopen(d, RTLD_LAZY | RTLD_LOCAL);
        if (dh)
            dlclose(dh);
        if (dh || alt)
            n += (size_t)snprintf(drivers + n, n < sizeof(drivers) ? sizeof(drivers) - n : 0,
                                  "%s%s%s", n ? ", " : "", d, dh ? "" : " (not loadable)");
        if (n >= sizeof(drivers))
            break;
    }
    LINE("level zero", "%s; drivers: %s%s", real, drivers[0] ? drivers : "none found",
         alt ? " (ZE_ENABLE_ALT_DRIVERS)" : "");
}

/* IPCBYVAL_RENDEZVOUS_DIR as the library judges it: the check its init
 * ran (byval_rendezvous_setup, run again for the reason when it refused
 * the folder). 1 when the folder is set and refused. */
static int rendezvous(void)
{
    char dir[300], msg[512];
    /* Through the config table once it has the variable, else as set. */
    if (byval_config_get("IPCBYVAL_RENDEZVOUS_DIR", dir, sizeof(dir)) != 0) {
        const char *v = getenv("IPCBYVAL_RENDEZVOUS_DIR");
        snprintf(dir, sizeof(dir), "%s", v ? v : "");
    }
    if (!dir[0]) {
        LINE("rendezvous", "IPCBYVAL_RENDEZVOUS_DIR not set");
        return 0;
    }
    if (byval_cfg.transport == BYVAL_TRANSPORT_PIDFD) {
        LINE("rendezvous", "IPCBYVAL_RENDEZVOUS_DIR=%s: ignored with IPCBYVAL_TRANSPORT=pidfd",
             dir);
        return 0;
    }
    if (!byval_rendezvous_enabled()) {
        long gid =
            byval_cfg.rendezvous_gid >= 0 ? byval_cfg.rendezvous_gid : BYVAL_RENDEZVOUS_NO_GID;
        if (byval_rendezvous_setup(dir, gid, msg, sizeof(msg)) != 0) {
            LINE("rendezvous", "IPCBYVAL_RENDEZVOUS_DIR=%s: refused by the library: %s", dir, msg);
            return 1;
        }
    }
    LINE("rendezvous", "IPCBYVAL_RENDEZVOUS_DIR=%s: used (the library's check passed)%s", dir,
         access(dir, W_OK | X_OK) == 0
             ? ""
             : "; not writable by this user: exporters cannot listen there");
    return 0;
}

static const char *transport_names[] = {"auto", "pidfd", "socket"};

int byval_doctor(void)
{
    env_t e;
    char buf[512];
    struct utsname u;
    uname(&u);
    e.yama = read_int("/proc/sys/kernel/yama/ptrace_scope", -1);
    status_field("Seccomp", buf, sizeof(buf));
    e.seccomp = atoi(buf);
    status_field("CapEff", buf, sizeof(buf));
    e.cap_ptrace = (int)((strtoull(buf, NULL, 16) >> 19) & 1); /* CAP_SYS_PTRACE */
    byval_probe_run(&e.p, byval_cfg.set_ptracer);

    printf("ipcbyval doctor: what ipcbyval will do on %s (uid %d)\n", u.nodename, (int)getuid());
    LINE("kernel", "Linux %s; pidfd_open %s; pidfs %s", u.release,
         e.p.pidfd_open_err ? errname(e.p.pidfd_open_err) : "works",
         e.p.pidfs ? "yes (no pid-reuse window)" : "no (identity from start times, Linux < 6.9)");
    LINE("ptrace", "Yama ptrace_scope %s; seccomp %s; CAP_SYS_PTRACE %s", yama_words(e.yama),
         e.seccomp == 2       ? "filter (mode 2)"
             : e.seccomp == 1 ? "strict (mode 1)"
                              : "off",
         e.cap_ptrace ? "yes" : "no");
    LINE("pidfd_getfd", "own child %s, sibling (rank to rank) %s%s%s",
         e.p.child_getfd_err ? errname(e.p.child_getfd_err) : "allowed",
         e.p.sibling_getfd_err ? errname(e.p.sibling_getfd_err) : "allowed",
         e.p.sibling_getfd_err ? ": " : "", e.p.sibling_getfd_err ? denial(&e) : "");
    /* Nested: NSpid lists several levels (where /proc is an ancestor's),
     * or the namespace is not the initial one, whose inode the kernel
     * fixes (PROC_PID_INIT_INO), as a container's /proc shows it. */
    status_field("NSpid", buf, sizeof(buf));
    int depth = 0;
    for (char *s = strtok(buf, " \t"); s; s = strtok(NULL, " \t"))
        depth++;
    unsigned long pidns = ns_inode("pid");
    LINE("namespaces", "pid:[%lu] (%s), net:[%lu]", pidns,
         depth > 1 || (pidns && pidns != 0xEFFFFFFCul) ? "nested: a container's" : "the host's",
         ns_inode("net"));
    LINE("socket", "abstract Unix socket + SCM_RIGHTS between siblings %s%s",
         e.p.socket_err ? errname(e.p.socket_err) : "works",
         e.p.socket_err      ? ""
             : e.p.peerpidfd ? " (SO_PEERPIDFD proves the listener)"
                             : " (no SO_PEERPIDFD: Linux < 6.5)");
    int rdv_refused = rendezvous();
    int gpu = 0;
    gpu_cuda(&gpu);
    gpu_ze(&gpu);
    Dl_info self;
    char path[PATH_MAX] = "?";
    if (dladdr((void *)byval_doctor, &self) && self.dli_fname && !realpath(self.dli_fname, path))
        snprintf(path, sizeof(path), "%s", self.dli_fname);
    byval_config_changed(buf, sizeof(buf));
    LINE("ipcbyval", "%s at %s; config: %s (--print-config lists all)", BYVAL_VERSION, path,
         buf[0] ? buf : "defaults");

    int pidfd_ok = !e.p.sibling_getfd_err, sock_ok = !e.p.socket_err, mode = byval_cfg.transport;
    const char *how = NULL, *fix = NULL, *why = NULL;
    char fixbuf[300];
    if (!byval_cfg.enable) {
        why = "ipcbyval is off (IPCBYVAL_ENABLE=0): every handle passes through unchanged";
        fix = "unset IPCBYVAL_ENABLE (or drop --disable)";
    } else if (!byval_cfg.ze && !byval_cfg.cuda) {
        why = "IPCBYVAL_ZE=0 and IPCBYVAL_CUDA=0: every handle passes through unchanged";
        fix = "unset IPCBYVAL_ZE or IPCBYVAL_CUDA";
    } else if (pidfd_ok && mode != BYVAL_TRANSPORT_SOCKET) {
        how = "pidfd_getfd";
    } else if (sock_ok && mode != BYVAL_TRANSPORT_PIDFD) {
        how = mode == BYVAL_TRANSPORT_SOCKET ? "the socket (IPCBYVAL_TRANSPORT=socket)"
                                             : "the socket fallback (pidfd_getfd is denied)";
    } else if (mode == BYVAL_TRANSPORT_PIDFD && sock_ok) {
        why = "IPCBYVAL_TRANSPORT=pidfd, and pidfd_getfd is denied here";
        snprintf(fixbuf, sizeof(fixbuf), "IPCBYVAL_TRANSPORT=auto (the socket works here), or %s",
                 pidfd_fix(&e));
        fix = fixbuf;
    } else if (mode == BYVAL_TRANSPORT_SOCKET && pidfd_ok) {
        why = "IPCBYVAL_TRANSPORT=socket, and the socket does not work here";
        fix = "IPCBYVAL_TRANSPORT=auto (pidfd_getfd works here)";
    } else {
        why = "pidfd_getfd is denied and the socket does not work";
        snprintf(fixbuf, sizeof(fixbuf), "%s; or ranks in one network namespace", pidfd_fix(&e));
        fix = fixbuf;
    }
    if (how) {
        LINE("transport", "IPCBYVAL_TRANSPORT=%s: same-node pairs use %s", transport_names[mode],
             how);
        if (!pidfd_ok && mode != BYVAL_TRANSPORT_SOCKET)
            LINE("for pidfd", "%s", pidfd_fix(&e));
        LINE("other ranks", "another pid namespace: the socket%s%s; another node: refused",
             sock_ok ? " (same network namespace only)" : " (not working here)",
             rdv_refused                      ? ", not the rendezvous directory (refused)"
                 : byval_rendezvous_enabled() ? ", or the rendezvous directory"
                                              : "");
    }
    if (!gpu)
        LINE("note", "no GPU library found: nothing for ipcbyval to do (LD_LIBRARY_PATH?)");
    if (how && rdv_refused) {
        printf("verdict: by-value will NOT work across namespaces: the library refuses "
               "IPCBYVAL_RENDEZVOUS_DIR (same-node pairs use %s)\n"
               "fix: a folder of this user's or root's, not a symlink, not writable by others "
               "(mkdir -m 700 DIR; for peers of another uid, writable by the group "
               "IPCBYVAL_RENDEZVOUS_GID names), or unset IPCBYVAL_RENDEZVOUS_DIR\n",
               how);
        how = NULL;
    } else if (how) {
        printf("verdict: by-value works here, through %s\n", how);
    } else {
        printf("verdict: by-value will NOT work here: %s\nfix: %s\n", why, fix);
    }
    fflush(stdout);
    return how ? 0 : 1;
}
