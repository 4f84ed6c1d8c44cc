/* SPDX-License-Identifier: MIT */
/*
 * registry.c - the exporter's side of the registry (see registry.h).
 *
 * One lock for adds and removes (both come with a driver export or free
 * that costs microseconds); importers only read the shared page. Slots are
 * found by a linear scan of [0, high): exports in flight are bounded by
 * the export caches (4096 by default), and a free of memory that was never
 * exported returns before the scan (nothing published yet).
 */
#include "handles/registry.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cache/locks.h"
#include "handles/resolve.h"

#define REG_BYTES (sizeof(byval_reg_header_t) + BYVAL_REG_SLOTS * sizeof(byval_reg_slot_t))

static struct {
    byval_lock_t lock;
    int tried;  /* creation attempted (once per process image or fork) */
    int memfd;
    int pipe_rd, pipe_wr;
    byval_reg_header_t *hdr;
    byval_reg_slot_t *slot;
    uint64_t next_serial;
    uint32_t live;
} reg = {.lock = BYVAL_LOCK_INIT(REGISTRY), .memfd = -1, .pipe_rd = -1, .pipe_wr = -1};

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
        munmap(reg.hdr, REG_BYTES);
    if (reg.memfd >= 0)
        close(reg.memfd);
    if (reg.pipe_rd >= 0)
        close(reg.pipe_rd);
    if (reg.pipe_wr >= 0)
        close(reg.pipe_wr);
    reg.hdr = NULL;
    reg.slot = NULL;
    reg.memfd = reg.pipe_rd = reg.pipe_wr = -1;
}

BYVAL_LOCK_STATIC(registry, &reg.lock);

static void fork_child(void)
{
    /* The forking thread held the lock across fork (prepare). Closing our
     * copies of the pipe's write end matters: importers see the parent's
     * exit as the hang-up only when every write end is closed. */
    destroy_locked();
    reg.tried = 0;
    reg.live = 0;
    reg.next_serial = 0;
}
BYVAL_FORK_CHILD(registry, fork_child);

static int create_locked(void)
{
    byval_self_t self;
    int p[2];
    if (reg.tried)
        return reg.hdr ? 0 : -1;
    reg.tried = 1;
    if (byval_self_get(&self) != 0)
        return -1;
    reg.memfd = memfd_create(BYVAL_REG_NAME, MFD_CLOEXEC);
    if (reg.memfd < 0 || ftruncate(reg.memfd, REG_BYTES) != 0 ||
        pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0) {
        destroy_locked();
        return -1;
    }
    reg.pipe_rd = p[0];
    reg.pipe_wr = p[1];
    void *m = mmap(NULL, REG_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, reg.memfd, 0);
    if (m == MAP_FAILED) {
        destroy_locked();
        return -1;
    }
    reg.hdr = m;
    reg.slot = (byval_reg_slot_t *)(reg.hdr + 1);
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
 * chunk fds share a key and, being /dev/nvidiactl files, an inode). */
static byval_reg_slot_t *find_locked(uint64_t key, uint32_t ino, uint32_t fd)
{
    uint32_t high = reg.hdr->high;
    for (uint32_t i = 0; i < high; i++) {
        byval_reg_slot_t *s = &reg.slot[i];
        if (s->serial && s->key == key && (!ino || s->ino == ino) && (!fd || s->fd == fd))
            return s;
    }
    return NULL;
}

static void reg_lock(void)
{
    byval_lock(&reg.lock);
}

int byval_registry_add(uint64_t key, uint32_t ino, uint32_t fd, uint64_t size)
{
    return byval_registry_add_serial(key, ino, fd, size, NULL);
}

int byval_registry_add_serial(uint64_t key, uint32_t ino, uint32_t fd, uint64_t size,
                              uint64_t *serial_p)
{
    int rc = -1;
    reg_lock();
    if (create_locked() != 0)
        goto out;
    byval_reg_slot_t *live = find_locked(key, ino, fd);
    if (live) {
        if (serial_p)
            *serial_p = live->serial;
        rc = 0;
        goto out;
    }
    byval_reg_slot_t *s = NULL;
    uint32_t high = reg.hdr->high;
    for (uint32_t i = 0; i < high && !s; i++) /* a freed slot first */
        if (!reg.slot[i].serial)
            s = &reg.slot[i];
    if (!s && high < BYVAL_REG_SLOTS) {
        s = &reg.slot[high];
        __atomic_store_n(&reg.hdr->high, high + 1, __ATOMIC_RELEASE);
    }
    if (!s)
        goto out;
    /* Importers read (key, ino) only after a serial they noted: a slot is
     * rewritten while its serial is 0, and the new serial is published
     * last. */
    __atomic_store_n(&s->key, key, __ATOMIC_RELAXED);
    __atomic_store_n(&s->ino, ino, __ATOMIC_RELAXED);
    __atomic_store_n(&s->fd, fd, __ATOMIC_RELAXED);
    __atomic_store_n(&s->size, size, __ATOMIC_RELAXED);
    __atomic_store_n(&s->serial, ++reg.next_serial, __ATOMIC_RELEASE);
    __atomic_add_fetch(&reg.live, 1, __ATOMIC_RELAXED);
    if (serial_p)
        *serial_p = reg.next_serial;
    rc = 0;
out:
    byval_unlock(&reg.lock);
    return rc;
}

/* Wake every importer: a byte into the pipe (each write wakes every
 * edge-triggered watcher). Full pipe (no importer drains it): drain it
 * ourselves, then write, so that the write is a wake-up again. */
static void wake_locked(void)
{
    static const char b = 'f';
    __atomic_fetch_add(&reg.hdr->seq, 1, __ATOMIC_RELEASE);
    if (write(reg.pipe_wr, &b, 1) == 1 || errno != EAGAIN)
        return;
    char sink[256];
    while (read(reg.pipe_rd, sink, sizeof(sink)) > 0)
        ;
    (void)!write(reg.pipe_wr, &b, 1);
}

void byval_registry_remove(uint64_t key, uint32_t ino)
{
    if (!__atomic_load_n(&reg.live, __ATOMIC_RELAXED))
        return;
    reg_lock();
    if (reg.hdr) {
        int any = 0;
        for (byval_reg_slot_t *s; (s = find_locked(key, ino, 0)) != NULL; any = 1) {
            __atomic_store_n(&s->serial, 0, __ATOMIC_RELEASE);
            __atomic_sub_fetch(&reg.live, 1, __ATOMIC_RELAXED);
        }
        if (any)
            wake_locked();
    }
    byval_unlock(&reg.lock);
}

unsigned byval_registry_live(void)
{
    return __atomic_load_n(&reg.live, __ATOMIC_RELAXED);
}

int byval_registry_fds(int *memfd_p, int *pipe_rd_p)
{
    reg_lock();
    *memfd_p = reg.memfd;
    *pipe_rd_p = reg.pipe_rd;
    byval_unlock(&reg.lock);
    return *memfd_p >= 0 ? 0 : -1;
}

