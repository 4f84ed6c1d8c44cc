/* SPDX-License-Identifier: MIT */
/*
 * test_fdcheck_fuse.c - the tiny FUSE file system test_fdcheck.c mounts
 * (raw /dev/fuse protocol, no libfuse): one file whose daemon answers
 * until told to stall a process, and reports how many requests reached
 * it since (test_fdcheck.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/fuse.h>
#include <poll.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "handles/broker_internal.h"
#include "handles/transport.h"
#include "handles/fdcheck.h"
#include "handles/resolve.h"
#include "handles/sys.h"
#include "handles/transport.h"
#include "test/unit/test_skip.h"
#include "test/unit/test_fdcheck.h"

#define FUSE_FILE_INO 2

static void fuse_reply(int dev, uint64_t unique, int error, const void *out, size_t len)
{
    struct fuse_out_header oh = {.len = (uint32_t)(sizeof(oh) + len), .error = error,
                                 .unique = unique};
    struct iovec iov[2] = {{&oh, sizeof(oh)}, {(void *)out, len}};
    (void)!writev(dev, iov, len ? 2 : 1);
}

static void fuse_attr_of(uint64_t ino, struct fuse_attr *a)
{
    memset(a, 0, sizeof(*a));
    a->ino = ino;
    a->mode = ino == FUSE_ROOT_ID ? S_IFDIR | 0755 : S_IFREG | 0666;
    a->nlink = 1;
    a->size = ino == FUSE_ROOT_ID ? 0 : 8192;
    a->blksize = 4096;
}

/* The thread group (process) of thread tid. */
static pid_t tgid_of(pid_t tid)
{
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)tid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return tid;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    buf[n > 0 ? n : 0] = '\0';
    const char *t = strstr(buf, "\nTgid:");
    return t ? (pid_t)atoi(t + 6) : tid;
}

/* Serve dev until killed: one directory with one file "f". Once a pid
 * arrives on ctl, that process's requests about the file are read and
 * never answered (what a stalled or malicious daemon does to it), and
 * counted on report. Everyone else is answered: nothing but the process
 * under test can get stuck on this file system. */
static void fuse_daemon(int dev, int ctl, int report)
{
    static char buf[FUSE_MIN_READ_BUFFER + (1 << 20)];
    int stalled = 0;
    pid_t stall = -1;
    for (;;) {
        struct pollfd p[2] = {{dev, POLLIN, 0}, {ctl, POLLIN, 0}};
        if (poll(p, 2, -1) < 0)
            continue;
        if (p[1].revents) {
            pid_t who;
            if (read(ctl, &who, sizeof(who)) == sizeof(who))
                stall = who;
            else
                p[1].fd = -1;
        }
        if (!(p[0].revents & POLLIN))
            continue;
        ssize_t n = read(dev, buf, sizeof(buf));
        if (n < (ssize_t)sizeof(struct fuse_in_header))
            continue;
        struct fuse_in_header *in = (void *)buf;
        void *arg = buf + sizeof(*in);
        if (stall > 0 && in->nodeid == FUSE_FILE_INO && tgid_of((pid_t)in->pid) == stall &&
            in->opcode != FUSE_FORGET &&
            in->opcode != FUSE_INTERRUPT) {
            stalled++;
            (void)!write(report, &stalled, sizeof(stalled));
            continue; /* never answered */
        }
        switch (in->opcode) {
        case FUSE_INIT: {
            struct fuse_init_in *ii = arg;
            struct fuse_init_out o = {.major = FUSE_KERNEL_VERSION, .minor = 31,
                                      .max_readahead = ii->max_readahead, .max_background = 16,
                                      .congestion_threshold = 12, .max_write = 4096,
                                      .time_gran = 1};
            fuse_reply(dev, in->unique, 0, &o, sizeof(o));
            break;
        }
        case FUSE_LOOKUP: {
            struct fuse_entry_out o;
            memset(&o, 0, sizeof(o));
            if (strcmp(arg, "f") != 0) {
                fuse_reply(dev, in->unique, -ENOENT, NULL, 0);
                break;
            }
            o.nodeid = FUSE_FILE_INO;
            o.entry_valid = 3600;
            fuse_attr_of(FUSE_FILE_INO, &o.attr); /* attr_valid 0: every stat asks us */
            fuse_reply(dev, in->unique, 0, &o, sizeof(o));
            break;
        }
        case FUSE_GETATTR: {
            struct fuse_attr_out o;
            memset(&o, 0, sizeof(o));
            fuse_attr_of(in->nodeid, &o.attr);
            fuse_reply(dev, in->unique, 0, &o, sizeof(o));
            break;
        }
        case FUSE_OPEN:
        case FUSE_OPENDIR: {
            struct fuse_open_out o = {.fh = 1};
            fuse_reply(dev, in->unique, 0, &o, sizeof(o));
            break;
        }
        case FUSE_FLUSH:
        case FUSE_RELEASE:
        case FUSE_RELEASEDIR:
            fuse_reply(dev, in->unique, 0, NULL, 0);
            break;
        case FUSE_FORGET:
        case FUSE_BATCH_FORGET:
        case FUSE_INTERRUPT:
            break;
        default:
            fuse_reply(dev, in->unique, -ENOSYS, NULL, 0);
        }
    }
}

