/* SPDX-License-Identifier: MIT */
/*
 * devmem: the device-memory ledger of the test drivers (see devmem.h).
 *
 * File layout: a header page, then DEVMEM_SLOTS slots. Byte 0 of the file
 * is the ledger's mutex (an F_OFD_SETLKW write lock: released by the
 * kernel if its holder dies); byte HOLD_BASE + i is slot i's hold lock,
 * read-locked by every process that refers to slot i. Each process keeps
 * two open file descriptions: `hold` for its locks and `probe` to ask
 * whether anyone holds a slot (F_OFD_GETLK on a separate description sees
 * every lock, its own process's included). Within a process, a count per
 * slot decides when its one read lock is taken and dropped.
 *
 * Reclaiming: a slot is freed when its last holder releases it, and a
 * slot whose holders exited without releasing it (killed, or simply done)
 * is found on the next scan: the limit check of an allocation that would
 * not fit, and every statistics call.
 *
 * fork: the child shares the parent's open file descriptions, hence its
 * locks; a release in the child would drop the parent's. The child
 * therefore starts afresh on its next call (new descriptions, no holds),
 * as a forked child holds no device state on a GPU either.
 */
#include "test/devmem/devmem.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define LEDGER_MAGIC 0x31524744454d5644ull /* "DVMEDGR1" */
#define DEVMEM_SLOTS 16384u
#define HDR_SIZE 4096u
#define HOLD_BASE ((off_t)1 << 24)
#define SLOT_FREED 1u  /* the allocating process freed it */
#define SLOT_IMPORT 2u /* memory of another ledger (or a reclaimed slot) */

struct ledger_hdr {
    uint64_t magic;
    uint64_t id; /* random: tags of another ledger are told apart */
    uint64_t next_gen;
    uint32_t nslots;
    uint32_t cursor; /* where the next free-slot search starts */
};

struct ledger_slot {
    uint64_t gen; /* 0: free */
    uint64_t size;
    int32_t dev;
    uint32_t flags;
    int32_t pid; /* allocating process, for debugging */
    uint32_t pad;
};

_Static_assert(sizeof(struct ledger_hdr) <= HDR_SIZE, "header fits its page");
_Static_assert(HDR_SIZE + DEVMEM_SLOTS * sizeof(struct ledger_slot) < HOLD_BASE,
               "lock bytes lie beyond the data");

static struct {
    pthread_mutex_t mu;
    bool on;      /* a ledger is open */
    bool shared;  /* a file path, not a private memfd */
    bool forked;  /* set in a fork child: reopen before use */
    int hold, probe;
    char path[PATH_MAX];
    uint64_t total;
    struct ledger_hdr *hdr;
    struct ledger_slot *slots;
    uint32_t *refs; /* this process's references per slot */
} L = {.mu = PTHREAD_MUTEX_INITIALIZER, .hold = -1, .probe = -1};

static pthread_once_t setup_once = PTHREAD_ONCE_INIT;
static const char *setup_prefix;
static uint64_t setup_default;

uint64_t devmem_parse_size(const char *s)
{
    char *end;
    unsigned long long v;
    int shift = 0;

    if (s == NULL || *s < '0' || *s > '9')
        return 0;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno != 0)
        return 0;
    switch (*end) {
    case 'T': case 't': shift = 40; end++; break;
    case 'G': case 'g': shift = 30; end++; break;
    case 'M': case 'm': shift = 20; end++; break;
    case 'K': case 'k': shift = 10; end++; break;
    default: break;
    }
    if (*end == 'i' || *end == 'B' || *end == 'b') /* "GiB", "GB" */
        end += (*end == 'i' && end[1] == 'B') ? 2 : 1;
    if (*end != '\0' || (shift && v > (UINT64_MAX >> shift)))
        return 0;
    return (uint64_t)v << shift;
}

static int lock_op(int fd, int cmd, short type, off_t start)
{
    struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = start, .l_len = 1};
    int r;

    do
        r = fcntl(fd, cmd, &fl);
    while (r < 0 && errno == EINTR);
    return r;
}

static void ledger_lock(void)
{
    lock_op(L.hold, F_OFD_SETLKW, F_WRLCK, 0);
}

static void ledger_unlock(void)
{
    lock_op(L.hold, F_OFD_SETLK, F_UNLCK, 0);
}

/* 1 when some process (this one included) read-locks slot i. */
static int slot_held(uint32_t i)
{
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET,
                       .l_start = HOLD_BASE + (off_t)i, .l_len = 1};

    if (fcntl(L.probe, F_OFD_GETLK, &fl) < 0)
        return 1; /* cannot tell: keep it */
    return fl.l_type != F_UNLCK;
}

static int open_descriptions(const char *path, int from_fd)
{
    char self[64];

    if (path[0] == '\0') {
        /* A private memfd: a new description through /proc. */
        snprintf(self, sizeof(self), "/proc/self/fd/%d", from_fd);
        path = self;
    }
    L.hold = open(path, O_RDWR | O_CLOEXEC);
    L.probe = L.hold < 0 ? -1 : open(path, O_RDWR | O_CLOEXEC);
    return L.hold >= 0 && L.probe >= 0 ? 0 : -1;
}

