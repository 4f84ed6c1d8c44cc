/* SPDX-License-Identifier: MIT */
/*
 * test_resolve_more.c - the start-time identity flavour end to end, the
 * /proc/<pid>/stat parser against a hostile comm, a record whose identity
 * cannot be verified, fd exhaustion at each syscall, out-of-range records
 * and arguments, byval_getfd_obj's errors, and byval_self_get racing
 * threads after a reset.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "handles/registry.h"
#include "handles/fdcheck.h"
#include "handles/resolve.h"
#include "handles/sys.h"
#include "handles/transport.h"
#include "test/unit/test_resolve.h"

/* An exporter described by start time resolves, and only while it lives. */
void test_start_time_flavour(void **state)
{
    exporter_t x;
    char msg[512];
    int fd = -1, pidfd = -1;
    NEED_GETFD();
    exporter_start(&x, EXP_PLAIN);
    byval_record_t r = x.rec;
    r.flags = 0;
    assert_int_equal(byval_proc_start_time(x.pid, &r.identity), 0);
    int before = nfds();
    assert_int_equal(byval_resolve_fd(&r, &self, &fd, &pidfd, msg, sizeof(msg)), BYVAL_OK);
    assert_string_equal(msg, "");
    check_mapping(fd);
    close(fd);
    close(pidfd);
    assert_int_equal(nfds(), before);
    r.identity++;
    expect_fail(&r, BYVAL_E_IDENTITY, "start time");
    r.identity--;
    exporter_stop(&x, 1); /* zombie: /proc still shows it, its fds are gone */
    expect_fail(&r, BYVAL_E_GONE, "exited");
    assert_int_equal(waitpid(x.pid, NULL, 0), x.pid);
    expect_fail(&r, BYVAL_E_GONE, "pidfd_open");
}

/* Field 22 of /proc/<pid>/stat, parsed here the plain way. */
static unsigned long long start_time_sscanf(pid_t pid)
{
    char path[64], buf[1024], fmt[128] = "%*c";
    unsigned long long v = 0;
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    assert_non_null(fgets(buf, sizeof(buf), f));
    fclose(f);
    for (int field = 4; field < 22; field++)
        strcat(fmt, " %*s");
    strcat(fmt, " %llu");
    assert_int_equal(sscanf(strrchr(buf, ')') + 2, fmt, &v), 1);
    return v;
}

/* A comm full of ") " and digits must not shift the fields. */
void test_start_time_parser(void **state)
{
    static const char comm[] = "x) 1 2 (y) 3 4";
    int ready[2], go[2];
    char c, got[32] = "";
    assert_int_equal(pipe2(ready, O_CLOEXEC), 0);
    assert_int_equal(pipe2(go, O_CLOEXEC), 0);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        if (prctl(PR_SET_NAME, comm) != 0 || write(ready[1], "r", 1) != 1)
            _exit(1);
        _exit(read(go[0], &c, 1) == 1 ? 0 : 2);
    }
    close(ready[1]);
    close(go[0]);
    assert_int_equal(read(ready[0], &c, 1), 1);
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/comm", (int)child);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    assert_non_null(fgets(got, sizeof(got), f));
    fclose(f);
    assert_int_equal(strncmp(got, comm, strlen(comm)), 0);
    uint64_t mine = 0, theirs = 0;
    assert_int_equal(byval_proc_start_time(getpid(), &mine), 0);
    assert_int_equal(byval_proc_start_time(child, &theirs), 0);
    printf("    start time: us %llu, child %llu\n", (unsigned long long)mine,
           (unsigned long long)theirs);
    assert_int_equal(theirs, start_time_sscanf(child));
    assert_true(theirs >= mine && mine > 0);
    assert_int_equal(write(go[1], "g", 1), 1);
    assert_int_equal(waitpid(child, NULL, 0), child);
    close(go[1]);
    close(ready[0]);
    assert_int_equal(byval_proc_start_time(child, &theirs), ENOENT); /* reaped */
}

/* A pidfs identity on a pidfd that is not on pidfs: no equivalent check
 * exists, so it is refused as unverifiable, never accepted. */
