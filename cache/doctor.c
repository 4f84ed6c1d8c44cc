/* SPDX-License-Identifier: MIT */
/*
 * doctor.c - `ipcbyval-run --doctor`: one line per thing that decides what
 * ipcbyval does here, a verdict and the fix; exit 0 when same-node ranks can
 * exchange handles by value. It runs in ipcbyval-run's helper (init.c), so
 * the probes meet the ranks' kernel, Yama, seccomp filter, capabilities,
 * namespaces and library path. Yama ptrace_scope 1 lets a process
 * pidfd_getfd its descendants only, and one rank is not another's: the
 * probe's child tries on its parent (not its descendant either) what an
 * importer would, pidfd_getfd of a memfd and then an abstract socket that
 * hands it out; the parent tries its child, which tells a seccomp filter or
 * a missing system call from Yama.
 */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <link.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cache/config.h"
#include "cache/init.h"
#include "cache/log.h"
#include "handles/rendezvous.h"
#include "handles/self.h"
#include "handles/sys.h" /* the kernel asked directly, never our own syscall() rescue */

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif

/* What two sibling processes could do, errors as errno values (0: it
 * worked): pidfd_open of a child of ours, and whether that pidfd is a pidfs
 * inode (Linux 6.9+); pidfd_getfd of our own child's fd, and of a sibling's
 * (as rank to rank); the sibling's fd over an abstract Unix socket, and
 * whether SO_PEERPIDFD answered (the broker's proof). Then Yama's
 * ptrace_scope (-1: no Yama), the seccomp mode and CAP_SYS_PTRACE. */
typedef struct probe {
    int pidfd_open_err, pidfs, child_getfd_err, sibling_getfd_err, socket_err, peerpidfd;
    int yama, seccomp, cap_ptrace;
} probe_t;

/* 0 when fd (closed here) is the object asked for, else EBADF: as good as
 * refused. */
static int probe_check(int fd, ino_t want)
{
    int err = byval_fd_inode(fd) == want ? 0 : EBADF;
    close(fd);
    return err;
}

/* pidfd_getfd of pid's fd: 0 or an errno. */
static int probe_getfd(pid_t pid, int fd, ino_t want)
{
    int pidfd = byval_pidfd_open(pid, 0);
    if (pidfd < 0)
        return errno;
    int got = byval_pidfd_getfd(pidfd, fd, 0);
    int err = got < 0 ? errno : probe_check(got, want);
    close(pidfd);
    return err;
}

