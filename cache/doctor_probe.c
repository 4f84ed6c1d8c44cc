/* SPDX-License-Identifier: MIT */
/*
 * doctor_probe.c - the probes of `ipcbyval-run --doctor` (doctor.h).
 *
 * Two ranks of one node are siblings: neither is the other's ancestor, so
 * Yama ptrace_scope 1 lets a process pidfd_getfd its own child but not a
 * sibling. The probe therefore forks an exporter E (a memfd, and an
 * abstract socket that hands it out, as the broker does) and an importer
 * I, and I tries what ipcbyval's importer would: pidfd_open + pidfd_getfd
 * of E's fd, then the socket. The parent also tries its own child, which
 * tells a seccomp filter or a missing kernel call from Yama.
 * Everything is a raw system call: no GPU, no ipcbyval state touched.
 */
#include "cache/doctor.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "handles/resolve_internal.h"
#include "handles/sys.h" /* the kernel asked directly, never our own syscall() rescue */

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif
#ifndef PR_SET_PTRACER_ANY
#define PR_SET_PTRACER_ANY ((unsigned long)-1)
#endif

static int probe_getfd(pid_t pid, int fd, ino_t want, int *pidfd_err)
{
    int pidfd = byval_pidfd_open(pid, 0);
    if (pidfd < 0) {
        if (pidfd_err)
            *pidfd_err = errno;
        return errno;
    }
    int got = byval_pidfd_getfd(pidfd, fd, 0);
    int err = got < 0 ? errno : 0;
    struct stat st;
    if (got >= 0 && (fstat(got, &st) != 0 || st.st_ino != want))
        err = EBADF; /* not the object asked for: as good as refused */
    if (got >= 0)
        close(got);
    close(pidfd);
    return err;
}

/* The socket's name: the parent's pid and a nonce, so that two doctors
 * in containers sharing a network namespace (pids may repeat) differ. */
static socklen_t probe_addr(struct sockaddr_un *a, pid_t parent, unsigned long nonce)
{
    memset(a, 0, sizeof(*a));
    a->sun_family = AF_UNIX;
    int n = snprintf(a->sun_path + 1, sizeof(a->sun_path) - 1, "ipcbyval-doctor-%d-%lx",
                     (int)parent, nonce);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

/* The exporter: report (memfd number, inode) on out, serve the memfd to
 * one connection, then wait for the parent to close `hold`. */
static void exporter(int out, int hold, int set_ptracer, pid_t parent, unsigned long nonce)
{
    alarm(10); /* whatever happens, never outlive the doctor by much */
    if (set_ptracer)
        prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
    int mfd = memfd_create("ipcbyval-doctor", MFD_CLOEXEC);
    struct stat st = {0};
    if (mfd >= 0)
        fstat(mfd, &st);
    struct sockaddr_un a;
    socklen_t alen = probe_addr(&a, parent, nonce);
    int ls = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int ok = ls >= 0 && bind(ls, (struct sockaddr *)&a, alen) == 0 && listen(ls, 1) == 0;
    long msg[3] = {mfd, (long)st.st_ino, ok ? 0 : errno};
    if (write(out, msg, sizeof(msg)) != (ssize_t)sizeof(msg))
        _exit(1);
    close(out);
    struct pollfd pf = {ls, POLLIN, 0};
    if (ok && poll(&pf, 1, 5000) == 1) {
        int c = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
        char byte = 'F', ctl[CMSG_SPACE(sizeof(int))];
        struct iovec iov = {&byte, 1};
        struct msghdr mh = {
            .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof(ctl)};
        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(cm), &mfd, sizeof(int));
        if (c >= 0) {
            ssize_t w = sendmsg(c, &mh, MSG_NOSIGNAL);
            (void)w;
            close(c);
        }
    }
    char b;
    while (read(hold, &b, 1) > 0) {
    }
    _exit(0);
}

