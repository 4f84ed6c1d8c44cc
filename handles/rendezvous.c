/* SPDX-License-Identifier: MIT */
/*
 * rendezvous.c - the rendezvous directory: its checks, the importer's
 * connect and the exporter's rule for its peers (see rendezvous.h; the
 * exporter's listening socket is rendezvous_listen.c).
 *
 * State is written once by byval_rendezvous_setup (the shim's init, under
 * its byval_once) and only read afterwards.
 */
#include "handles/rendezvous.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "handles/broker_internal.h"
#include "handles/rendezvous_internal.h"

byval_rdv_t byval_rdv = {.dirfd = -1, .gid = BYVAL_RENDEZVOUS_NO_GID};

void byval_rendezvous_name(char *buf, size_t len, uint32_t boot, uint64_t identity)
{
    snprintf(buf, len, "ipcbyval-%08x-%016llx.sock", boot, (unsigned long long)identity);
}

int byval_rdv_addr(struct sockaddr_un *a, const char *name)
{
    memset(a, 0, sizeof(*a));
    a->sun_family = AF_UNIX;
    int n = byval_rdv.via_proc
        ? snprintf(a->sun_path, sizeof(a->sun_path), "/proc/self/fd/%d/%s", byval_rdv.dirfd, name)
        : snprintf(a->sun_path, sizeof(a->sun_path), "%s/%s", byval_rdv.dir, name);
    return n > 0 && (size_t)n < sizeof(a->sun_path) ? 0 : -1;
}

int byval_rdv_trusted_owner(const struct stat *st)
{
    if (st->st_uid == geteuid())
        return 1;
    return byval_rdv.gid != BYVAL_RENDEZVOUS_NO_GID && st->st_gid == (gid_t)byval_rdv.gid;
}

/* Is the directory (fstat'ed) one whose entries we may trust? Only its
 * owner (us or root) and, where the group may write, the group we were
 * told to trust can have put anything there. */
static int dir_ok(const struct stat *st, const char *dir, char *msg, size_t msglen)
{
    long gid = byval_rdv.gid;
    if (!S_ISDIR(st->st_mode)) {
        byval_msg(msg, msglen, "IPCBYVAL_RENDEZVOUS_DIR %s is not a directory: not used", dir);
        return 0;
    }
    if (st->st_mode & S_IWOTH) {
        byval_msg(msg, msglen,
                  "IPCBYVAL_RENDEZVOUS_DIR %s is world-writable (mode %04o): any user could plant "
                  "sockets there, not used (chmod o-w it; share it with a group through "
                  "IPCBYVAL_RENDEZVOUS_GID)",
                  dir, (unsigned)(st->st_mode & 07777));
        return 0;
    }
    int owner = st->st_uid == geteuid() || st->st_uid == 0 ||
        (gid != BYVAL_RENDEZVOUS_NO_GID && st->st_gid == (gid_t)gid);
    if (!owner) {
        byval_msg(msg, msglen,
                  "IPCBYVAL_RENDEZVOUS_DIR %s is owned by uid %u, not by us (uid %u) or root%s: "
                  "not used",
                  dir, (unsigned)st->st_uid, (unsigned)geteuid(),
                  gid != BYVAL_RENDEZVOUS_NO_GID ? " or the rendezvous group" : "");
        return 0;
    }
    if ((st->st_mode & S_IWGRP) && (gid == BYVAL_RENDEZVOUS_NO_GID || st->st_gid != (gid_t)gid)) {
        byval_msg(msg, msglen,
                  "IPCBYVAL_RENDEZVOUS_DIR %s is writable by group %u, which is not "
                  "IPCBYVAL_RENDEZVOUS_GID: not used (set IPCBYVAL_RENDEZVOUS_GID=%u if that "
                  "group is trusted, or chmod g-w it)",
                  dir, (unsigned)st->st_gid, (unsigned)st->st_gid);
        return 0;
    }
    return 1;
}

int byval_rendezvous_setup(const char *dir, long gid, char *msg, size_t msglen)
{
    struct stat st;
    if (msg && msglen)
        msg[0] = '\0';
    if (!dir || !*dir)
        return 0;
    if (dir[0] != '/' || strlen(dir) >= sizeof(byval_rdv.dir)) {
        byval_msg(msg, msglen,
                  "IPCBYVAL_RENDEZVOUS_DIR must be an absolute path shorter than %zu bytes: "
                  "not used",
                  sizeof(byval_rdv.dir));
        return -1;
    }
    byval_rdv.gid = gid;
    /* The last component must not be a symlink; the fd is then the
     * directory we checked, whatever is renamed over its path later. */
    int fd = open(dir, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        byval_msg(msg, msglen, "IPCBYVAL_RENDEZVOUS_DIR %s: %s: not used", dir,
                  errno == ELOOP || errno == ENOTDIR ? "a symlink or not a directory"
                                                     : strerror(errno));
        return -1;
    }
    if (fstat(fd, &st) != 0 || !dir_ok(&st, dir, msg, msglen)) {
        close(fd);
        return -1;
    }
    snprintf(byval_rdv.dir, sizeof(byval_rdv.dir), "%s", dir);
    byval_rdv.dirfd = fd;
    byval_rdv.via_proc = access("/proc/self/fd", X_OK) == 0;
    struct sockaddr_un a;
    char name[64];
    byval_rendezvous_name(name, sizeof(name), 0, 0);
    if (byval_rdv_addr(&a, name) != 0) {
        byval_msg(msg, msglen,
                  "IPCBYVAL_RENDEZVOUS_DIR %s: no /proc here and the path is too long for a "
                  "socket address: not used",
                  dir);
        byval_rdv.dirfd = -1;
        close(fd);
        return -1;
    }
    return 0;
}