/* A one-byte message with room for one SCM_RIGHTS fd. */
#define PROBE_MSG(mh, byte, ctl)        \
    char ctl[CMSG_SPACE(sizeof(int))];  \
    struct iovec mh##_iov = {&byte, 1}; \
    struct msghdr mh = {                \
        .msg_iov = &mh##_iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof(ctl)}

/* The importer's socket try: the exporter's fd, checked by inode. */
static int socket_fetch(const struct sockaddr_un *a, socklen_t alen, ino_t want, int *peerpidfd)
{
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        return errno;
    int pfd = -1;
    socklen_t len = sizeof(pfd);
    char byte;
    PROBE_MSG(mh, byte, ctl);
    ssize_t r = connect(s, (const struct sockaddr *)a, alen) != 0 ? -1 : 0;
    if (r == 0) {
        *peerpidfd = getsockopt(s, SOL_SOCKET, SO_PEERPIDFD, &pfd, &len) == 0 && pfd >= 0;
        close(pfd);
        r = recvmsg(s, &mh, MSG_CMSG_CLOEXEC);
    }
    int e = r == 1 ? EBADF : (r < 0 ? errno : ECONNRESET);
    struct cmsghdr *cm = r == 1 ? CMSG_FIRSTHDR(&mh) : NULL;
    if (cm && cm->cmsg_type == SCM_RIGHTS) {
        int fd;
        memcpy(&fd, CMSG_DATA(cm), sizeof(int));
        e = probe_check(fd, want);
    }
    close(s);
    return e;
}

/* set_ptracer: call PR_SET_PTRACER as IPCBYVAL_SET_PTRACER=1 makes
 * ipcbyval's exporters do. */
static void probe_run(probe_t *p, int set_ptracer)
{
    p->pidfd_open_err = p->child_getfd_err = p->sibling_getfd_err = p->socket_err = ECHILD;
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    int sp[2], r[3] = {0, 0, 0};
    pid_t self = getpid();
    /* Our pid and a nonce: two doctors in containers sharing a network
     * namespace (pids may repeat) differ. */
    int n = snprintf(a.sun_path + 1, sizeof(a.sun_path) - 1, "ipcbyval-doctor-%d-%llx", (int)self,
                     byval_log_clock());
    socklen_t alen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
    int mfd = memfd_create("ipcbyval-doctor", MFD_CLOEXEC);
    ino_t ino = byval_fd_inode(mfd);
    if (!ino || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp)) {
        close(mfd);
        return;
    }
    int ls = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int listen_err =
        ls >= 0 && bind(ls, (struct sockaddr *)&a, alen) == 0 && listen(ls, 1) == 0 ? 0 : errno;
    if (set_ptracer)
        prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
    pid_t c = fork();
    if (c == 0) { /* the importer, once its parent tried it: as one rank another */
        alarm(10);
        close(sp[0]);
        if (read(sp[1], &r[0], 1) != 1)
            _exit(1);
        r[0] = probe_getfd(self, mfd, ino);
        r[1] = listen_err ? listen_err : socket_fetch(&a, alen, ino, &r[2]);
        _exit(write(sp[1], r, sizeof(r)) == (ssize_t)sizeof(r) ? 0 : 1);
    }
    close(sp[1]); /* a child gone early reads as EOF */
    if (c > 0) {
        /* Our own child: Yama lets an ancestor in; seccomp and ENOSYS do not. */
        int pidfd = byval_pidfd_open(c, 0);
        p->pidfd_open_err = pidfd < 0 ? errno : 0;
        p->pidfs = pidfd >= 0 && byval_pidfd_is_pidfs(pidfd);
        close(pidfd);
        p->child_getfd_err = probe_getfd(c, mfd, ino);
        struct pollfd pf = {ls, POLLIN, 0};
        int s = send(sp[0], "g", 1, MSG_NOSIGNAL) == 1 && !listen_err && poll(&pf, 1, 5000) == 1
            ? accept4(ls, NULL, NULL, SOCK_CLOEXEC)
            : -1;
        if (s >= 0) {
            char byte = 'F';
            PROBE_MSG(mh, byte, ctl);
            struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
            cm->cmsg_level = SOL_SOCKET;
            cm->cmsg_type = SCM_RIGHTS;
            cm->cmsg_len = CMSG_LEN(sizeof(int));
            memcpy(CMSG_DATA(cm), &mfd, sizeof(int));
            sendmsg(s, &mh, MSG_NOSIGNAL);
            close(s);
        }
        if (read(sp[0], r, sizeof(r)) == (ssize_t)sizeof(r)) {
            p->sibling_getfd_err = r[0];
            p->socket_err = r[1];
            p->peerpidfd = r[2];
        }
        waitpid(c, NULL, 0);
    }
    close(sp[0]);
    close(ls);
    close(mfd);
}

/* ---- the report ---------------------------------------------------------- */

#define LINE(label, ...) (printf("  %-12s ", label), printf(__VA_ARGS__), putchar('\n'))

/* The value after "key:" in file (its first line when key is NULL), or "" */
static void file_field(const char *path, const char *key, char *out, size_t len)
{
    char line[512];
    out[0] = '\0';
    FILE *f = fopen(path, "re");
    while (f && fgets(line, sizeof(line), f)) {
        size_t kl = key ? strlen(key) : 0;
        if (!key || (strncmp(line, key, kl) == 0 && line[kl] == ':')) {
            char *v = line + (key ? kl + 1 : 0);
            v += strspn(v, " \t");
            v[strcspn(v, "\n")] = '\0';
            snprintf(out, len, "%s", v);
            break;
        }
    }
    if (f)
        fclose(f);
}

static unsigned long ns_inode(const char *which)
{
    struct stat st;
    char path[64];
    snprintf(path, sizeof(path), "/proc/self/ns/%s", which);
    return stat(path, &st) == 0 ? (unsigned long)st.st_ino : 0;
}

