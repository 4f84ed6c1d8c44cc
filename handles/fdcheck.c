/* SPDX-License-Identifier: MIT */
/*
 * fdcheck.c - is a duplicated fd the object the exporter described?
 *
 * pidfd_getfd duplicates whatever the exporter has at that number NOW. If
 * it closed the exported object and the number went to another file, the
 * importer would map the wrong memory. The record carries the low 32 bits
 * of the object's inode and its size in pages; both must match.
 */
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "handles/resolve.h"
#include "handles/resolve_internal.h"

uint64_t byval_fd_inode(int fd)
{
    struct stat st;
    return fd >= 0 && fstat(fd, &st) == 0 ? (uint64_t)st.st_ino : 0;
}

/* Size in bytes of the object behind fd, or -1 with errno. */
static int64_t object_size(int fd, const struct stat *st)
{
    if (S_ISREG(st->st_mode)) /* memfd, regular file */
        return (int64_t)st->st_size;
    /* dma-buf: st_size is 0, its llseek answers SEEK_END with the buffer
     * size and never moves f_pos (SEEK_CUR is EINVAL there). Anything else
     * seekable shares its file offset with the exporter through this
     * duplicate: put it back where it was. */
    off_t cur = lseek(fd, 0, SEEK_CUR);
    off_t end = lseek(fd, 0, SEEK_END);
    int err = errno;
    if (cur >= 0 && end >= 0 && cur != end)
        (void)lseek(fd, cur, SEEK_SET);
    errno = err;
    return end < 0 ? -1 : (int64_t)end;
}

int64_t byval_fd_size(int fd)
{
    struct stat st;
    return fd >= 0 && fstat(fd, &st) == 0 ? object_size(fd, &st) : -1;
}

byval_status_t byval_check_fd_kind(int dup, uint32_t pid, uint32_t fd, uint32_t fd_ino,
                                   uint64_t size, char *msg, size_t msglen)
{
    struct stat st;
    if (fstat(dup, &st) != 0) {
        byval_msg(msg, msglen, "fstat(fd %d, duplicate of fd %u in pid %u) failed: %s", dup, fd,
                  pid, strerror(errno));
        return BYVAL_E_SYS;
    }
    if ((uint32_t)st.st_ino != fd_ino) {
        /* All that is established: the object there now is another one.
         * The exporter may have closed the exported object and reused the
         * number, or the handle was made up: say neither as a fact. */
        byval_msg(msg, msglen,
                  "fd %u in pid %u holds another object than the handle describes (inode low "
                  "bits %u, the handle's %u): a stale or forged handle, not used",
                  fd, pid, (unsigned)(uint32_t)st.st_ino, fd_ino);
        return BYVAL_E_FDKIND;
    }
    if (!size)
        return BYVAL_OK;
    uint64_t want = (size + BYVAL_WIRE_PAGE - 1) / BYVAL_WIRE_PAGE;
    int64_t bytes = object_size(dup, &st);
    if (bytes < 0) {
        byval_msg(msg, msglen,
                  "lseek(fd %d, duplicate of fd %u in pid %u, SEEK_END) failed: %s: the object "
                  "has no size, so it is not the exported one",
                  dup, fd, pid, strerror(errno));
        return BYVAL_E_FDKIND;
    }
    uint64_t pages = ((uint64_t)bytes + BYVAL_WIRE_PAGE - 1) / BYVAL_WIRE_PAGE;
    if (pages != want) {
        byval_msg(msg, msglen,
                  "fd %u in pid %u holds an object of %llu pages, the handle describes %llu: a "
                  "stale or forged handle (or an object resized since), not used",
                  fd, pid, (unsigned long long)pages, (unsigned long long)want);
        return BYVAL_E_FDKIND;
    }
    return BYVAL_OK;
}
