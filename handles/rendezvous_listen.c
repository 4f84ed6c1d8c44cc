/* SPDX-License-Identifier: MIT */
/*
 * rendezvous_listen.c - the exporter's socket in the rendezvous directory
 * (see rendezvous.h).
 *
 * A name in the directory is always a listening socket until its process
 * dies: the socket is bound and listening under a temporary name first,
 * then renamed over the final one (atomically replacing whatever was
 * there: the name is ours alone, from our pidfs inode, so anything found
 * under it is stale or planted). Hence a final name nobody listens on
 * (ECONNREFUSED) is stale for sure, and exporters remove those of their
 * uid when they start. The process that made the socket removes it at
 * exit (a fork child never does: it closes its inherited copy,
 * broker_serve.c); a killed one leaves it for the next sweep.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "handles/rendezvous_internal.h"
#include "handles/resolve_internal.h"

#define SWEEP_MAX 4096 /* entries looked at per start: bounded work */

static struct {
    pid_t owner; /* the process that made the socket; 0: none */
    ino_t ino;   /* its inode, so exit removes only that file */
    char name[64];
} mine;

/* Is name (a socket of ours, fstat'ed as st) stale: nobody listens? */
static int stale(const char *name, uint32_t boot, const struct stat *st)
{
    unsigned b;
    unsigned long long id;
    char tail[8];
    if (sscanf(name, "ipcbyval-%8x-%16llx%7s", &b, &id, tail) != 3 || strcmp(tail, ".sock") != 0)
        return 0;
    if (!S_ISSOCK(st->st_mode) || st->st_uid != geteuid())
        return 0; /* not ours to judge: importers refuse or ignore it */
    if (b != boot)
        return 1; /* a previous boot's */
    struct sockaddr_un a;
    if (byval_rdv_addr(&a, name) != 0)
        return 0;
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s < 0)
        return 0;
    /* Non-blocking: a full backlog says EAGAIN (alive), never waits. A
     * live exporter sees a connection closed before any request. */
    int dead = connect(s, (struct sockaddr *)&a, sizeof(a)) != 0 && errno == ECONNREFUSED;
    close(s);
    return dead;
}

