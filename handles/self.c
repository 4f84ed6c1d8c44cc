/* SPDX-License-Identifier: MIT */
/*
 * self.c - how an exporter describes itself in a record.
 *
 * Identity against PID reuse: a pid number alone is not a process; the
 * exporter may exit and its pid go to an unrelated process before the
 * importer acts on the handle. Two flavours, chosen by the exporter:
 *
 * - pidfs (Linux 6.9+, a pidfd's fstatfs f_type is PIDFS_MAGIC): all
 *   pidfds of one process share one 64-bit inode number, and the kernel
 *   never gives that number to another process during the boot (it is
 *   allocated from a 64-bit counter, not recycled). The importer compares
 *   the inode of the very pidfd it then passes to pidfd_getfd, so the
 *   check has no window at all. Flag BYVAL_FLAG_ID_PIDFS.
 * - start time (older kernels, where every pidfd shares one anonymous
 *   inode): field 22 of /proc/<pid>/stat, in clock ticks after boot. The
 *   importer reads it AFTER pidfd_open (see identity.c for why that order
 *   is race-free). Weaker: a pid reused within the same tick (10 ms) would
 *   pass, which needs pid_max forks in 10 ms; and an exporter in another
 *   time namespace reports a shifted start time (refused, never accepted).
 *
 * The boot id hash in every record guarantees exporter and importer run
 * the same kernel, so both see the same flavour unless pidfd_open failed
 * in the exporter (seccomp, EMFILE): then it falls back to start time,
 * which any importer can still check through /proc.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "handles/resolve.h"
#include "handles/resolve_internal.h"

/* The cache: written once by whoever wins EMPTY -> BUSY, read by anyone
 * who sees READY (acquire), immutable while READY. No lock, so a fork
 * child can never inherit one held by a vanished thread, and resetting
 * is a single store. */
enum { SELF_EMPTY, SELF_BUSY, SELF_READY };
static int self_state;
static byval_self_t self_cached;

int byval_proc_start_time(pid_t pid, uint64_t *start_p)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    int err = n < 0 ? errno : 0;
    close(fd);
    if (n < 0)
        return err;
    buf[n] = '\0';
    /* comm may contain spaces and ')': the fields resume after the last
     * ')'. starttime is field 22; field 3 (state) follows ") ". */
    char *p = strrchr(buf, ')');
    if (!p || p[1] != ' ')
        return EIO;
    p += 2;
    for (int field = 3; field < 22; field++) {
        p = strchr(p, ' ');
        if (!p)
            return EIO;
        p++;
    }
    char *end;
    errno = 0;
    unsigned long long start = strtoull(p, &end, 10);
    if (end == p || errno || (*end != ' ' && *end != '\n' && *end != '\0'))
        return EIO;
    *start_p = start;
    return 0;
}

int byval_pidfd_is_pidfs(int pidfd)
{
    struct statfs sfs;
    return fstatfs(pidfd, &sfs) == 0 && (uint32_t)sfs.f_type == BYVAL_PIDFS_MAGIC;
}

static int self_boot_hash(uint32_t *boot_p)
{
    char boot[64];
    int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, boot, sizeof(boot));
    close(fd);
    if (n < 36) /* a UUID in text form */
        return -1;
    *boot_p = byval_fnv1a32(boot, 36);
    return 0;
}

static int self_compute(byval_self_t *s)
{
    struct stat st;
    memset(s, 0, sizeof(*s));
    s->pid = (uint32_t)getpid();
    if (stat("/proc/self/ns/pid", &st) != 0)
        return -1;
    s->pidns = (uint32_t)st.st_ino;
    if (self_boot_hash(&s->boot) != 0)
        return -1;
    int pidfd = byval_pidfd_open((pid_t)s->pid, 0);
    if (pidfd >= 0) {
        int pidfs = byval_pidfd_is_pidfs(pidfd) && fstat(pidfd, &st) == 0;
        close(pidfd);
        if (pidfs) {
            s->identity = (uint64_t)st.st_ino;
            s->id_flags = BYVAL_FLAG_ID_PIDFS;
            return 0;
        }
    }
    s->id_flags = 0;
    return byval_proc_start_time((pid_t)s->pid, &s->identity) == 0 ? 0 : -1;
}

int byval_self_get(byval_self_t *self_p)
{
    if (!self_p)
        return -1;
    if (__atomic_load_n(&self_state, __ATOMIC_ACQUIRE) == SELF_READY) {
        *self_p = self_cached;
        return 0;
    }
    /* First use (or racing first uses): each caller computes its own copy,
     * the same for all; one of them publishes it. */
    byval_self_t s;
    if (self_compute(&s) != 0)
        return -1;
    int expect = SELF_EMPTY;
    if (__atomic_compare_exchange_n(&self_state, &expect, SELF_BUSY, 0, __ATOMIC_ACQUIRE,
                                    __ATOMIC_RELAXED)) {
        self_cached = s;
        __atomic_store_n(&self_state, SELF_READY, __ATOMIC_RELEASE);
    }
    *self_p = s;
    return 0;
}

void byval_self_reset(void)
{
    /* Called in a fork child, where no other thread runs: one store, no
     * lock, nothing that is not async-signal-safe. A parent thread caught
     * in BUSY at fork time cannot leave the child stuck there either. */
    __atomic_store_n(&self_state, SELF_EMPTY, __ATOMIC_RELEASE);
}

void byval_record_set_exporter(byval_record_t *rec, const byval_self_t *self)
{
    rec->version = BYVAL_WIRE_VERSION;
    rec->pid = self->pid;
    rec->pidns = self->pidns;
    rec->boot = self->boot;
    rec->identity = self->identity;
    rec->flags =
        (uint8_t)((rec->flags & ~BYVAL_FLAG_ID_PIDFS) | (self->id_flags & BYVAL_FLAG_ID_PIDFS));
}
