/* SPDX-License-Identifier: MIT */
/*
 * registry.c - the exporter's side of the registry (registry.h).
 *
 * What we decide is never read back from memory another process can
 * reach: the truth is a private array of slots (`mine`) and `high`, under
 * one lock; the shared page is a copy we only write. The page is sealed
 * against shrinking and growth before it is mapped, then against new
 * writes (F_SEAL_FUTURE_WRITE keeps our one mapping), and only a
 * read-only open file of it is kept and served. The pipe's read end is
 * anyone's to change (O_NONBLOCK, F_SETPIPE_SZ): we write through the
 * write end, which no peer holds, and empty a full pipe through a second,
 * private open file of the read end, so a free never blocks. (Pipes honour
 * RWF_NOWAIT only from Linux 6.4.) Slots are found by a linear scan of
 * [0, high): exports in flight are bounded by the export caches.
 */
#include "handles/registry.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "cache/locks.h"
#include "handles/registry_internal.h"

static struct {
    byval_lock_t lock;
    /* tried: creation attempted (once per process image or fork); offered:
     * its fds were handed out to be offered (once per registry); page_fd:
     * a read-only open file of the sealed page, what peers get, and its
     * inode, to re-prove it before serving it; pipe_rd: the read end peers
     * get, never read here (see above); pipe_wr, drain_rd: ours alone. */
    int tried, offered, page_fd, pipe_rd, pipe_wr, drain_rd;
    dev_t page_dev;
    ino_t page_ino;
    byval_reg_header_t *hdr;       /* the shared page: written, never read */
    byval_reg_slot_t *slot, *mine; /* mine: the truth, BYVAL_REG_SLOTS private slots */
    uint32_t high, live;
    uint64_t seq, next_serial;
} reg = {
    .lock = BYVAL_LOCK_INIT(REGISTRY), .page_fd = -1, .pipe_rd = -1, .pipe_wr = -1, .drain_rd = -1};

uint64_t byval_reg_key_bytes(const void *bytes, size_t len)
{
    /* FNV-1a 64: the key only has to tell a process's handles apart. */
    const uint8_t *b = bytes;
    uint64_t h = UINT64_C(0xcbf29ce484222325);
    for (size_t i = 0; i < len; i++)
        h = (h ^ b[i]) * UINT64_C(0x100000001b3);
    return h | UINT64_C(1) << 63; /* never a BYVAL_REG_KEY of a kind < 128 */
}

static void destroy_locked(void)
{
    if (reg.hdr)
        munmap(reg.hdr, BYVAL_REG_BYTES);
    /* `mine` stays for the next registry (a fork child's): no free() in a
     * fork child, whose allocator a sanitizer may have left locked. Only
     * [0, high) of it is ever read. */
    byval_close_fd(&reg.page_fd);
    byval_close_fd(&reg.pipe_rd);
    byval_close_fd(&reg.pipe_wr);
    byval_close_fd(&reg.drain_rd);
    reg.hdr = NULL;
    reg.slot = NULL;
    reg.high = 0;
    reg.seq = 0;
}

BYVAL_LOCK_STATIC(registry, &reg.lock);

static void fork_child(void)
{
    /* Our copy of the write end must go: importers see the parent's exit
     * only when every write end is closed. Our exports make a new one. */
    destroy_locked();
    reg.tried = 0;
    reg.offered = 0;
    reg.live = 0;
    reg.next_serial = 0;
}
BYVAL_FORK_CHILD(registry, fork_child);

int byval_reg_page_seals(void)
{
    /* 0 unknown, else the seals + 1 (seals of this kernel, probed once). */
    static int cached;
    int c = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (c)
        return c - 1;
    int seals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE;
    int fd = memfd_create("ipcbyval-probe", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd >= 0 && fcntl(fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE) != 0 && errno == EINVAL)
        seals &= ~F_SEAL_FUTURE_WRITE; /* before Linux 5.1 */
    if (fd < 0)
        return seals; /* out of fds: ask again next time */
    close(fd);
    __atomic_store_n(&cached, seals + 1, __ATOMIC_RELAXED);
    return seals;
}

static int byval_reg_reopen(int fd, int flags)
{
    char path[40];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    return open(path, flags | O_CLOEXEC);
}

/* The sealed page, mapped writable for us alone; the read-only open file
 * of it in reg.page_fd. 0, or -1 (nothing kept). */
