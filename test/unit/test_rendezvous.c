/* SPDX-License-Identifier: MIT */
/*
 * test_rendezvous.c - the rendezvous directory (handles/rendezvous*.c) in
 * one process: which directories are refused and why, the socket name,
 * what the importer's connect refuses before connecting (nothing there, a
 * symlink, a file that is not a socket, another uid's socket, a stale
 * one), the exporter's listen (atomic rename over a planted name, the
 * sweep of stale sockets, removal at exit) and the end to end fetch
 * through the directory when the abstract name does not answer.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "handles/broker_internal.h"
#include "handles/rendezvous.h"
#include "test/unit/test_skip.h"

static char top[64];
static int ndir;

/* A fresh directory of mode, and its path in buf. */
static const char *mkdir_mode(char *buf, size_t len, mode_t mode)
{
    snprintf(buf, len, "%s/d%d", top, ndir++);
    assert_int_equal(mkdir(buf, 0700), 0);
    assert_int_equal(chmod(buf, mode), 0);
    return buf;
}

/* Forget the directory (each test sets up its own). */
static void forget(void)
{
    byval_rendezvous_setup(NULL, BYVAL_RENDEZVOUS_NO_GID, NULL, 0);
}

static int setup_dir(const char *dir, long gid, char *msg, size_t len)
{
    forget();
    return byval_rendezvous_setup(dir, gid, msg, len);
}

static void test_dir_checks(void **state)
{
    (void)state;
    char d[128], link[160], msg[512];
    assert_int_equal(setup_dir(NULL, BYVAL_RENDEZVOUS_NO_GID, msg, sizeof(msg)), 0);
    assert_false(byval_rendezvous_enabled()); /* unset: nothing changes */
    assert_int_equal(setup_dir("relative/dir", BYVAL_RENDEZVOUS_NO_GID, msg, sizeof(msg)), -1);
    assert_non_null(strstr(msg, "absolute path"));
    mkdir_mode(d, sizeof(d), 01777);
    assert_int_equal(setup_dir(d, BYVAL_RENDEZVOUS_NO_GID, msg, sizeof(msg)), -1);
    assert_non_null(strstr(msg, "world-writable (mode 1777)"));
    assert_false(byval_rendezvous_enabled());
    mkdir_mode(d, sizeof(d), 0770);
    assert_int_equal(setup_dir(d, BYVAL_RENDEZVOUS_NO_GID, msg, sizeof(msg)), -1);
    assert_non_null(strstr(msg, "writable by group"));
    struct stat st;
    assert_int_equal(stat(d, &st), 0);
    assert_int_equal(setup_dir(d, (long)st.st_gid, msg, sizeof(msg)), 0); /* the group opted in */
    assert_true(byval_rendezvous_enabled());
    snprintf(link, sizeof(link), "%s.link", d);
    assert_int_equal(symlink(d, link), 0);
    assert_int_equal(setup_dir(link, BYVAL_RENDEZVOUS_NO_GID, msg, sizeof(msg)), -1);
    assert_non_null(strstr(msg, "symlink"));
    snprintf(link, sizeof(link), "%s/missing", top);
    assert_int_equal(setup_dir(link, BYVAL_RENDEZVOUS_NO_GID, msg, sizeof(msg)), -1);
    mkdir_mode(d, sizeof(d), 0700);
    assert_int_equal(setup_dir(d, BYVAL_RENDEZVOUS_NO_GID, msg, sizeof(msg)), 0);
    assert_string_equal(byval_rendezvous_dir(), d);
    char name[64];
    byval_rendezvous_name(name, sizeof(name), 0xa70f5465u, 0x6262u);
    assert_string_equal(name, "ipcbyval-a70f5465-0000000000006262.sock");
    forget();
}

/* A record of an exporter with identity id (pidfs). */
static byval_record_t rec_id(uint64_t id)
{
    byval_self_t self;
    assert_int_equal(byval_self_get(&self), 0);
    byval_record_t rec = {.pid = 4242, .pidns = 1, .boot = self.boot, .identity = id,
                          .flags = BYVAL_FLAG_ID_PIDFS};
    return rec;
}

static byval_status_t dial(const byval_record_t *rec, char *msg, size_t len)
{
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    byval_status_t st = byval_rendezvous_connect(s, rec, byval_broker_now_ms() + 2000, msg, len);
    close(s);
    return st;
}

/* A socket bound at dir/name (listening or not: closed, it is stale). */
static int bind_at(const char *dir, const char *name, int keep)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof(a.sun_path), "%s/%s", dir, name);
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_int_equal(bind(s, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(s, 4), 0);
    if (!keep) {
        close(s);
        return -1;
    }
    return s;
}

