/* SPDX-License-Identifier: MIT */
/*
 * zeapp_data: what the test programs share besides Level Zero (see
 * zeapp.h): the data pattern and its check, option values, the clock, and
 * messages with an fd over a Unix socket.
 */
#include "test/mpi/zeapp.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

uint64_t zeapp_seed(int rank, int alloc, int iter)
{
    return mix64(((uint64_t)(uint32_t)rank << 40) ^ ((uint64_t)(uint32_t)alloc << 20) ^
                 (uint64_t)(uint32_t)iter);
}

static unsigned pattern_byte(uint64_t seed, size_t j)
{
    return (unsigned)(mix64(seed ^ (uint64_t)(j / 8)) >> (8 * (j % 8))) & 0xffu;
}

void zeapp_pattern(void *buf, size_t offset, size_t len, uint64_t seed)
{
    unsigned char *p = buf;
    size_t j = offset, end = offset + len;

    /* Whole words where aligned: 1 MiB buffers are filled every iteration. */
    while (j < end && j % 8 != 0) {
        *p++ = (unsigned char)pattern_byte(seed, j);
        j++;
    }
    for (; j + 8 <= end; j += 8, p += 8) {
        uint64_t w = mix64(seed ^ (uint64_t)(j / 8));

        for (int b = 0; b < 8; b++)
            p[b] = (unsigned char)(w >> (8 * b));
    }
    for (; j < end; j++)
        *p++ = (unsigned char)pattern_byte(seed, j);
}

long zeapp_pattern_check(const void *buf, size_t offset, size_t len, uint64_t seed,
                         unsigned *got_p, unsigned *want_p)
{
    const unsigned char *p = buf;
    uint64_t word = 0, word_index = UINT64_MAX;

    for (size_t i = 0; i < len; i++) {
        size_t j = offset + i;
        unsigned want;

        if (j / 8 != word_index) {
            word_index = j / 8;
            word = mix64(seed ^ word_index);
        }
        want = (unsigned)(word >> (8 * (j % 8))) & 0xffu;
        if (p[i] != want) {
            *got_p = p[i];
            *want_p = want;
            return (long)i;
        }
    }
    return -1;
}

unsigned long zeapp_parse_ulong(const char *opt, const char *val)
{
    unsigned long v;
    char *end;

    if (val == NULL) {
        fprintf(stderr, "option %s needs a value\n", opt);
        exit(2);
    }
    errno = 0;
    v = strtoul(val, &end, 0);
    if (errno != 0 || end == val || *end != '\0' || val[0] == '-') {
        fprintf(stderr, "option %s: bad value '%s'\n", opt, val);
        exit(2);
    }
    return v;
}

double zeapp_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

void zeapp_exit(int code)
{
    exit(code);
}

int zeapp_send_fd(int sock, const void *msg, size_t len, int fd)
{
    char cbuf[CMSG_SPACE(sizeof(int))] = {0};
    struct iovec iov = {.iov_base = (void *)msg, .iov_len = len};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    if (fd >= 0) {
        mh.msg_control = cbuf;
        mh.msg_controllen = sizeof(cbuf);
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &fd, sizeof(int));
    }
    return sendmsg(sock, &mh, MSG_NOSIGNAL) == (ssize_t)len ? 0 : -1;
}

int zeapp_recv_fd(int sock, void *msg, size_t len, int *fd_p)
{
    char cbuf[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {.iov_base = msg, .iov_len = len};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
                        .msg_controllen = sizeof(cbuf)};
    *fd_p = -1;
    if (recvmsg(sock, &mh, MSG_CMSG_CLOEXEC) != (ssize_t)len)
        return -1;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
            memcpy(fd_p, CMSG_DATA(c), sizeof(int));
    return 0;
}