void test_identity_unverifiable(void **state)
{
    char msg[512];
    byval_record_t r = {.kind = BYVAL_KIND_ZE_MEM, .flags = BYVAL_FLAG_ID_PIDFS,
                        .pid = (uint32_t)getpid(), .fd = 3, .identity = self.identity};
    int not_pidfd = memfd_create("byval-not-a-pidfd", MFD_CLOEXEC);
    assert_true(not_pidfd >= 0);
    assert_int_equal(byval_check_identity(&r, not_pidfd, msg, sizeof(msg)), BYVAL_E_IDENTITY);
    printf("    %s\n", msg);
    assert_non_null(strstr(msg, "cannot verify"));
    close(not_pidfd);
    assert_int_equal(byval_check_identity(&r, not_pidfd, msg, sizeof(msg)), BYVAL_E_SYS);
    assert_non_null(strstr(msg, "Bad file descriptor"));
    int pidfd = (int)syscall(SYS_pidfd_open, getpid(), 0);
    if (pidfd >= 0 && (self.id_flags & BYVAL_FLAG_ID_PIDFS)) { /* and the real thing passes */
        assert_int_equal(byval_check_identity(&r, pidfd, msg, sizeof(msg)), BYVAL_OK);
        r.identity++;
        assert_int_equal(byval_check_identity(&r, pidfd, msg, sizeof(msg)), BYVAL_E_IDENTITY);
        /* pidfs seen once, a file elsewhere is still unverifiable (the
         * shortcut for later pidfds must not skip the check for it) */
        r.identity = self.identity;
        not_pidfd = memfd_create("byval-not-a-pidfd", MFD_CLOEXEC);
        assert_int_equal(byval_check_identity(&r, not_pidfd, msg, sizeof(msg)), BYVAL_E_IDENTITY);
        assert_non_null(strstr(msg, "cannot verify"));
        close(not_pidfd);
    }
    if (pidfd >= 0)
        close(pidfd);
}

/* Resolve under RLIMIT_NOFILE = limit; nfds() needs an fd, so count outside. */
static byval_status_t resolve_limited(const byval_record_t *r, rlim_t limit, char *msg, size_t len)
{
    struct rlimit old, lim;
    int fd = 77, pidfd = 77;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
    lim = old;
    lim.rlim_cur = limit;
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &lim), 0);
    byval_status_t st = byval_resolve_fd(r, &self, &fd, &pidfd, msg, len);
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
    printf("    limit %llu: %s: %s\n", (unsigned long long)limit, byval_status_str(st), msg);
    assert_true(fd == -1 && pidfd == -1);
    return st;
}

/* EMFILE at pidfd_open, at pidfd_getfd (the pidfd must not leak), and at
 * the /proc read of the start-time flavour. */
void test_out_of_fds(void **state)
{
    exporter_t x;
    char msg[512];
    NEED_GETFD();
    exporter_start(&x, EXP_PLAIN);
    int low = open("/dev/null", O_RDONLY | O_CLOEXEC); /* the lowest free number */
    assert_true(low >= 0);
    close(low);
    int before = nfds();
    assert_int_equal(resolve_limited(&x.rec, (rlim_t)low, msg, sizeof(msg)), BYVAL_E_NOFD);
    assert_non_null(strstr(msg, "pidfd_open"));
    assert_int_equal(nfds(), before);
    /* room for the pidfd only */
    assert_int_equal(resolve_limited(&x.rec, (rlim_t)low + 1, msg, sizeof(msg)), BYVAL_E_NOFD);
    assert_non_null(strstr(msg, (self.id_flags & BYVAL_FLAG_ID_PIDFS) ? "pidfd_getfd" : "/proc"));
    assert_non_null(strstr(msg, "out of file descriptors"));
    assert_int_equal(nfds(), before);
    byval_record_t r = x.rec;
    r.flags = 0;
    assert_int_equal(byval_proc_start_time(x.pid, &r.identity), 0);
    assert_int_equal(resolve_limited(&r, (rlim_t)low + 1, msg, sizeof(msg)), BYVAL_E_NOFD);
    assert_non_null(strstr(msg, "/proc"));
    assert_int_equal(nfds(), before);
    exporter_stop(&x, 0);
}

