/* SPDX-License-Identifier: MIT */
/* test_registry_peers.c - see test_registry_peers.h. */
#include "test/unit/test_registry_peers.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "handles/registry.h"
#include "handles/transport.h"
#include "handles/resolve.h"

#ifndef F_SETPIPE_SZ
#define F_SETPIPE_SZ 1031
#endif

static int64_t ms_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* One reply within ms on fd: 0, or -1. */
static int reply_within(int fd, void *buf, size_t len, int ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, ms) == 1 && read(fd, buf, len) == (ssize_t)len ? 0 : -1;
}

static void exporter_main(int sock)
{
    byval_self_t self;
    peer_exporter_t me = {0};
    byval_self_reset(); /* a fork child: as the library's fork handler does */
    byval_self_get(&self);
    byval_record_set_exporter(&me.rec, &self);
    uint64_t serial;
    if (byval_reg_add_serial(KEY, 5, 3, 4096, &serial) != 0 ||
        byval_reg_fds_to_offer(&me.page_fd, &me.pipe_fd) != 0)
        _exit(2);
    me.pid = getpid();
    if (write(sock, &me, sizeof(me)) != sizeof(me))
        _exit(3);
    for (char c; read(sock, &c, 1) == 1;) {
        if (c == 'r')
            byval_reg_remove(KEY, 5);
        else if (c == 'a')
            byval_reg_add(KEY, 5, 3, 4096);
        else if (c == 'n')
            for (uint64_t i = 0; i < 10000; i++) {
                byval_reg_add(KEY + 1 + i, 6, 4, 4096);
                byval_reg_remove(KEY + 1 + i, 6);
            }
        else if (c == 'e') { /* a new image, same pid and identity */
            if (write(sock, &c, 1) != 1)
                _exit(4);
            execl("/bin/sleep", "sleep", "30", (char *)NULL);
            _exit(5);
        }
        else
            _exit(0);
        if (write(sock, &c, 1) != 1)
            _exit(4);
    }
    _exit(0);
}

int peer_exporter_start(peer_exporter_t *e)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        /* Only its own socket: not the importer's fds (nor its limit's
         * worth of them). */
        if (dup2(sv[1], 3) != 3)
            _exit(1);
        syscall(SYS_close_range, 4, ~0u, 0);
        exporter_main(3);
    }
    close(sv[1]);
    e->sock = sv[0];
    if (pid < 0 || reply_within(sv[0], e, sizeof(*e), 5000) != 0) {
        close(sv[0]);
        return -1;
    }
    e->sock = sv[0]; /* the child's copy says its own */
    return 0;
}

int peer_exporter_cmd(peer_exporter_t *e, char c, int ms)
{
    char r;
    return write(e->sock, &c, 1) == 1 && reply_within(e->sock, &r, 1, ms) == 0 && r == c ? 0 : -1;
}

int peer_exporter_stop(peer_exporter_t *e)
{
    char c = 'x';
    int st = 0;
    (void)!write(e->sock, &c, 1);
    close(e->sock);
    for (int i = 0; i < 200 && waitpid(e->pid, &st, WNOHANG) == 0; i++)
        usleep(10000);
    if (waitpid(e->pid, &st, WNOHANG) == 0) {
        kill(e->pid, SIGKILL);
        waitpid(e->pid, &st, 0);
        return -1;
    }
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/* Run fn in a third process; its report (a line) into what. */
static void third(void (*fn)(pid_t, int, char *, size_t), pid_t pid, int fd, char *what,
                  size_t len)
{
    int p[2];
    what[0] = 0;
    if (pipe(p) != 0)
        return;
    pid_t c = fork();
    if (c == 0) {
        char buf[256] = "";
        fn(pid, fd, buf, sizeof(buf));
        (void)!write(p[1], buf, strlen(buf));
        _exit(0);
    }
    close(p[1]);
    ssize_t n = read(p[0], what, len - 1);
    what[n > 0 ? n : 0] = 0;
    close(p[0]);
    waitpid(c, NULL, 0);
}

static void page_attack(pid_t pid, int page_fd, char *out, size_t len)
{
    char path[64];
    uint32_t huge = 0xffffffffu;
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)pid, page_fd);
    int fd = open(path, O_RDWR);
    if (fd < 0) {
        snprintf(out, len, "open O_RDWR: %s", strerror(errno));
        return;
    }
    int wr = pwrite(fd, &huge, 4, offsetof(byval_reg_header_t, high)) == 4 ? 0 : errno;
    void *m = mmap(NULL, BYVAL_REG_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int mm = m == MAP_FAILED ? errno : 0;
    if (m != MAP_FAILED)
        ((byval_reg_header_t *)m)->high = huge;
    int tr = ftruncate(fd, 0) == 0 ? 0 : errno;
    snprintf(out, len, "pwrite high: %s; writable mmap: %s; ftruncate(0): %s",
             wr ? strerror(wr) : "done", mm ? strerror(mm) : "done", tr ? strerror(tr) : "done");
}