/* ok when err is 0, else "EPERM" rather than a sentence: the lines stay short. */
static const char *errname(int err, const char *ok)
{
    const char *n = err ? strerrorname_np(err) : ok;
    return n ? n : "error";
}

/* Why a sibling's pidfd_getfd was refused, in the user's words, or (fix)
 * how to get it back. */
static const char *denial(const probe_t *p, int fix)
{
    if (p->sibling_getfd_err == ENOSYS || p->pidfd_open_err == ENOSYS)
        return fix ? "a Linux 5.6+ kernel outside the sandbox"
                   : "this kernel or sandbox has no pidfd_open/pidfd_getfd (ENOSYS)";
    if (p->child_getfd_err && p->seccomp == 2)
        return fix ? "run the container with --cap-add SYS_PTRACE (or a seccomp profile allowing "
                     "pidfd_getfd)"
                   : "denied by the seccomp filter (a container's default profile)";
    if (p->yama == 3)
        return fix ? "none while ptrace_scope is 3" : "denied by Yama ptrace_scope 3";
    if (fix)
        return p->yama == 1 ? "IPCBYVAL_SET_PTRACER=1, or CAP_SYS_PTRACE" : "CAP_SYS_PTRACE";
    if (p->yama == 2 && !p->cap_ptrace)
        return "denied by Yama ptrace_scope 2 without CAP_SYS_PTRACE";
    if (p->yama == 1 && !p->child_getfd_err)
        return "denied by Yama ptrace_scope 1 between sibling processes";
    return p->cap_ptrace ? "denied" : "denied (no CAP_SYS_PTRACE, and ptrace access is refused)";
}

/* dlopen lib and its real path into real, or say it is not found. */
static void *gpu_lib(const char *label, const char *lib, char *real, int *found)
{
    void *h = dlopen(lib, RTLD_LAZY | RTLD_LOCAL);
    struct link_map *lm = NULL;
    if (!h) {
        LINE(label, "%s not found", lib);
        return NULL;
    }
    *found = 1;
    strcpy(real, "?");
    if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && !realpath(lm->l_name, real))
        snprintf(real, PATH_MAX, "%s", lm->l_name);
    return h;
}

static void gpu_cuda(int *found)
{
    char real[PATH_MAX], drv[160] = "", line[256], mod[64];
    void *h = gpu_lib("libcuda", "libcuda.so.1", real, found);
    if (!h)
        return;
    /* Our dlsym passes through inside the library. */
    int (*get)(int *) = (int (*)(int *))dlsym(h, "cuDriverGetVersion");
    int v = 0;
    if (get && get(&v) == 0 && v > 0)
        snprintf(drv, sizeof(drv), "; CUDA driver API %d.%d", v / 1000, v % 1000 / 10);
    file_field("/proc/driver/nvidia/version", NULL, line, sizeof(line));
    char *k = strstr(line, "Kernel Module");
    if (k && sscanf(k, "Kernel Module %63s", mod) == 1)
        snprintf(drv + strlen(drv), sizeof(drv) - strlen(drv), "; kernel module %s", mod);
    LINE("libcuda", "%s%s", real, drv);
}

static void gpu_ze(int *found)
{
    char real[PATH_MAX], drivers[1024] = "", list[1024];
    if (!gpu_lib("level zero", "libze_loader.so.1", real, found))
        return;
    /* The drivers the loader will look for: ZE_ENABLE_ALT_DRIVERS, else
     * Intel's GPU and NPU drivers by their usual names. */
    const char *alt = getenv("ZE_ENABLE_ALT_DRIVERS");
    alt = alt && *alt ? alt : NULL;
    snprintf(list, sizeof(list), "%s",
             alt ? alt : "libze_intel_gpu.so.1,libze_intel_gpu_legacy1.so.1,libze_intel_vpu.so.1");
    size_t n = 0;
    for (char *save = NULL, *d = strtok_r(list, ",", &save); d && n < sizeof(drivers);
         d = strtok_r(NULL, ",", &save)) {
        void *dh = dlopen(d, RTLD_LAZY | RTLD_LOCAL);
        if (dh)
            dlclose(dh);
        if (dh || alt)
            n += (size_t)snprintf(drivers + n, sizeof(drivers) - n, "%s%s%s", n ? ", " : "", d,
                                  dh ? "" : " (not loadable)");
    }
    LINE("level zero", "%s; drivers: %s%s", real, drivers[0] ? drivers : "none found",
         alt ? " (ZE_ENABLE_ALT_DRIVERS)" : "");
}