/* The importer's socket try: the exporter's fd, checked by inode. */
static int socket_fetch(pid_t parent, unsigned long nonce, ino_t want, int *peerpidfd)
{
    struct sockaddr_un a;
    socklen_t alen = probe_addr(&a, parent, nonce);
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        return errno;
    if (connect(s, (struct sockaddr *)&a, alen) != 0) {
        int e = errno;
        close(s);
        return e;
    }
    int pfd = -1;
    socklen_t len = sizeof(pfd);
    *peerpidfd = getsockopt(s, SOL_SOCKET, SO_PEERPIDFD, &pfd, &len) == 0 && pfd >= 0;
    if (pfd >= 0)
        close(pfd);
    char byte, ctl[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {&byte, 1};
    struct msghdr mh = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof(ctl)};
    ssize_t r = recvmsg(s, &mh, MSG_CMSG_CLOEXEC);
    int e = r == 1 ? EBADF : (r < 0 ? errno : ECONNRESET);
    struct cmsghdr *cm = r == 1 ? CMSG_FIRSTHDR(&mh) : NULL;
    if (cm && cm->cmsg_type == SCM_RIGHTS) {
        int fd;
        struct stat st;
        memcpy(&fd, CMSG_DATA(cm), sizeof(int));
        e = fstat(fd, &st) == 0 && st.st_ino == want ? 0 : EBADF;
        close(fd);
    }
    close(s);
    return e;
}

void byval_probe_run(byval_probe_t *p, int set_ptracer)
{
    memset(p, 0, sizeof(*p));
    p->pidfd_open_err = p->child_getfd_err = p->sibling_getfd_err = p->socket_err = ECHILD;
    int info[2], hold[2], res[2];
    if (pipe2(info, O_CLOEXEC) != 0)
        return;
    if (pipe2(hold, O_CLOEXEC) != 0 || pipe2(res, O_CLOEXEC) != 0) {
        close(info[0]);
        close(info[1]);
        return;
    }
    pid_t parent = getpid();
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    unsigned long nonce = (unsigned long)ts.tv_nsec ^ (unsigned long)ts.tv_sec << 30;
    pid_t e = fork();
    if (e == 0) {
        close(info[0]);
        close(hold[1]);
        close(res[0]);
        close(res[1]);
        exporter(info[1], hold[0], set_ptracer, parent, nonce);
    }
    close(info[1]);
    close(hold[0]);
    long msg[3];
    if (e < 0 || read(info[0], msg, sizeof(msg)) != (ssize_t)sizeof(msg) || msg[0] < 0)
        goto out;
    int mfd = (int)msg[0];
    ino_t ino = (ino_t)msg[1];

    /* Our own child: Yama lets an ancestor in; seccomp and ENOSYS do not. */
    int pidfd = byval_pidfd_open(e, 0);
    p->pidfd_open_err = pidfd < 0 ? errno : 0;
    if (pidfd >= 0) {
        p->pidfs = byval_pidfd_is_pidfs(pidfd);
        close(pidfd);
    }
    p->child_getfd_err = probe_getfd(e, mfd, ino, NULL);

    /* A sibling, as one rank of another. */
    pid_t i = fork();
    if (i == 0) {
        alarm(10);
        close(res[0]);
        int r[3] = {0, msg[2] ? (int)msg[2] : 0, 0};
        r[0] = probe_getfd(e, mfd, ino, NULL);
        if (!r[1])
            r[1] = socket_fetch(parent, nonce, ino, &r[2]);
        if (write(res[1], r, sizeof(r)) != (ssize_t)sizeof(r))
            _exit(1);
        _exit(0);
    }
    close(res[1]);
    res[1] = -1;
    int r[3];
    if (i > 0 && read(res[0], r, sizeof(r)) == (ssize_t)sizeof(r)) {
        p->sibling_getfd_err = r[0];
        p->socket_err = r[1];
        p->peerpidfd = r[2];
    }
    if (i > 0)
        waitpid(i, NULL, 0);
out:
    close(info[0]);
    close(hold[1]); /* the exporter may go */
    if (e > 0)
        waitpid(e, NULL, 0);
    close(res[0]);
    if (res[1] >= 0)
        close(res[1]);
}