void peer_attack_page(pid_t pid, int page_fd, char *what, size_t len)
{
    third(page_attack, pid, page_fd, what, len);
}

static void pipe_attack(pid_t pid, int pipe_fd, char *out, size_t len)
{
    int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    int fd = pidfd < 0 ? -1 : (int)syscall(SYS_pidfd_getfd, pidfd, pipe_fd, 0);
    if (fd < 0) {
        snprintf(out, len, "pidfd_getfd: %s", strerror(errno));
        return;
    }
    int fl = fcntl(fd, F_GETFL);
    int a = fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) == 0 ? 0 : errno;
    int b = fcntl(fd, F_SETPIPE_SZ, 4096) >= 0 ? 0 : errno;
    snprintf(out, len, "O_NONBLOCK cleared: %s; F_SETPIPE_SZ 4096: %s", a ? strerror(a) : "done",
             b ? strerror(b) : "done");
}

void peer_attack_pipe(pid_t pid, int pipe_fd, char *what, size_t len)
{
    third(pipe_attack, pid, pipe_fd, what, len);
}

pid_t peer_hold_pipe_writer(pid_t pid, int pipe_fd)
{
    int p[2];
    char ok = 0;
    if (pipe(p) != 0)
        return -1;
    pid_t c = fork();
    if (c == 0) {
        char path[64];
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlives the test */
        int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
        int rd = pidfd < 0 ? -1 : (int)syscall(SYS_pidfd_getfd, pidfd, pipe_fd, 0);
        snprintf(path, sizeof(path), "/proc/self/fd/%d", rd);
        int wr = rd < 0 ? -1 : open(path, O_WRONLY | O_CLOEXEC);
        if (rd >= 0)
            close(rd); /* only the write end it made stays */
        (void)!write(p[1], wr >= 0 ? "y" : "n", 1);
        for (;;)
            pause();
    }
    close(p[1]);
    if (c > 0 && (read(p[0], &ok, 1) != 1 || ok != 'y')) {
        kill(c, SIGKILL);
        waitpid(c, NULL, 0);
        c = -1;
    }
    close(p[0]);
    return c;
}

static int spam_ms;

/* Write fd in a loop for ms; the writes made. */
static uint64_t spam_fd(int fd, int ms)
{
    uint64_t n = 0;
    static const char b = 's';
    for (int64_t end = ms_now() + ms; ms_now() < end;)
        for (int i = 0; i < 64; i++)
            n += write(fd, &b, 1) == 1;
    return n;
}

static void pipe_spam(pid_t pid, int pipe_fd, char *out, size_t len)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)pid, pipe_fd);
    int fd = open(path, O_WRONLY | O_NONBLOCK);
    snprintf(out, len, "%llu", fd < 0 ? 0ull : (unsigned long long)spam_fd(fd, spam_ms));
}

uint64_t peer_spam_pipe(pid_t pid, int pipe_fd, int ms)
{
    char what[64];
    spam_ms = ms;
    third(pipe_spam, pid, pipe_fd, what, sizeof(what));
    return strtoull(what, NULL, 10);
}

static long watcher_cpu_ms(void);

/* The watcher names itself once it runs, which its start does not wait
 * for: give it up to 2 s to appear. */
long peer_watcher_cpu_ms(void)
{
    long ms = watcher_cpu_ms();
    for (int i = 0; ms < 0 && i < 2000; i++) {
        usleep(1000);
        ms = watcher_cpu_ms();
    }
    return ms;
}

int peer_watcher_running(void)
{
    return watcher_cpu_ms() >= 0;
}

static long watcher_cpu_ms(void)
{
    DIR *d = opendir("/proc/self/task");
    long ms = -1;
    if (!d)
        return -1;
    for (struct dirent *t; ms < 0 && (t = readdir(d)) != NULL;) {
        char path[300], buf[512];
        snprintf(path, sizeof(path), "/proc/self/task/%s/comm", t->d_name);
        FILE *f = fopen(path, "re");
        if (!f)
            continue;
        int is = fgets(buf, sizeof(buf), f) && strncmp(buf, "ipcbyval-watch", 14) == 0;
        fclose(f);
        snprintf(path, sizeof(path), "/proc/self/task/%s/stat", t->d_name);
        if (!is || !(f = fopen(path, "re")))
            continue;
        unsigned long ut, st;
        char *p = fgets(buf, sizeof(buf), f) ? strrchr(buf, ')') : NULL;
        /* After ")": state, then fields 4..13, then utime (14), stime (15). */
        if (p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut,
                        &st) == 2)
            ms = (long)((ut + st) * 1000 / (unsigned long)sysconf(_SC_CLK_TCK));
        fclose(f);
    }
    closedir(d);
    return ms;
}