/* IPCBYVAL_RENDEZVOUS_DIR as the library judges it (the check its init ran,
 * run again for the reason when it refused). 1: set and refused. */
static int rendezvous(void)
{
    const char *dir = byval_cfg.rendezvous_dir;
    char msg[512];
    long gid = byval_cfg.rendezvous_gid >= 0 ? byval_cfg.rendezvous_gid : BYVAL_RENDEZVOUS_NO_GID;
    int refused = dir[0] && byval_cfg.transport != BYVAL_TRANSPORT_PIDFD &&
        !byval_rendezvous_enabled() && byval_rendezvous_setup(dir, gid, msg, sizeof(msg)) != 0;
    if (!dir[0])
        LINE("rendezvous", "IPCBYVAL_RENDEZVOUS_DIR not set");
    else if (byval_cfg.transport == BYVAL_TRANSPORT_PIDFD)
        LINE("rendezvous", "IPCBYVAL_RENDEZVOUS_DIR=%s: ignored with IPCBYVAL_TRANSPORT=pidfd",
             dir);
    else if (refused)
        LINE("rendezvous", "IPCBYVAL_RENDEZVOUS_DIR=%s: refused by the library: %s", dir, msg);
    else
        LINE("rendezvous", "IPCBYVAL_RENDEZVOUS_DIR=%s: used (the library's check passed)%s", dir,
             access(dir, W_OK | X_OK) ? "; not writable by this user: exporters cannot listen there"
                                      : "");
    return refused;
}