static void after_fork_child(void)
{
    L.forked = true; /* no system calls here: the next call reopens */
}

/* Called with L.mu held: the first call in a fork child. */
static void reopen_after_fork(void)
{
    int old_hold = L.hold, old_probe = L.probe;

    L.forked = false;
    if (!L.on)
        return;
    if (open_descriptions(L.shared ? L.path : "", old_hold) != 0) {
        L.on = false;
    } else {
        memset(L.refs, 0, DEVMEM_SLOTS * sizeof(L.refs[0]));
    }
    /* Closing these drops none of the parent's locks (OFD locks belong to
     * the description, which the parent still has open). */
    close(old_hold);
    close(old_probe);
}

static void default_path(const char *prefix, char *buf, size_t len)
{
    const char *dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    char lower[32];
    size_t i;

    for (i = 0; prefix[i] != '\0' && i + 1 < sizeof(lower); i++)
        lower[i] = (char)(prefix[i] >= 'A' && prefix[i] <= 'Z' ? prefix[i] + 32 : prefix[i]);
    lower[i] = '\0';
    snprintf(buf, len, "%s/%s-ledger-%u-%d", dir, lower, (unsigned)getuid(), (int)getsid(0));
}

static void setup(void)
{
    const size_t file_size = HDR_SIZE + DEVMEM_SLOTS * sizeof(struct ledger_slot);
    char name[64];
    const char *v;
    struct stat st;
    void *map;
    int fd = -1;

    snprintf(name, sizeof(name), "%s_TOTAL_MEM", setup_prefix);
    v = getenv(name);
    L.total = setup_default;
    if (v != NULL && *v != '\0') {
        uint64_t t = devmem_parse_size(v);

        if (t == 0)
            fprintf(stderr, "[%s %d] ignoring %s=%s (want bytes, or a K/M/G/T suffix)\n",
                    setup_prefix, (int)getpid(), name, v);
        else
            L.total = t;
    }
    snprintf(name, sizeof(name), "%s_LEDGER", setup_prefix);
    v = getenv(name);
    if (v != NULL && *v != '\0')
        snprintf(L.path, sizeof(L.path), "%s", v);
    else if (L.total != setup_default)
        default_path(setup_prefix, L.path, sizeof(L.path));
    L.shared = L.path[0] != '\0';
    L.refs = calloc(DEVMEM_SLOTS, sizeof(L.refs[0]));
    if (L.refs == NULL)
        return;
    if (L.shared) {
        fd = open(L.path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    } else {
        snprintf(name, sizeof(name), "%s-ledger", setup_prefix);
        fd = memfd_create(name, MFD_CLOEXEC);
    }
    if (fd < 0 || open_descriptions(L.path, fd) != 0)
        goto fail;
    ledger_lock();
    if (fstat(L.hold, &st) != 0 ||
        ((size_t)st.st_size < file_size && ftruncate(L.hold, (off_t)file_size) != 0)) {
        ledger_unlock();
        goto fail;
    }
    map = mmap(NULL, file_size, PROT_READ | PROT_WRITE, MAP_SHARED, L.hold, 0);
    if (map == MAP_FAILED) {
        ledger_unlock();
        goto fail;
    }
    L.hdr = map;
    L.slots = (struct ledger_slot *)((char *)map + HDR_SIZE);
    if (L.hdr->magic != LEDGER_MAGIC) {
        uint64_t id = 0;

        if (getrandom(&id, sizeof(id), 0) != (ssize_t)sizeof(id))
            id = (uint64_t)time(NULL) * 2654435761u ^ (uint64_t)getpid();
        memset(map, 0, file_size);
        L.hdr->id = id | 1;
        L.hdr->nslots = DEVMEM_SLOTS;
        L.hdr->magic = LEDGER_MAGIC;
    }
    ledger_unlock();
    close(fd);
    L.on = L.hdr->nslots == DEVMEM_SLOTS;
    pthread_atfork(NULL, NULL, after_fork_child);
    return;
fail:
    fprintf(stderr, "[%s %d] device memory ledger %s unavailable: %m; memory not accounted\n",
            setup_prefix, (int)getpid(), L.shared ? L.path : "(private)");
    if (fd >= 0)
        close(fd);
    if (L.hold >= 0)
        close(L.hold);
    if (L.probe >= 0)
        close(L.probe);
    L.hold = L.probe = -1;
}

void devmem_setup(const char *prefix, uint64_t default_total)
{
    if (setup_prefix == NULL) {
        setup_prefix = prefix;
        setup_default = default_total;
    }
    pthread_once(&setup_once, setup);
}

/* Both locks held. Frees every slot that no process holds any more. */
static void reclaim(void)
{
    for (uint32_t i = 0; i < DEVMEM_SLOTS; i++)
        if (L.slots[i].gen != 0 && L.refs[i] == 0 && !slot_held(i))
            L.slots[i].gen = 0;
}

static uint64_t used_on(int dev)
{
    uint64_t used = 0;

    for (uint32_t i = 0; i < DEVMEM_SLOTS; i++)
        if (L.slots[i].gen != 0 && L.slots[i].dev == dev)
            used += L.slots[i].size;
    return used;
}

static uint32_t free_slot(void)
{
    for (uint32_t n = 0; n < DEVMEM_SLOTS; n++) {
        uint32_t i = (L.hdr->cursor + n) % DEVMEM_SLOTS;

        if (L.slots[i].gen == 0) {
            L.hdr->cursor = (i + 1) % DEVMEM_SLOTS;
            return i;
        }
    }
    return DEVMEM_NONE;
}

/* Both locks held: a new slot held by this process. */
static void take_new(int dev, uint64_t size, uint32_t flags, struct devmem_ref *ref)
{
    uint32_t i = free_slot();

    if (i == DEVMEM_NONE) {
        reclaim();
        i = free_slot();
    }
    if (i == DEVMEM_NONE || lock_op(L.hold, F_OFD_SETLK, F_RDLCK, HOLD_BASE + (off_t)i) != 0)
        return; /* untracked rather than failed */
    L.slots[i] = (struct ledger_slot){.gen = ++L.hdr->next_gen, .size = size, .dev = dev,
                                      .flags = flags, .pid = (int32_t)getpid()};
    L.refs[i] = 1;
    ref->slot = i;
    ref->gen = L.slots[i].gen;
}

/* Takes L.mu and, when a ledger is open, the ledger's lock. */
static bool enter(void)
{
    pthread_mutex_lock(&L.mu);
    if (L.forked)
        reopen_after_fork();
    if (!L.on) {
        pthread_mutex_unlock(&L.mu);
        return false;
    }
    ledger_lock();
    return true;
}

static void leave(void)
{
    ledger_unlock();
    pthread_mutex_unlock(&L.mu);
}

int devmem_alloc(int dev, uint64_t size, struct devmem_ref *ref)
{
    int rc = 0;

    ref->slot = DEVMEM_NONE;
    ref->gen = 0;
    if (!enter())
        return 0;
    if (size > L.total || used_on(dev) > L.total - size) {
        reclaim();
        if (size > L.total || used_on(dev) > L.total - size)
            rc = -1;
    }
    if (rc == 0)
        take_new(dev, size, 0, ref);
    leave();
    return rc;
}

void devmem_acquire(const char *tag, int dev, uint64_t size, struct devmem_ref *ref)
{
    unsigned long long id = 0, gen = 0;
    unsigned slot = DEVMEM_NONE;

    ref->slot = DEVMEM_NONE;
    ref->gen = 0;
    if (!enter())
        return;
    if (tag != NULL && sscanf(tag, "L%16llx.%u.%llu", &id, &slot, &gen) == 3 &&
        id == L.hdr->id && slot < DEVMEM_SLOTS && gen != 0 && L.slots[slot].gen == gen) {
        if (L.refs[slot] == 0 &&
            lock_op(L.hold, F_OFD_SETLK, F_RDLCK, HOLD_BASE + (off_t)slot) != 0) {
            leave();
            return;
        }
        L.refs[slot]++;
        ref->slot = slot;
        ref->gen = gen;
    } else {
        take_new(dev, size, SLOT_IMPORT, ref);
    }
    leave();
}

void devmem_release(struct devmem_ref *ref, int owner)
{
    uint32_t i = ref->slot;

    if (i == DEVMEM_NONE || i >= DEVMEM_SLOTS)
        return;
    ref->slot = DEVMEM_NONE;
    if (!enter())
        return;
    /* After a fork the child holds nothing: its releases are no-ops. */
    if (L.refs[i] == 0 || L.slots[i].gen != ref->gen) {
        leave();
        return;
    }
    if (owner)
        L.slots[i].flags |= SLOT_FREED;
    if (--L.refs[i] == 0) {
        lock_op(L.hold, F_OFD_SETLK, F_UNLCK, HOLD_BASE + (off_t)i);
        if (!slot_held(i))
            L.slots[i].gen = 0;
    }
    leave();
}

void devmem_tag(const struct devmem_ref *ref, char *buf, size_t len)
{
    if (len == 0)
        return;
    buf[0] = '\0';
    if (ref->slot == DEVMEM_NONE || !L.on)
        return;
    snprintf(buf, len, "L%016llx.%u.%llu", (unsigned long long)L.hdr->id, ref->slot,
             (unsigned long long)ref->gen);
}

void devmem_stats(int dev, struct devmem_stats *st)
{
    memset(st, 0, sizeof(*st));
    st->total = L.total;
    if (!enter())
        return;
    reclaim();
    st->shared = L.shared;
    for (uint32_t i = 0; i < DEVMEM_SLOTS; i++) {
        const struct ledger_slot *s = &L.slots[i];

        if (s->gen == 0 || s->dev != dev)
            continue;
        st->used += s->size;
        st->allocs++;
        if (s->flags & SLOT_FREED)
            st->freed_held += s->size;
    }
    leave();
}