/* Remove the stale sockets of our uid (killed exporters). */
static void sweep(uint32_t boot)
{
    int fd = openat(byval_rdv.dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return;
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return;
    }
    struct dirent *e;
    struct stat st;
    for (int n = 0; n < SWEEP_MAX && (e = readdir(d)) != NULL; n++) {
        if (strncmp(e->d_name, "ipcbyval-", 9) != 0 || strcmp(e->d_name, mine.name) == 0)
            continue;
        if (fstatat(byval_rdv.dirfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
            stale(e->d_name, boot, &st))
            unlinkat(byval_rdv.dirfd, e->d_name, 0);
    }
    closedir(d);
}

int byval_rendezvous_listen(const byval_self_t *self, char *msg, size_t msglen)
{
    char tmp[96];
    struct sockaddr_un a;
    struct stat st;
    int err;
    if (!byval_rendezvous_enabled())
        return -1;
    if (!(self->id_flags & BYVAL_FLAG_ID_PIDFS)) {
        byval_msg(msg, msglen,
                  "IPCBYVAL_RENDEZVOUS_DIR needs pidfs (Linux 6.9 or later) to name and prove "
                  "this process across pid namespaces: not listening there");
        return -1;
    }
    byval_rendezvous_name(mine.name, sizeof(mine.name), self->boot, self->identity);
    sweep(self->boot);
    snprintf(tmp, sizeof(tmp), ".%s.%u.tmp", mine.name, (unsigned)getpid());
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s < 0 || byval_rdv_addr(&a, tmp) != 0)
        goto err;
    unlinkat(byval_rdv.dirfd, tmp, 0); /* a previous process's, same pid: ours to reuse */
    if (bind(s, (struct sockaddr *)&a, sizeof(a)) != 0)
        goto err;
    /* connect() needs write permission on the socket file: our uid only,
     * or the group's too (which must then own it). */
    int group = byval_rdv.gid != BYVAL_RENDEZVOUS_NO_GID;
    if ((group &&
         fchownat(byval_rdv.dirfd, tmp, (uid_t)-1, (gid_t)byval_rdv.gid, AT_SYMLINK_NOFOLLOW) !=
             0) ||
        fchmodat(byval_rdv.dirfd, tmp, group ? 0660 : 0600, AT_SYMLINK_NOFOLLOW) != 0 ||
        listen(s, 64) != 0 || renameat(byval_rdv.dirfd, tmp, byval_rdv.dirfd, mine.name) != 0)
        goto err_bound;
    if (fstatat(byval_rdv.dirfd, mine.name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
        mine.ino = st.st_ino;
        mine.owner = getpid();
    }
    return s;

err_bound:
    err = errno;
    unlinkat(byval_rdv.dirfd, tmp, 0);
    errno = err;
err:
    err = errno;
    byval_msg(msg, msglen, "cannot listen in the rendezvous directory %s: %s%s", byval_rdv.dir,
              strerror(err), err == EPERM ? " (the group: are we a member?)" : "");
    if (s >= 0)
        close(s);
    errno = err;
    return -1;
}

/* Why we do not listen: written once under the broker's lock, read by
 * whoever logs it first. */
static char failed[512];
static int failed_unsaid;

void byval_rendezvous_serve(const byval_self_t *self, int efd, uint64_t tag, int *fd_p)
{
    char msg[512];
    *fd_p = -1;
    if (!byval_rendezvous_enabled())
        return;
    int s = byval_rendezvous_listen(self, msg, sizeof(msg));
    if (s >= 0) {
        struct epoll_event ev = {.events = EPOLLIN, .data.u64 = tag};
        if (epoll_ctl(efd, EPOLL_CTL_ADD, s, &ev) == 0) {
            *fd_p = s;
            return;
        }
        byval_msg(msg, sizeof(msg), "cannot serve the rendezvous socket: epoll_ctl: %s",
                  strerror(errno));
        close(s);
    }
    if (__atomic_load_n(&failed_unsaid, __ATOMIC_ACQUIRE))
        return;
    memcpy(failed, msg, sizeof(failed));
    __atomic_store_n(&failed_unsaid, 1, __ATOMIC_RELEASE);
}

void byval_rendezvous_start_failed(int err)
{
    static int said; /* every export tries the start again: once is enough */
    char msg[512];
    if (!byval_rendezvous_enabled() || __atomic_load_n(&failed_unsaid, __ATOMIC_ACQUIRE) ||
        __atomic_exchange_n(&said, 1, __ATOMIC_ACQ_REL))
        return;
    byval_msg(msg, sizeof(msg),
              "cannot listen in the rendezvous directory %s: the socket fallback did not "
              "start: %s%s",
              byval_rdv.dir, strerror(err),
              err == EMFILE ? " (raise the open-file limit, ulimit -n)" : "");
    memcpy(failed, msg, sizeof(failed));
    __atomic_store_n(&failed_unsaid, 1, __ATOMIC_RELEASE);
}

int byval_rendezvous_take_error(char *msg, size_t msglen)
{
    if (!__atomic_load_n(&failed_unsaid, __ATOMIC_ACQUIRE) ||
        !__atomic_exchange_n(&failed_unsaid, 0, __ATOMIC_ACQ_REL))
        return 0;
    byval_msg(msg, msglen, "%s", failed);
    return 1;
}

/* At exit the socket goes with its process; only that one removes it,
 * and only the file it made. */
__attribute__((destructor)) static void rendezvous_exit(void)
{
    struct stat st;
    if (mine.owner != getpid() || byval_rdv.dirfd < 0)
        return;
    if (fstatat(byval_rdv.dirfd, mine.name, &st, AT_SYMLINK_NOFOLLOW) == 0 && st.st_ino == mine.ino)
        unlinkat(byval_rdv.dirfd, mine.name, 0);
}