int byval_doctor(void)
{
    static const char *const transport_names[] = {"auto", "pidfd", "socket"};
    probe_t p = {0};
    char buf[512];
    struct utsname u;
    uname(&u);
    file_field("/proc/sys/kernel/yama/ptrace_scope", NULL, buf, sizeof(buf));
    p.yama = sscanf(buf, "%d", &p.yama) == 1 ? p.yama : -1;
    file_field("/proc/self/status", "Seccomp", buf, sizeof(buf));
    p.seccomp = atoi(buf);
    file_field("/proc/self/status", "CapEff", buf, sizeof(buf));
    p.cap_ptrace = (int)((strtoull(buf, NULL, 16) >> 19) & 1); /* CAP_SYS_PTRACE */
    probe_run(&p, byval_cfg.set_ptracer);

    printf("ipcbyval doctor: what ipcbyval will do on %s (uid %d)\n", u.nodename, (int)getuid());
    LINE("kernel", "Linux %s; pidfd_open %s; pidfs %s", u.release,
         errname(p.pidfd_open_err, "works"),
         p.pidfs ? "yes (no pid-reuse window)" : "no (identity from start times, Linux < 6.9)");
    static const char *const yama[] = {"0 (any process of the uid)",
                                       "1 (descendants only: sibling ranks refused)",
                                       "2 (CAP_SYS_PTRACE only)", "3 (no ptrace at all)"};
    static const char *const seccomp[] = {"off", "strict (mode 1)", "filter (mode 2)"};
    LINE("ptrace", "Yama ptrace_scope %s; seccomp %s; CAP_SYS_PTRACE %s",
         p.yama >= 0 && p.yama <= 3 ? yama[p.yama] : "off",
         p.seccomp == 1 || p.seccomp == 2 ? seccomp[p.seccomp] : "off",
         p.cap_ptrace ? "yes" : "no");
    LINE("pidfd_getfd", "own child %s, sibling (rank to rank) %s%s%s",
         errname(p.child_getfd_err, "allowed"), errname(p.sibling_getfd_err, "allowed"),
         p.sibling_getfd_err ? ": " : "", p.sibling_getfd_err ? denial(&p, 0) : "");
    /* Nested: NSpid lists several levels (where /proc is an ancestor's), or
     * the namespace is not the initial one, whose inode the kernel fixes
     * (PROC_PID_INIT_INO), as a container's /proc shows it. */
    file_field("/proc/self/status", "NSpid", buf, sizeof(buf));
    unsigned long pidns = ns_inode("pid");
    LINE("namespaces", "pid:[%lu] (%s), net:[%lu]", pidns,
         strpbrk(buf, " \t") || (pidns && pidns != 0xEFFFFFFCul) ? "nested: a container's"
                                                                 : "the host's",
         ns_inode("net"));
    static const char *const peer[] = {" (no SO_PEERPIDFD: Linux < 6.5)",
                                       " (SO_PEERPIDFD proves the listener)"};
    LINE("socket", "abstract Unix socket + SCM_RIGHTS between siblings %s%s",
         errname(p.socket_err, "works"), p.socket_err ? "" : peer[!!p.peerpidfd]);
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

    int pidfd_ok = !p.sibling_getfd_err, sock_ok = !p.socket_err, mode = byval_cfg.transport;
    const char *how = NULL, *why = NULL, *fix = "%s; or ranks in one network namespace";
    if (!byval_cfg.enable)
        why = "ipcbyval is off (IPCBYVAL_ENABLE=0): every handle passes through unchanged",
        fix = "unset IPCBYVAL_ENABLE (or drop --disable)";
    else if (!byval_cfg.ze && !byval_cfg.cuda)
        why = "IPCBYVAL_ZE=0 and IPCBYVAL_CUDA=0: every handle passes through unchanged",
        fix = "unset IPCBYVAL_ZE or IPCBYVAL_CUDA";
    else if (pidfd_ok && mode != BYVAL_TRANSPORT_SOCKET)
        how = "pidfd_getfd";
    else if (sock_ok && mode != BYVAL_TRANSPORT_PIDFD)
        how = mode == BYVAL_TRANSPORT_SOCKET ? "the socket (IPCBYVAL_TRANSPORT=socket)"
                                             : "the socket fallback (pidfd_getfd is denied)";
    else if (sock_ok) /* IPCBYVAL_TRANSPORT=pidfd */
        why = "IPCBYVAL_TRANSPORT=pidfd, and pidfd_getfd is denied here",
        fix = "IPCBYVAL_TRANSPORT=auto (the socket works here), or %s";
    else if (pidfd_ok) /* IPCBYVAL_TRANSPORT=socket */
        why = "IPCBYVAL_TRANSPORT=socket, and the socket does not work here",
        fix = "IPCBYVAL_TRANSPORT=auto (pidfd_getfd works here)";
    else
        why = "pidfd_getfd is denied and the socket does not work";
    if (how) {
        LINE("transport", "IPCBYVAL_TRANSPORT=%s: same-node pairs use %s", transport_names[mode],
             how);
        if (!pidfd_ok && mode != BYVAL_TRANSPORT_SOCKET)
            LINE("for pidfd", "%s", denial(&p, 1));
        LINE("other ranks", "another pid namespace: the socket%s%s; another node: refused",
             sock_ok ? " (same network namespace only)" : " (not working here)",
             rdv_refused                      ? ", not the rendezvous directory (refused)"
                 : byval_rendezvous_enabled() ? ", or the rendezvous directory"
                                              : "");
    }
    if (!gpu)
        LINE("note", "no GPU library found: nothing for ipcbyval to do (LD_LIBRARY_PATH?)");
    if (how && rdv_refused)
        printf("verdict: by-value will NOT work across namespaces: the library refuses "
               "IPCBYVAL_RENDEZVOUS_DIR (same-node pairs use %s)\n"
               "fix: a folder of this user's or root's, not a symlink, not writable by others "
               "(mkdir -m 700 DIR; for peers of another uid, writable by the group "
               "IPCBYVAL_RENDEZVOUS_GID names), or unset IPCBYVAL_RENDEZVOUS_DIR\n",
               how);
    else if (how)
        printf("verdict: by-value works here, through %s\n", how);
    else {
        printf("verdict: by-value will NOT work here: %s\nfix: ", why);
        printf(fix, denial(&p, 1)); /* the fix for pidfd_getfd where fix names it */
        putchar('\n');
    }
    fflush(stdout);
    return how && !rdv_refused ? 0 : 1;
}