void test_invalid_records(void **state)
{
    const byval_record_t good = {.kind = BYVAL_KIND_ZE_MEM, .pid = (uint32_t)getpid(),
                                 .pidns = self.pidns, .boot = self.boot, .fd = 0};
    byval_record_t bad[7];
    for (int i = 0; i < 7; i++)
        bad[i] = good;
    bad[0].pid = 0;
    bad[1].pid = (uint32_t)INT32_MAX + 1; /* (pid_t) would be negative */
    bad[2].pid = UINT32_MAX;              /* (pid_t) -1 */
    bad[3].fd = (uint32_t)INT32_MAX + 1;
    bad[4].kind = 0;
    bad[5].kind = BYVAL_KIND_MAX_ + 1;
    bad[6].flags = 0x2;
    for (int i = 0; i < 7; i++)
        expect_fail(&bad[i], BYVAL_E_INVALID, "invalid record");
    int fd = 77;
    char msg[8];
    assert_int_equal(byval_resolve_fd(&good, NULL, &fd, NULL, NULL, 0), BYVAL_E_INVALID);
    assert_int_equal(fd, -1);
    assert_int_equal(byval_resolve_fd(NULL, &self, &fd, NULL, msg, sizeof(msg)),
                     BYVAL_E_INVALID);
    assert_int_equal(strlen(msg), sizeof(msg) - 1); /* truncated, terminated */
    memset(msg, 'Z', sizeof(msg));
    assert_int_equal(byval_resolve_fd(&bad[0], &self, &fd, NULL, msg, 0), BYVAL_E_INVALID);
    assert_int_equal(msg[0], 'Z'); /* msglen 0: nothing written */
}

void test_getfd_more_errors(void **state)
{
    exporter_t x;
    char msg[512];
    int fd = -1, pidfd = -1, more = 77;
    NEED_GETFD();
    exporter_start(&x, EXP_PLAIN);
    assert_int_equal(byval_resolve_fd(&x.rec, &self, &fd, &pidfd, msg, sizeof(msg)), BYVAL_OK);
    int before = nfds();
    assert_int_equal(byval_getfd_obj(pidfd, x.rec.pid, 1000, 0, 0, BYVAL_OBJ_MEMORY,
                                     &more, msg, sizeof(msg)),
                     BYVAL_E_BADFD);
    printf("    %s\n", msg);
    assert_non_null(strstr(msg, "fd 1000 is not open in pid"));
    assert_int_equal(more, -1);
    assert_int_equal(byval_getfd_obj(-1, x.rec.pid, x.rec.fd, 0, 0, BYVAL_OBJ_MEMORY,
                                     &more, msg, sizeof(msg)),
                     BYVAL_E_INVALID);
    assert_int_equal(byval_getfd_obj(pidfd, x.rec.pid, (uint32_t)INT32_MAX + 1, 0, 0,
                                     BYVAL_OBJ_MEMORY, &more, msg, sizeof(msg)),
                     BYVAL_E_INVALID);
    assert_int_equal(byval_getfd_obj(pidfd, x.rec.pid, x.rec.fd, 0, 0, BYVAL_OBJ_MEMORY,
                                     NULL, msg, sizeof(msg)),
                     BYVAL_E_INVALID);
    assert_int_equal(nfds(), before);
    exporter_stop(&x, 0); /* reaped: getfd through the old pidfd is ESRCH */
    assert_int_equal(byval_getfd_obj(pidfd, x.rec.pid, x.rec.fd, x.rec.fd_ino, 0,
                                     BYVAL_OBJ_MEMORY, &more, msg, sizeof(msg)),
                     BYVAL_E_GONE);
    printf("    %s\n", msg);
    assert_non_null(strstr(msg, "exited"));
    assert_int_equal(nfds(), before - 1); /* exporter_stop closed the go pipe */
    check_mapping(fd);
    close(fd);
    close(pidfd);
    assert_int_equal(byval_pidfd_exited(pidfd), 1); /* closed: unreachable */
}

#define NTHREADS 8
static pthread_barrier_t self_barrier;