/* ---- the importer's side ------------------------------------------------ */

byval_reg_view_t *peer_attach(const byval_record_t *rec, int *pidfd_p, char *msg, size_t msglen)
{
    int pidfd = (int)syscall(SYS_pidfd_open, (pid_t)rec->pid, 0);
    if (pidfd < 0) {
        snprintf(msg, msglen, "pidfd_open: %s", strerror(errno));
        return NULL;
    }
    byval_reg_view_t *v = byval_reg_attach(rec, BYVAL_MODE_PIDFD, pidfd, msg, msglen);
    if (pidfd_p)
        *pidfd_p = pidfd;
    else
        close(pidfd);
    return v;
}

byval_reg_view_t *peer_exporter_attached(peer_exporter_t *e, byval_reg_event_fn fn)
{
    char msg[512] = "";
    byval_reg_on_event(fn);
    if (peer_exporter_start(e) != 0) {
        printf("cannot start the exporter\n");
        return NULL;
    }
    byval_reg_view_t *v = peer_attach(&e->rec, NULL, msg, sizeof(msg));
    if (!v)
        printf("attach: %s\n", msg);
    return v;
}

static int events;

void peer_event(void)
{
    __atomic_add_fetch(&events, 1, __ATOMIC_RELEASE);
}

int peer_events(void)
{
    return __atomic_load_n(&events, __ATOMIC_ACQUIRE);
}

int peer_event_after(int before, int ms)
{
    for (int i = 0; i < ms * 10 && peer_events() <= before; i++)
        usleep(100);
    return peer_events() > before;
}

pid_t peer_spawn(char *const argv[], int *in_p, int *out_p)
{
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) != 0)
        return -1;
    if (pipe2(out, O_CLOEXEC) != 0) {
        close(in[0]);
        close(in[1]);
        return -1;
    }
    pid_t pid = fork();
    if (pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        execv(argv[0], argv);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    *in_p = in[1];
    *out_p = out[0];
    return pid;
}

/* ---- the forger (another uid) ------------------------------------------ */

int peer_forger_start(peer_forger_t *f, int sealed)
{
    char exe[512];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0)
        return -1;
    exe[n] = 0;
    char *argv[] = {"/usr/bin/setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups",
                    exe, "forger", sealed ? "sealed" : "unsealed", NULL};
    f->pid = peer_spawn(argv, &f->in, &f->out);
    return f->pid > 0 && reply_within(f->out, &f->rec, sizeof(f->rec), 5000) == 0 ? 0 : -1;
}

int peer_forger_cmd(peer_forger_t *f, char c)
{
    char r;
    return write(f->in, &c, 1) == 1 && reply_within(f->out, &r, 1, 5000) == 0 ? 0 : -1;
}

void peer_forger_stop(peer_forger_t *f)
{
    close(f->in); /* EOF: it exits */
    close(f->out);
    waitpid(f->pid, NULL, 0);
}

int peer_forger_main(int sealed)
{
    byval_self_t self;
    byval_record_t rec = {0};
    int p[2];
    struct stat st;
    if (byval_self_get(&self) != 0 || pipe2(p, O_NONBLOCK) != 0 || fstat(p[0], &st) != 0)
        return 2;
    byval_record_set_exporter(&rec, &self);
    int mfd = memfd_create(BYVAL_REG_NAME, sealed ? MFD_ALLOW_SEALING : 0);
    byval_reg_header_t *h = MAP_FAILED;
    if (mfd < 0 || ftruncate(mfd, BYVAL_REG_BYTES) != 0 ||
        (h = mmap(NULL, BYVAL_REG_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0)) == MAP_FAILED)
        return 3;
    *h = (byval_reg_header_t){.magic = BYVAL_REG_MAGIC, .version = BYVAL_REG_VERSION,
                              .nslots = BYVAL_REG_SLOTS, .pid = self.pid,
                              .pipe_fd = (uint32_t)p[0], .identity = self.identity,
                              .high = 0xffffffffu, .pipe_ino = (uint32_t)st.st_ino};
    byval_reg_slot_t *s = (byval_reg_slot_t *)(h + 1);
    for (uint32_t i = 0; i < BYVAL_REG_SLOTS; i++) /* live-looking nonsense */
        s[i] = (byval_reg_slot_t){.key = KEY ^ i, .ino = ~i, .fd = i * 7919u,
                                  .serial = UINT64_MAX - i, .size = UINT64_MAX};
    if (sealed && fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE) != 0)
        return 4;
    if (write(1, &rec, sizeof(rec)) != sizeof(rec))
        return 5;
    for (char c; read(0, &c, 1) == 1;) {
        if (c == 't')
            (void)!ftruncate(mfd, 0);
        else if (c == 'w')
            (void)!write(p[1], &c, 1);
        else if (c == 's')
            spam_fd(p[1], 1000);
        (void)!write(1, &c, 1);
    }
    return 0;
}