static int page_create_locked(void)
{
    int mfd = memfd_create(BYVAL_REG_NAME, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (mfd < 0)
        return -1;
    void *m = MAP_FAILED;
    if (ftruncate(mfd, BYVAL_REG_BYTES) != 0 ||
        fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0 ||
        (m = mmap(NULL, BYVAL_REG_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0)) ==
            MAP_FAILED ||
        /* Our mapping exists: nobody can write the page any other way
         * from now on (Linux 5.1+), nor seal it further. */
        fcntl(mfd, F_ADD_SEALS, (byval_reg_page_seals() & F_SEAL_FUTURE_WRITE) | F_SEAL_SEAL) != 0)
        goto fail;
    /* What stays in our table is read-only (without /proc: sealed). */
    int ro = byval_reg_reopen(mfd, O_RDONLY);
    if (ro >= 0) {
        close(mfd);
        mfd = ro;
    }
    /* Where importers look first (registry.h): found without a walk. */
    int hinted = fcntl(mfd, F_DUPFD_CLOEXEC, BYVAL_REG_FD_HINT);
    if (hinted >= 0) {
        close(mfd);
        mfd = hinted;
    }
    struct stat st;
    if (fstat(mfd, &st) != 0)
        goto fail;
    reg.page_dev = st.st_dev;
    reg.page_ino = st.st_ino;
    reg.page_fd = mfd;
    reg.hdr = m;
    reg.slot = (byval_reg_slot_t *)(reg.hdr + 1);
    return 0;
fail:
    if (m != MAP_FAILED)
        munmap(m, BYVAL_REG_BYTES);
    close(mfd);
    return -1;
}

static int create_locked(void)
{
    byval_self_t self;
    int p[2];
    if (reg.tried)
        return reg.hdr ? 0 : -1;
    reg.tried = 1;
    if (byval_self_get(&self) != 0)
        return -1;
    if ((!reg.mine && !(reg.mine = calloc(BYVAL_REG_SLOTS, sizeof(*reg.mine)))) ||
        page_create_locked() != 0 || pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0) {
        destroy_locked();
        return -1;
    }
    reg.pipe_rd = p[0];
    reg.pipe_wr = p[1];
    /* We alone empty the pipe (without /proc a full one stays full). */
    reg.drain_rd = byval_reg_reopen(p[0], O_RDONLY | O_NONBLOCK);
    reg.hdr->version = BYVAL_REG_VERSION;
    reg.hdr->nslots = BYVAL_REG_SLOTS;
    reg.hdr->pid = self.pid;
    reg.hdr->pipe_fd = (uint32_t)reg.pipe_rd;
    reg.hdr->pipe_ino = (uint32_t)byval_fd_inode(reg.pipe_rd);
    reg.hdr->identity = self.identity;
    /* The magic last: an importer that sees it sees the rest. */
    __atomic_store_n(&reg.hdr->magic, BYVAL_REG_MAGIC, __ATOMIC_RELEASE);
    return 0;
}

/* A live slot of key (and ino, and fd, where not 0: a VMM reservation's
 * chunk fds share a key and, being /dev/nvidiactl files, an inode): its
 * index, or -1. Private memory only. */
static int find_locked(uint64_t key, uint32_t ino, uint32_t fd)
{
    for (uint32_t i = 0; i < reg.high; i++) {
        const byval_reg_slot_t *s = &reg.mine[i];
        if (s->serial && s->key == key && (!ino || s->ino == ino) && (!fd || s->fd == fd))
            return (int)i;
    }
    return -1;
}

/* Slot i's new serial (0: freed) into our copy and the page's. */
static void set_serial_locked(uint32_t i, uint64_t serial)
{
    reg.mine[i].serial = serial;
    __atomic_store_n(&reg.slot[i].serial, serial, __ATOMIC_RELEASE);
}

int byval_reg_add(uint64_t key, uint32_t ino, uint32_t fd, uint64_t size)
{
    return byval_reg_add_serial(key, ino, fd, size, NULL);
}

int byval_reg_add_serial(uint64_t key, uint32_t ino, uint32_t fd, uint64_t size, uint64_t *serial_p)
{
    int rc = -1;
    byval_lock(&reg.lock);
    if (create_locked() != 0)
        goto out;
    int live = find_locked(key, ino, fd);
    if (live >= 0) {
        if (serial_p)
            *serial_p = reg.mine[live].serial;
        rc = 0;
        goto out;
    }
    uint32_t i = 0;
    while (i < reg.high && reg.mine[i].serial) /* a freed slot first */
        i++;
    if (i == BYVAL_REG_SLOTS)
        goto out;
    if (i == reg.high)
        __atomic_store_n(&reg.hdr->high, ++reg.high, __ATOMIC_RELEASE);
    /* Importers read (key, ino) only after a serial they noted: a slot is
     * rewritten while its serial is 0, and the new serial is published
     * last. */
    byval_reg_slot_t *s = &reg.slot[i];
    reg.mine[i] = (byval_reg_slot_t){.key = key, .ino = ino, .fd = fd, .size = size};
    __atomic_store_n(&s->key, key, __ATOMIC_RELAXED);
    __atomic_store_n(&s->ino, ino, __ATOMIC_RELAXED);
    __atomic_store_n(&s->fd, fd, __ATOMIC_RELAXED);
    __atomic_store_n(&s->size, size, __ATOMIC_RELAXED);
    set_serial_locked(i, ++reg.next_serial);
    __atomic_add_fetch(&reg.live, 1, __ATOMIC_RELAXED);
    if (serial_p)
        *serial_p = reg.next_serial;
    rc = 0;
out:
    byval_unlock(&reg.lock);
    return rc;
}

void byval_reg_remove(uint64_t key, uint32_t ino)
{
    if (!__atomic_load_n(&reg.live, __ATOMIC_RELAXED))
        return;
    byval_lock(&reg.lock);
    int any = 0;
    if (reg.hdr) {
        for (int i; (i = find_locked(key, ino, 0)) >= 0; any = 1) {
            set_serial_locked((uint32_t)i, 0);
            __atomic_sub_fetch(&reg.live, 1, __ATOMIC_RELAXED);
        }
    }
    /* Wake every importer: the seq, then a byte into the pipe; a full pipe
     * is emptied through our own open file and written once more, never
     * waited on. */
    static const char b = 'f';
    char sink[256];
    if (any) {
        __atomic_store_n(&reg.hdr->seq, ++reg.seq, __ATOMIC_RELEASE);
        if (write(reg.pipe_wr, &b, 1) != 1 && errno == EAGAIN && reg.drain_rd >= 0) {
            for (int n = 0; n < 1024 && read(reg.drain_rd, sink, sizeof(sink)) > 0; n++)
                ;
            (void)!write(reg.pipe_wr, &b, 1);
        }
    }
    byval_unlock(&reg.lock);
}

/* The application owns our fd numbers: what page_fd holds now is served
 * only when it is the page made here, sealed as made. */
int32_t byval_reg_dup_page(int *dup_p)
{
    struct stat st;
    int want =
        F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL | (byval_reg_page_seals() & F_SEAL_FUTURE_WRITE);
    *dup_p = -1;
    byval_lock(&reg.lock);
    int32_t rc = reg.hdr && reg.page_fd >= 0 ? 0 : -EBADF;
    int dup = rc == 0 ? fcntl(reg.page_fd, F_DUPFD_CLOEXEC, 0) : -1;
    if (rc == 0 && dup < 0)
        rc = -errno;
    else if (rc == 0 &&
             (fstat(dup, &st) != 0 || st.st_dev != reg.page_dev || st.st_ino != reg.page_ino ||
              (fcntl(dup, F_GET_SEALS) & want) != want))
        rc = -ESTALE; /* another file at its number now */
    byval_unlock(&reg.lock);
    if (rc == 0)
        *dup_p = dup;
    else if (dup >= 0)
        close(dup);
    return rc;
}

int byval_reg_fds_to_offer(int *page_fd_p, int *pipe_rd_p)
{
    if (__atomic_load_n(&reg.offered, __ATOMIC_ACQUIRE))
        return -1; /* the common case: no lock */
    byval_lock(&reg.lock);
    int rc = -1;
    if (reg.hdr && !reg.offered) {
        *page_fd_p = reg.page_fd;
        *pipe_rd_p = reg.pipe_rd;
        __atomic_store_n(&reg.offered, 1, __ATOMIC_RELEASE);
        rc = 0;
    }
    byval_unlock(&reg.lock);
    return rc;
}