static void *self_thread(void *arg)
{
    const byval_self_t *ref = arg;
    long bad = 0;
    pthread_barrier_wait(&self_barrier);
    for (int i = 0; i < 2000; i++) {
        byval_self_t s;
        memset(&s, 0xa5, sizeof(s));
        bad += byval_self_get(&s) != 0 || s.pid != ref->pid || s.pidns != ref->pidns ||
               s.boot != ref->boot || s.identity != ref->identity ||
               s.id_flags != ref->id_flags;
    }
    return (void *)bad;
}

/* After a reset, threads racing the first byval_self_get all get the
 * same description (TSan checks the publication). */
void test_self_threads(void **state)
{
    pthread_t th[NTHREADS];
    byval_self_t ref = self, s;
    byval_self_reset();
    assert_int_equal(pthread_barrier_init(&self_barrier, NULL, NTHREADS), 0);
    for (int i = 0; i < NTHREADS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, self_thread, &ref), 0);
    long bad = 0;
    for (int i = 0; i < NTHREADS; i++) {
        void *r;
        assert_int_equal(pthread_join(th[i], &r), 0);
        bad += (long)r;
    }
    pthread_barrier_destroy(&self_barrier);
    assert_int_equal(bad, 0);
    assert_int_equal(byval_self_get(&s), 0);
    assert_true(s.pid == ref.pid && s.identity == ref.identity && s.boot == ref.boot);
    assert_int_equal(byval_self_get(NULL), -1);
}

/* ---- the proof of export, as the pipeline uses it (resolve.c) -------- */

/* A stand-in for the registry's proof: "listed" under the record's key or
 * not, and, to play the race, withdrawn (the word changed) right after it
 * was read, as an exporter freeing the export during pidfd_getfd does. */
static uint64_t stub_word;
static int stub_mode; /* 0 listed, 1 listed then withdrawn, 2 not listed */
static int stub_done;
static uint64_t stub_key;

static byval_status_t stub_prove(const byval_record_t *rec, int pidfd, uint32_t pid,
                                 uint32_t fd, uint32_t ino, byval_proof_t *proof, char *msg,
                                 size_t msglen)
{
    (void)pidfd, (void)ino;
    stub_key = byval_record_key(rec, fd); /* the record's own fd: its kind and id */
    if (stub_mode == 2) {
        snprintf(msg, msglen, "pid %u's registry does not list fd %u", pid, fd);
        return BYVAL_E_FDKIND;
    }
    stub_word = 41;
    proof->word = &stub_word;
    proof->serial = 41;
    proof->hold = &stub_done;
    if (stub_mode == 1)
        __atomic_store_n(&stub_word, 0, __ATOMIC_RELEASE); /* withdrawn */
    return BYVAL_OK;
}

static void stub_release(byval_proof_t *proof)
{
    (*(int *)proof->hold)++;
}

static const byval_prover_t stub = {stub_prove, stub_release};

void test_proof_held_across_getfd(void **state)
{
    exporter_t x;
    char msg[512];
    int fd = -1;
    NEED_GETFD();
    exporter_start(&x, EXP_PLAIN);
    byval_resolve_set_prover(&stub);
    int before = nfds();
    stub_mode = 0;
    stub_done = 0;
    assert_int_equal(byval_resolve_fd(&x.rec, &self, &fd, NULL, msg, sizeof(msg)), BYVAL_OK);
    assert_int_equal(stub_key, BYVAL_REG_KEY(x.rec.kind, x.rec.alloc_id));
    assert_int_equal(stub_done, 1); /* what prove() held is dropped */
    check_mapping(fd);
    close(fd);
    stub_mode = 1; /* the export ended while it was duplicated: not used */
    assert_int_equal(byval_resolve_fd(&x.rec, &self, &fd, NULL, msg, sizeof(msg)),
                     BYVAL_E_BADFD);
    printf("    %s\n", msg);
    assert_non_null(strstr(msg, "withdrawn"));
    assert_int_equal(fd, -1);
    assert_int_equal(stub_done, 2);
    stub_mode = 2; /* never listed: nothing duplicated */
    expect_fail(&x.rec, BYVAL_E_FDKIND, "does not list");
    assert_int_equal(nfds(), before);
    byval_resolve_set_prover(NULL);
    exporter_stop(&x, 0);
}
