/* SPDX-License-Identifier: MIT */
/*
 * test_stats.c - cache/stats.c: what a cache's memory
 * statistic says (per entry when full, against a cache really filled), and
 * the per-process file that ipcbyval-run merges into a job's table (every
 * counter and cache field by name, values as counted, written whole).
 */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "cache/lru.h"
#include "cache/stats.h"

/* Fill a cache of cap entries of key_len bytes; compare the statistic
 * with what the full cache costs by byval_lru_stats (allocated memory
 * over the entries held, which is exact once full). */
static void check_full(size_t cap, size_t key_len)
{
    byval_lru_t *lru = byval_lru_create(cap, key_len, NULL, NULL);
    assert_non_null(lru);
    size_t now, full, now_full, full_full;
    byval_lru_memory(lru, &now, &full);
    assert_true(now > 0);
    unsigned char key[128] = {0};
    for (size_t i = 0; i < cap; i++) {
        memcpy(key, &i, sizeof(i));
        assert_int_equal(byval_lru_insert(lru, key, (void *)(i + 1), 0, NULL), BYVAL_LRU_OK);
    }
    byval_lru_stats_t st;
    byval_lru_stats(lru, &st);
    assert_int_equal(st.size, cap);
    byval_lru_memory(lru, &now_full, &full_full);
    printf("cap %zu key %zu: %zu bytes/entry predicted when empty, %zu when full, "
           "lru says %zu; memory %zu -> %zu\n",
           cap, key_len, full, full_full, st.bytes_per_entry, now, now_full);
    /* byval_lru_stats rounds up, ours to the nearest. */
    assert_true(full + 1 >= st.bytes_per_entry && full <= st.bytes_per_entry);
    assert_int_equal(full, full_full);
    assert_true(now_full <= st.bytes_per_entry * cap && now_full > (st.bytes_per_entry - 1) * cap);
    byval_lru_destroy(lru);
}

static void test_bytes_per_entry_when_full(void **state)
{
    (void)state;
    check_full(16, 8);
    check_full(1000, 48);
    check_full(1024, 48); /* the Level Zero import cache's default */
    check_full(5000, 80);
    check_full(100000, 48); /* README: 83 bytes an entry */
}

static void test_memory_of_few_entries(void **state)
{
    (void)state;
    /* 4 entries in a 1024-entry cache: the memory is what is allocated,
     * the per-entry cost still the full cache's, not chunks over 4. */
    byval_lru_t *lru = byval_lru_create(1024, 48, NULL, NULL);
    unsigned char key[48] = {0};
    for (int i = 0; i < 4; i++) {
        key[0] = (unsigned char)i;
        assert_int_equal(byval_lru_insert(lru, key, (void *)1, 0, NULL), BYVAL_LRU_OK);
    }
    size_t now, full;
    byval_lru_memory(lru, &now, &full);
    assert_true(full >= 72 + 8 && full <= 72 + 18);
    /* a table of 2048 buckets (1024 at load <= 7/8) and one chunk of 16 slots */
    assert_true(now >= 2048 * 8 && now < 2048 * 8 + 16 * 72 + 4096);
    byval_lru_destroy(lru);
}

/* The file: every BYVAL_STATS_LIST name once with its value, the caches'
 * fields under their names, attributes, and nothing left half-written. */
static void test_file(void **state)
{
    (void)state;
    char dir[] = "/tmp/ipcbyval-test-stats-XXXXXX";
    assert_non_null(mkdtemp(dir));
    byval_lru_t *lru = byval_lru_create(64, 16, NULL, NULL);
    byval_stats_register_cache("unit test", lru);
    BYVAL_STAT_ADD(opens, 41);
    BYVAL_STAT_INC(opens);
    BYVAL_STAT_INC(open_errors);
    setenv("PMI_RANK", "7", 1);
    assert_int_equal(byval_stats_write_file(dir), 0);

    char path[512], line[512];
    char host[256] = "localhost";
    gethostname(host, sizeof(host) - 1);
    host[strcspn(host, ".")] = '\0';
    snprintf(path, sizeof(path), "%s/%s.%d.stats", dir, host, (int)getpid());
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    int fields = 0, rank = 0, opens = 0, errors = 0, cache = 0;
    while (fgets(line, sizeof(line), f)) {
        if (line[0] == '#')
            continue;
        if (strcmp(line, "@rank\t7\n") == 0)
            rank = 1;
        if (line[0] == '@')
            continue;
        char name[128], total[16];
        unsigned long long v;
        assert_int_equal(sscanf(line, "%127[^\t]\t%llu\t%15[^\t]\t", name, &v, total), 3);
        assert_true(strcmp(total, "sum") == 0 || strcmp(total, "max") == 0);
        fields++;
        opens += strcmp(name, "opens") == 0 && v == 42;
        errors += strcmp(name, "open_errors") == 0 && v == 1;
        cache += strcmp(name, "unit_test.capacity") == 0 && v == 64;
    }
    fclose(f);
    int listed = 0;
#define COUNT_(name, doc) listed++;
    BYVAL_STATS_LIST(COUNT_)
#undef COUNT_
    assert_true(rank && opens == 1 && errors == 1 && cache == 1);
    assert_true(fields >= listed + 9);

    /* Only the finished file is left (the temporary one was renamed). */
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.' || strstr(e->d_name, ".tmp"))
            n++, assert_non_null(strstr(e->d_name, ".stats"));
    closedir(d);
    assert_int_equal(n, 1);
    unlink(path);
    rmdir(dir);
    /* A folder that cannot be made is an error, not a crash. */
    assert_int_equal(byval_stats_write_file("/proc/no/such/dir"), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bytes_per_entry_when_full),
        cmocka_unit_test(test_memory_of_few_entries),
        cmocka_unit_test(test_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