static void test_connect_refusals(void **state)
{
    (void)state;
    char d[128], msg[512], name[64], path[256];
    mkdir_mode(d, sizeof(d), 0700);
    assert_int_equal(setup_dir(d, BYVAL_RENDEZVOUS_NO_GID, msg, sizeof(msg)), 0);
    byval_record_t rec = rec_id(0x1234);
    byval_rendezvous_name(name, sizeof(name), rec.boot, rec.identity);
    snprintf(path, sizeof(path), "%s/%s", d, name);
    assert_int_equal(dial(&rec, msg, sizeof(msg)), BYVAL_E_GONE);
    assert_non_null(strstr(msg, "has no socket in the rendezvous directory"));
    /* Not a socket: a regular file, then a symlink to a live socket. */
    int f = open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
    close(f);
    assert_int_equal(dial(&rec, msg, sizeof(msg)), BYVAL_E_IDENTITY);
    assert_non_null(strstr(msg, "not a socket"));
    unlink(path);
    int live = bind_at(d, "elsewhere.sock", 1);
    char target[256];
    snprintf(target, sizeof(target), "%s/elsewhere.sock", d);
    assert_int_equal(symlink(target, path), 0);
    assert_int_equal(dial(&rec, msg, sizeof(msg)), BYVAL_E_IDENTITY);
    unlink(path);
    /* Stale: bound, nobody listens any more. */
    bind_at(d, name, 0);
    assert_int_equal(dial(&rec, msg, sizeof(msg)), BYVAL_E_GONE);
    assert_non_null(strstr(msg, "is stale"));
    /* Another uid's socket (root can make one). */
    if (geteuid() == 0) {
        assert_int_equal(lchown(path, 65534, (gid_t)-1), 0);
        assert_int_equal(dial(&rec, msg, sizeof(msg)), BYVAL_E_IDENTITY);
        assert_non_null(strstr(msg, "planted by someone else"));
    }
    unlink(path);
    /* A record without a pidfs identity is never looked for. */
    rec.flags = 0;
    assert_int_equal(dial(&rec, msg, sizeof(msg)), BYVAL_E_IDENTITY);
    assert_non_null(strstr(msg, "pidfs"));
    close(live);
    forget();
}

static void test_listen_sweep_exit(void **state)
{
    (void)state;
    char d[128], msg[512], name[64], stale_name[64], live_name[64], path[256];
    byval_self_t self;
    struct stat st;
    assert_int_equal(byval_self_get(&self), 0);
    BYVAL_NEED(self.id_flags & BYVAL_FLAG_ID_PIDFS ? NULL : "no pidfs (Linux before 6.9)");
    mkdir_mode(d, sizeof(d), 0700);
    assert_int_equal(setup_dir(d, BYVAL_RENDEZVOUS_NO_GID, msg, sizeof(msg)), 0);
    byval_rendezvous_name(name, sizeof(name), self.boot, self.identity);
    byval_rendezvous_name(stale_name, sizeof(stale_name), self.boot, self.identity + 1);
    byval_rendezvous_name(live_name, sizeof(live_name), self.boot, self.identity + 2);
    /* Planted under our name (a regular file), a stale socket and a live
     * one of other exporters. */
    snprintf(path, sizeof(path), "%s/%s", d, name);
    close(open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0600));
    bind_at(d, stale_name, 0);
    int live = bind_at(d, live_name, 1);
    int s = byval_rendezvous_listen(&self, msg, sizeof(msg));
    assert_true(s >= 0);
    assert_int_equal(lstat(path, &st), 0);
    assert_true(S_ISSOCK(st.st_mode)); /* renamed over what was planted */
    assert_int_equal(st.st_mode & 0777, 0600);
    snprintf(path, sizeof(path), "%s/%s", d, stale_name);
    assert_int_equal(lstat(path, &st), -1); /* swept */
    snprintf(path, sizeof(path), "%s/%s", d, live_name);
    assert_int_equal(lstat(path, &st), 0); /* alive: kept */
    /* An importer reaches it through the directory; the listener is us. */
    byval_record_t rec;
    memset(&rec, 0, sizeof(rec));
    byval_record_set_exporter(&rec, &self);
    assert_int_equal(dial(&rec, msg, sizeof(msg)), BYVAL_OK);
    close(s);
    close(live);
    forget();
}

static void test_no_pidfs_exporter(void **state)
{
    (void)state;
    char d[128], msg[512];
    mkdir_mode(d, sizeof(d), 0700);
    assert_int_equal(setup_dir(d, BYVAL_RENDEZVOUS_NO_GID, msg, sizeof(msg)), 0);
    byval_self_t old = {.pid = 1, .boot = 1, .identity = 99, .id_flags = 0};
    assert_int_equal(byval_rendezvous_listen(&old, msg, sizeof(msg)), -1);
    assert_non_null(strstr(msg, "needs pidfs"));
    forget();
}

int main(void)
{
    snprintf(top, sizeof(top), "/tmp/test_rendezvous.XXXXXX");
    if (!mkdtemp(top))
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dir_checks),
        cmocka_unit_test(test_connect_refusals),
        cmocka_unit_test(test_listen_sweep_exit),
        cmocka_unit_test(test_no_pidfs_exporter),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", top);
    if (system(cmd) != 0)
        rc = rc ? rc : 1;
    return rc;
}
