/* SPDX-License-Identifier: MIT */
/*
 * test_manifest.c - the VMM manifest reader (handles/manifest.c): what an
 * exporter writes is read back whole, 1 to 80,000 chunks; anything a
 * hostile or broken exporter could write instead is refused with the
 * exact reason, and nothing is read that the file does not hold.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "handles/manifest.h"
#include "handles/wire.h"

/* A valid manifest of n chunks of 2 MiB, back to back. */
static byval_manifest_t *make(uint32_t n)
{
    byval_manifest_t *m = calloc(1, BYVAL_MANIFEST_LEN(n));
    assert_non_null(m);
    m->magic = BYVAL_MANIFEST_MAGIC;
    m->version = BYVAL_MANIFEST_VERSION;
    m->nchunks = n;
    m->reserve_size = (uint64_t)n << 21;
    for (uint32_t i = 0; i < n; i++)
        m->chunks[i] = (byval_manifest_chunk_t){(uint64_t)i << 21, 1u << 21, 500 + i, 100 + i, 7 * i, 0};
    m->pool_id = 77;
    return m;
}

/* The record's size as it travels: the length rounded up to pages. */
static uint64_t rec_size_of(size_t len)
{
    return (len + BYVAL_WIRE_PAGE - 1) / BYVAL_WIRE_PAGE * BYVAL_WIRE_PAGE;
}

static int memfd_of(const void *buf, size_t len)
{
    int fd = memfd_create("ipcbyval-manifest", MFD_CLOEXEC);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, buf, len), (ssize_t)len);
    return fd;
}

/* Read len bytes of m through a memfd; expect refusal with why in msg. */
static void refused(const void *m, size_t len, uint64_t rec_size, const char *why)
{
    char msg[256] = "";
    int fd = memfd_of(m, len);
    byval_manifest_t *got = byval_manifest_read(fd, rec_size, 4242, msg, sizeof(msg));
    close(fd);
    if (got || !strstr(msg, why))
        print_message("expected refusal with '%s', got %s: %s\n", why, got ? "a manifest" : "NULL",
                      msg);
    assert_null(got);
    assert_non_null(strstr(msg, why));
    assert_non_null(strstr(msg, "pid 4242"));
}

/* Past the 1024 chunks of the first manifest version: a pool of 2 MiB
 * chunks as large as a 157 GiB reservation. */
static void test_roundtrip_1_to_80000(void **state)
{
    static const uint32_t ns[] = {1, 2, 3, 169, 170, 1023, 1024, 1025, 4096, 80384};
    for (size_t k = 0; k < sizeof(ns) / sizeof(ns[0]); k++) {
        byval_manifest_t *m = make(ns[k]);
        size_t len = BYVAL_MANIFEST_LEN(ns[k]);
        char msg[256] = "";
        int fd = memfd_of(m, len);
        assert_int_equal(lseek(fd, 5, SEEK_SET), 5); /* the shared offset: never used */
        byval_manifest_t *got = byval_manifest_read(fd, rec_size_of(len), 1, msg, sizeof(msg));
        if (!got)
            print_message("%u chunks: %s\n", ns[k], msg);
        assert_non_null(got);
        assert_memory_equal(got, m, len);
        assert_int_equal(lseek(fd, 0, SEEK_CUR), 5);
        close(fd);
        free(got);
        free(m);
    }
}

/* A header that claims more chunks than the file holds. */
static void test_short_file(void **state)
{
    byval_manifest_t *m = make(150);
    refused(m, BYVAL_MANIFEST_LEN(1), 8192,
            "is 72 bytes long, but its header lists 150 chunks (6032 bytes)");
    refused(m, 10, 4096, "shorter than its 32-byte header");
    refused(m, 0, 4096, "shorter than its 32-byte header");
    /* One byte short of the last chunk. */
    refused(m, BYVAL_MANIFEST_LEN(150) - 1, 8192, "is 6031 bytes long");
    free(m);
}

static void test_long_file(void **state)
{
    byval_manifest_t *m = make(2);
    size_t len = BYVAL_MANIFEST_LEN(2);
    uint8_t *big = calloc(1, 4097);
    memcpy(big, m, len);
    refused(big, len + 1, 4096, "but its header lists 2 chunks (112 bytes)");
    refused(big, 4097, 4096, "is longer than the 4096 bytes its handle records");
    free(big);
    free(m);
}