/* Mount the daemon's file system in a private mount namespace (this test
 * process's own, from here on). NULL on success, else why not. */
const char *fuse_up(fuse_world_t *w, const char *subdir)
{
    if (geteuid() != 0)
        return "needs root (mount)";
    int dev = open("/dev/fuse", O_RDWR | O_CLOEXEC);
    if (dev < 0)
        return "no /dev/fuse";
    if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
        close(dev);
        return "cannot make a private mount namespace";
    }
    snprintf(w->root, sizeof(w->root), "/tmp/byval-fuse-%d", (int)getpid());
    mkdir(w->root, 0755);
    if (mount("byval-test", w->root, "tmpfs", 0, "size=1m") != 0)
        return "cannot mount a tmpfs";
    snprintf(w->mnt, sizeof(w->mnt), "%s/%s", w->root, subdir);
    char jail_proc[128];
    snprintf(jail_proc, sizeof(jail_proc), "%s/proc", w->root);
    if (mkdir(w->mnt, 0755) != 0 || mkdir(jail_proc, 0755) != 0 ||
        mount("proc", jail_proc, "proc", 0, NULL) != 0)
        return "cannot prepare the mount points";
    int ctl[2], rep[2];
    assert_int_equal(pipe(ctl), 0);
    assert_int_equal(pipe(rep), 0);
    w->daemon = fork();
    if (w->daemon == 0) {
        close(ctl[1]);
        close(rep[0]);
        fuse_daemon(dev, ctl[0], rep[1]);
        _exit(0);
    }
    close(ctl[0]);
    close(rep[1]);
    w->ctl = ctl[1];
    w->report = rep[0];
    char opts[128];
    snprintf(opts, sizeof(opts), "fd=%d,rootmode=40000,user_id=0,group_id=0,allow_other", dev);
    int rc = mount("byval-test", w->mnt, "fuse.byvaltest", MS_NOSUID | MS_NODEV, opts);
    close(dev);
    return rc == 0 ? NULL : "cannot mount the FUSE file system";
}

void fuse_down(fuse_world_t *w)
{
    if (w->daemon > 0) {
        kill(w->daemon, SIGKILL); /* aborts the connection: anything waiting returns */
        waitpid(w->daemon, NULL, 0);
    }
    close(w->ctl);
    close(w->report);
    char p[128];
    snprintf(p, sizeof(p), "%s/proc", w->root);
    umount2(p, MNT_DETACH);
    umount2(w->mnt, MNT_DETACH);
    umount2(w->root, MNT_DETACH);
    rmdir(w->root);
}
