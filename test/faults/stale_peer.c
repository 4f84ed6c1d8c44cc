/* SPDX-License-Identifier: MIT */
/* stale_peer.c - a same-uid bystander's view of an exporter's broker (see
 * stale_peer.h), for fault_stale and fault_stale_cu. */
#include "test/faults/stale_peer.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

int stale_failures;

void stale_check(int ok, const char *what, const char *why)
{
    printf("%s: %s%s%s\n", ok ? "PASS" : "FAIL", what, ok ? "" : ": ", ok ? "" : why);
    fflush(stdout);
    stale_failures += !ok;
}

/* The broker's abstract name for pid, from /proc/net/unix: what any
 * process of the network namespace sees. */
static int broker_name(pid_t pid, char *name, size_t len)
{
    FILE *f = fopen("/proc/net/unix", "r");
    char line[512], want[32];
    int found = 0;
    snprintf(want, sizeof(want), "-%d-", (int)pid);
    while (f && !found && fgets(line, sizeof(line), f)) {
        char *at = strstr(line, "@ipcbyval-");
        if (at && strstr(at, want)) {
            at[strcspn(at, "\n ")] = 0;
            snprintf(name, len, "%s", at + 1);
            found = 1;
        }
    }
    if (f)
        fclose(f);
    return found ? 0 : -1;
}

/* Ask pid's broker for fd (magic, ino): the status, *got_p the fd sent. */
int stale_ask(pid_t pid, uint32_t magic, uint32_t fd, uint32_t ino, int *got_p)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    char name[108];
    *got_p = -1;
    if (broker_name(pid, name, sizeof(name)) != 0)
        return -ENOENT;
    size_t n = strlen(name);
    memcpy(a.sun_path + 1, name, n);
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0 || connect(s, (struct sockaddr *)&a, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n)) != 0) {
        if (s >= 0)
            close(s);
        return -ECONNREFUSED;
    }
    uint32_t req[5] = {magic, fd, ino, 0, 0}; /* no tag: a peer of the exporter's uid */
    int32_t rsp[2] = {0, -EPROTO};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } cbuf;
    struct iovec iov = {.iov_base = rsp, .iov_len = sizeof(rsp)};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf.buf,
                        .msg_controllen = sizeof(cbuf.buf)};
    if (send(s, req, sizeof(req), MSG_NOSIGNAL) != (ssize_t)sizeof(req) || recvmsg(s, &mh, 0) <= 0) {
        close(s);
        return -EPIPE;
    }
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    if (c && c->cmsg_type == SCM_RIGHTS)
        memcpy(got_p, CMSG_DATA(c), sizeof(int));
    close(s);
    return rsp[1];
}

uint32_t stale_proc_ino(pid_t pid, uint32_t fd)
{
    char path[64];
    struct stat st;
    snprintf(path, sizeof(path), "/proc/%d/fd/%u", (int)pid, fd);
    return stat(path, &st) == 0 ? (uint32_t)st.st_ino : 0;
}


void stale_after_end(pid_t pid, uint32_t fd, uint32_t old_ino, int placed, const char *path)
{
    char why[128];
    int got, st;
    if (placed) {
        uint32_t ino = stale_proc_ino(pid, fd);
        st = stale_ask(pid, STALE_MAGIC, fd, ino, &got);
        snprintf(why, sizeof(why), "status %d, %s", st,
                 got >= 0 ? "the exporter's private socket was handed out" : "no fd");
        stale_check(st != 0 && got < 0,
                    "its number now the exporter's socket, asked with that socket's inode: refused",
                    why);
        if (got >= 0)
            close(got);
    } else {
        printf("SKIP: %s: the driver kept fd %u open: no socket on it (the old object is asked for below)\n",
               path, fd);
    }
    st = stale_ask(pid, STALE_MAGIC, fd, old_ino, &got);
    snprintf(why, sizeof(why), "status %d, fd %s", st, got >= 0 ? "sent" : "not sent");
    stale_check(st != 0 && got < 0, "asked with the ended export's inode: refused", why);
    if (got >= 0)
        close(got);
    st = stale_ask(pid, STALE_MAGIC_RESCUE, fd, 0, &got);
    snprintf(why, sizeof(why), "status %d, fd %s", st, got >= 0 ? "sent" : "not sent");
    stale_check(st != 0 && got < 0, "asked through the rescue: refused", why);
    if (got >= 0)
        close(got);
}