static void test_header(void **state)
{
    byval_manifest_t *m = make(1);
    size_t len = BYVAL_MANIFEST_LEN(1);
    m->magic ^= 1;
    refused(m, len, 4096, "not an ipcbyval manifest");
    m->magic ^= 1;
    m->version = 2; /* the layout before chunk tags */
    refused(m, len, 4096, "not an ipcbyval manifest of version 3");
    m->version = BYVAL_MANIFEST_VERSION;
    m->nchunks = 0;
    refused(m, len, 4096, "lists 0 chunks (1 to 1048576 allowed)");
    m->nchunks = BYVAL_MANIFEST_MAX_CHUNKS + 1;
    refused(m, len, 4096, "lists 1048577 chunks");
    m->nchunks = UINT32_MAX;
    refused(m, len, 4096, "lists 4294967295 chunks");
    free(m);
}

/* The record's size must cover the manifest, in pages, no more. */
static void test_record_size(void **state)
{
    byval_manifest_t *m = make(1024);
    size_t len = BYVAL_MANIFEST_LEN(1024); /* 40992 bytes: 11 pages */
    refused(m, len, 4096, "is longer than the 4096 bytes its handle records");
    refused(m, len, 40960, "is longer than the 40960 bytes its handle records");
    refused(m, len, 49152, "the handle records 49152 bytes (12 pages, not 11)");
    uint64_t past = (BYVAL_MANIFEST_MAX_LEN / BYVAL_WIRE_PAGE + 2) * BYVAL_WIRE_PAGE;
    char why[64];
    snprintf(why, sizeof(why), "records a manifest of %llu bytes", (unsigned long long)past);
    refused(m, len, past, why);
    refused(m, len, 0, "records a manifest of 0 bytes");
    free(m);
    m = make(1);
    refused(m, BYVAL_MANIFEST_LEN(1), 8192, "the handle records 8192 bytes (2 pages, not 1)");
    free(m);
}

static void test_chunks(void **state)
{
    byval_manifest_t *m = make(3);
    size_t len = BYVAL_MANIFEST_LEN(3);
    m->chunks[1].size = 0;
    refused(m, len, 4096, "chunk 1 (offset 2097152, size 0, fd 101) is empty");
    m->chunks[1].size = 1u << 21;
    m->chunks[2].offset = m->reserve_size;
    refused(m, len, 4096, "chunk 2 (offset 6291456, size 2097152, fd 102) lies outside");
    m->chunks[2].offset = UINT64_MAX;
    refused(m, len, 4096, "lies outside the reservation");
    m->chunks[2].offset = 2u << 21;
    m->chunks[2].size = UINT64_MAX; /* offset + size would wrap */
    refused(m, len, 4096, "lies outside the reservation");
    m->chunks[2].size = 1u << 21;
    m->chunks[1].offset = 1u << 20; /* into chunk 0 */
    refused(m, len, 4096, "chunk 1 (offset 1048576, size 2097152, fd 101) does not follow");
    m->chunks[1].offset = 3u << 20; /* a hole: a handle's chunks are one run */
    m->chunks[1].size = 1u << 20;
    refused(m, len, 4096, "chunk 1 (offset 3145728, size 1048576, fd 101) does not follow");
    m->chunks[1].offset = 1u << 21;
    m->chunks[1].size = 1u << 21;
    m->chunks[0].fd = 0x80000000u;
    refused(m, len, 4096, "names an fd number no process can have");
    m->chunks[0].fd = 100;
    m->chunks[2].id = 0;
    refused(m, len, 4096, "chunk 2 (offset 4194304, size 2097152, fd 102) has an id no export");
    m->chunks[2].id = BYVAL_WIRE_MAX_ALLOC_ID + 1;
    refused(m, len, 4096, "has an id no export can have");
    m->chunks[2].id = 502;
    m->chunks[1].tag = BYVAL_WIRE_MAX_TAG + 1;
    refused(m, len, 4096, "chunk 1 (offset 2097152, size 2097152, fd 101) carries a tag no export");
    m->chunks[1].tag = BYVAL_WIRE_MAX_TAG;
    char msg[256] = "";
    byval_manifest_t *ok = byval_manifest_parse(m, len, 4096, 9, msg, sizeof(msg));
    assert_non_null(ok);
    assert_true(ok->chunks[1].tag == BYVAL_WIRE_MAX_TAG);
    free(ok);
    free(m);
}

/* A file that cannot be read: the exact syscall and errno. */
static void test_pread_error(void **state)
{
    char msg[256] = "";
    assert_null(byval_manifest_read(-1, 4096, 9, msg, sizeof(msg)));
    assert_non_null(strstr(msg, "pread(manifest fd -1 of pid 9) failed: Bad file descriptor"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_1_to_80000),
        cmocka_unit_test(test_short_file),
        cmocka_unit_test(test_long_file),
        cmocka_unit_test(test_header),
        cmocka_unit_test(test_record_size),
        cmocka_unit_test(test_chunks),
        cmocka_unit_test(test_pread_error),
    };
    return cmocka_run_group_tests_name("manifest", tests, NULL, NULL);
}
