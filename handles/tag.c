/* SPDX-License-Identifier: MIT */
/* tag.c - the exporter's tags (tag.h): SipHash-2-4 and the per-process
 * key. */
#include "handles/tag.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/random.h>
#include <unistd.h>

#include "cache/locks.h"

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

#define SIPROUND                                                  \
    do {                                                          \
        v0 += v1, v1 = ROTL(v1, 13), v1 ^= v0, v0 = ROTL(v0, 32); \
        v2 += v3, v3 = ROTL(v3, 16), v3 ^= v2;                    \
        v0 += v3, v3 = ROTL(v3, 21), v3 ^= v0;                    \
        v2 += v1, v1 = ROTL(v1, 17), v1 ^= v2, v2 = ROTL(v2, 32); \
    } while (0)

uint64_t byval_siphash24(const uint8_t k[16], const void *in, size_t len)
{
    const uint8_t *m = in;
    uint64_t k0 = le64(k), k1 = le64(k + 8);
    uint64_t v0 = k0 ^ 0x736f6d6570736575ULL, v1 = k1 ^ 0x646f72616e646f6dULL;
    uint64_t v2 = k0 ^ 0x6c7967656e657261ULL, v3 = k1 ^ 0x7465646279746573ULL;
    size_t full = len - len % 8;
    for (size_t i = 0; i < full; i += 8) {
        uint64_t w = le64(m + i);
        v3 ^= w;
        SIPROUND;
        SIPROUND;
        v0 ^= w;
    }
    uint64_t b = (uint64_t)len << 56;
    for (size_t i = 0; i < len % 8; i++)
        b |= (uint64_t)m[full + i] << (8 * i);
    v3 ^= b;
    SIPROUND;
    SIPROUND;
    v0 ^= b;
    v2 ^= 0xff;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

/* 0: no key, 1: being made, 2: ready. */
static struct {
    int state;
    uint8_t key[16];
} tk;

static void fork_child(void)
{
    __atomic_store_n(&tk.state, 0, __ATOMIC_RELAXED); /* the child's exports: its own key */
}
BYVAL_FORK_CHILD(tag_key, fork_child);

/* getrandom, else /dev/urandom (the pool not initialised yet). */
static int fill_random(uint8_t *p, size_t n)
{
    int fd = -1, rc = 0;
    for (size_t got = 0; got < n && rc == 0;) {
        ssize_t r =
            fd < 0 ? getrandom(p + got, n - got, GRND_NONBLOCK) : read(fd, p + got, n - got);
        if (r > 0)
            got += (size_t)r;
        else if (!(r < 0 && errno == EINTR) &&
                 (fd >= 0 || (fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC)) < 0))
            rc = -1;
    }
    if (fd >= 0)
        close(fd);
    return rc;
}

static const uint8_t *key(void)
{
    for (;;) {
        int s = __atomic_load_n(&tk.state, __ATOMIC_ACQUIRE);
        if (s == 2)
            return tk.key;
        if (s == 0 &&
            __atomic_compare_exchange_n(&tk.state, &s, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
            errno = 0;
            int rc = fill_random(tk.key, sizeof(tk.key)); /* read by nobody until state 2 */
            if (rc != 0 && !errno)
                errno = EIO;
            __atomic_store_n(&tk.state, rc == 0 ? 2 : 0, __ATOMIC_RELEASE);
            return rc == 0 ? tk.key : NULL;
        }
        if (s == 1)
            sched_yield(); /* another thread is making it */
    }
}

static uint64_t tag_of(const uint8_t *k, uint32_t fd, uint32_t ino)
{
    uint8_t m[8];
    for (int i = 0; i < 4; i++) {
        m[i] = (uint8_t)(fd >> (8 * i));
        m[4 + i] = (uint8_t)(ino >> (8 * i));
    }
    uint64_t t = byval_siphash24(k, m, sizeof(m)) & ((UINT64_C(1) << 40) - 1);
    return t ? t : 1; /* 0 stays "no tag" */
}

int byval_tag_make(uint32_t fd, uint32_t ino, uint64_t *tag_p)
{
    const uint8_t *k = key();
    if (!k)
        return -1;
    *tag_p = tag_of(k, fd, ino);
    return 0;
}

int byval_tag_check(uint32_t fd, uint32_t ino, uint64_t tag)
{
    if (__atomic_load_n(&tk.state, __ATOMIC_ACQUIRE) != 2)
        return 0; /* no key: we never made a tag */
    return tag_of(tk.key, fd, ino) == tag;
}

int byval_record_tag(byval_record_t *rec)
{
    rec->tag = 0;
    return byval_tag_make(rec->fd, rec->fd_ino, &rec->tag);
}
