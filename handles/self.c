/* SPDX-License-Identifier: MIT */
/*
 * self.c - how an exporter describes itself in a record.
 *
 * Identity against PID reuse: a pid number alone is not a process. On
 * kernels with pidfs (Linux 6.9+), every pidfd of one process has the same
 * 64-bit inode number and no other process ever gets it during the boot:
 * the importer opens a pidfd for the pid and compares inodes, which is
 * race-free (the comparison is about the very pidfd it will then use) and
 * costs one fstat (~0.2 us). Older kernels give every pidfd the same
 * anonymous inode, so there the identity is the process start time (field
 * 22 of /proc/<pid>/stat), which resolve.c checks AFTER pidfd_open.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "handles/resolve.h"
#include "handles/resolve_internal.h"

static pthread_mutex_t self_lock = PTHREAD_MUTEX_INITIALIZER;
static int self_valid; /* atomic */
static byval_self_t self_cached;

uint64_t byval_proc_start_time(pid_t pid, int *err_p)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        *err_p = errno;
        return 0;
    }
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    *err_p = n < 0 ? errno : 0;
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    /* comm may contain spaces and ')': fields resume after the last ')'. */
    char *p = strrchr(buf, ')');
    if (!p)
        return 0;
    unsigned long long start = 0;
    /* after ") ": state(3) ... starttime is field 22, i.e. the 20th here */
    if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d "
                      "%*d %llu",
               &start) != 1)
        return 0;
    return start;
}

int byval_pidfd_is_pidfs(int pidfd)
{
    struct statfs sfs;
    return fstatfs(pidfd, &sfs) == 0 && (uint32_t)sfs.f_type == BYVAL_PIDFS_MAGIC;
}

static int self_compute(byval_self_t *s)
{
    struct stat st;
    char boot[64];
    memset(s, 0, sizeof(*s));
    s->pid = (uint32_t)getpid();
    if (stat("/proc/self/ns/pid", &st) != 0)
        return -1;
    s->pidns = (uint32_t)st.st_ino;
    int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, boot, sizeof(boot));
    close(fd);
    if (n < 36)
        return -1;
    s->boot = byval_fnv1a32(boot, 36);
    int pidfd = (int)syscall(SYS_pidfd_open, getpid(), 0);
    if (pidfd >= 0 && byval_pidfd_is_pidfs(pidfd) && fstat(pidfd, &st) == 0) {
        s->identity = st.st_ino;
        s->id_flags = BYVAL_FLAG_ID_PIDFS;
    } else {
        int err;
        s->identity = byval_proc_start_time(getpid(), &err);
        s->id_flags = 0;
    }
    if (pidfd >= 0)
        close(pidfd);
    return s->identity ? 0 : -1;
}

int byval_self_get(byval_self_t *self_p)
{
    if (!self_p)
        return -1;
    if (__atomic_load_n(&self_valid, __ATOMIC_ACQUIRE)) {
        *self_p = self_cached;
        return 0;
    }
    int rc = 0;
    pthread_mutex_lock(&self_lock);
    if (!__atomic_load_n(&self_valid, __ATOMIC_ACQUIRE)) {
        rc = self_compute(&self_cached);
        if (rc == 0)
            __atomic_store_n(&self_valid, 1, __ATOMIC_RELEASE);
    }
    if (rc == 0)
        *self_p = self_cached;
    pthread_mutex_unlock(&self_lock);
    return rc;
}

void byval_self_reset(void)
{
    /* Called in a fork child: the lock may be held by a parent thread. */
    pthread_mutex_init(&self_lock, NULL);
    __atomic_store_n(&self_valid, 0, __ATOMIC_RELEASE);
}

void byval_record_set_exporter(byval_record_t *rec, const byval_self_t *self)
{
    rec->version = BYVAL_WIRE_VERSION;
    rec->pid = self->pid;
    rec->pidns = self->pidns;
    rec->boot = self->boot;
    rec->identity = self->identity;
    rec->flags = (uint8_t)((rec->flags & ~BYVAL_FLAG_ID_PIDFS) | self->id_flags);
}