int byval_rendezvous_enabled(void)
{
    return byval_rdv.dirfd >= 0;
}

const char *byval_rendezvous_dir(void)
{
    return byval_rdv.dirfd >= 0 ? byval_rdv.dir : "";
}

/* Is gid among the supplementary groups of conn's peer? However many it
 * has: on ERANGE the kernel says how many bytes they take. */
static int peer_in_group(int conn, gid_t gid)
{
    gid_t small[64], *groups = small;
    socklen_t len = sizeof(small);
    int in = 0, rc = getsockopt(conn, SOL_SOCKET, SO_PEERGROUPS, groups, &len);
    if (rc != 0 && errno == ERANGE && len > sizeof(small) && (groups = malloc(len)) != NULL)
        rc = getsockopt(conn, SOL_SOCKET, SO_PEERGROUPS, groups, &len);
    for (size_t i = 0; rc == 0 && groups && i < len / sizeof(gid_t); i++)
        in |= groups[i] == gid;
    if (groups != small)
        free(groups);
    return in;
}

int byval_rendezvous_peer_allowed(int conn, const struct ucred *cred)
{
    long gid = byval_rdv.gid;
    if (gid != BYVAL_RENDEZVOUS_NO_GID && cred->uid != geteuid() &&
        (cred->gid == (gid_t)gid || peer_in_group(conn, (gid_t)gid)))
        return 1;
    return byval_broker_uid_allowed(cred->uid); /* counts the refusal */
}

byval_status_t byval_rendezvous_connect(int s, const byval_record_t *rec, int64_t deadline,
                                        char *msg, size_t msglen)
{
    char name[64];
    struct stat st;
    struct sockaddr_un a;
    if (!byval_rendezvous_enabled())
        return BYVAL_E_GONE;
    if (!(rec->flags & BYVAL_FLAG_ID_PIDFS)) {
        byval_msg(msg, msglen,
                  "exporter pid %u has no pidfs identity (kernel before Linux 6.9): nothing "
                  "proves a process across pid namespaces there, so the rendezvous directory "
                  "is not used",
                  rec->pid);
        return BYVAL_E_IDENTITY;
    }
    byval_rendezvous_name(name, sizeof(name), rec->boot, rec->identity);
    if (fstatat(byval_rdv.dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
        int err = errno;
        byval_msg(msg, msglen,
                  "exporter pid %u has no socket in the rendezvous directory %s (%s): it does "
                  "not run with the same IPCBYVAL_RENDEZVOUS_DIR, it could not listen there "
                  "(its log says why), or it exited",
                  rec->pid, byval_rdv.dir, strerror(err));
        return err == ENOENT ? BYVAL_E_GONE : BYVAL_E_SYS;
    }
    if (!S_ISSOCK(st.st_mode) || !byval_rdv_trusted_owner(&st)) {
        byval_msg(msg, msglen,
                  "%s/%s is %s owned by uid %u gid %u, not a socket of our uid (%u)%s: planted "
                  "by someone else, not used",
                  byval_rdv.dir, name, S_ISSOCK(st.st_mode) ? "a socket" : "not a socket",
                  (unsigned)st.st_uid, (unsigned)st.st_gid, (unsigned)geteuid(),
                  byval_rdv.gid != BYVAL_RENDEZVOUS_NO_GID ? " or of the rendezvous group" : "");
        return BYVAL_E_IDENTITY;
    }
    if (byval_rdv_addr(&a, name) != 0) {
        byval_msg(msg, msglen, "socket path for %s too long", name);
        return BYVAL_E_SYS;
    }
    int rc, err = 0;
    byval_broker_until(s, SO_SNDTIMEO, deadline);
    /* As for the abstract name: an interrupted connect left s unconnected. */
    while ((rc = connect(s, (struct sockaddr *)&a, sizeof(a))) != 0 && (err = errno) == EINTR &&
           byval_broker_now_ms() < deadline)
        byval_broker_until(s, SO_SNDTIMEO, deadline);
    if (rc == 0 || err == EISCONN)
        return BYVAL_OK;
    if (err == ECONNREFUSED) {
        byval_msg(msg, msglen, "%s/%s is stale (nobody listens: exporter pid %u exited): ignored",
                  byval_rdv.dir, name, rec->pid);
        return BYVAL_E_GONE;
    }
    byval_msg(msg, msglen, "connect to %s/%s (exporter pid %u) failed: %s%s", byval_rdv.dir, name,
              rec->pid, strerror(err), err == EAGAIN ? " (its backlog stayed full)" : "");
    return BYVAL_E_SYS;
}
