/* SPDX-License-Identifier: MIT */
/*
 * xfer - an exporter/importer pair on handles/ alone (a memfd is the
 * object), so the transport tests need no GPU shim and the script can put
 * each side in its own namespaces or uid:
 *   xfer export FILE [SECONDS]   offer a memfd, write its 47-byte record to
 *                                FILE, wait for FILE.done (or SECONDS),
 *                                print "served N refused M"
 *   xfer import FILE [--mode auto|pidfd|socket] [--uid UID]
 *                    [--expect ok|STATUS-NAME] [--again N]
 *                                fetch, map, check the pattern; print
 *                                "OK via=... local_pid=..." or
 *                                "FAILED (status): message"; exit 0 when
 *                                the outcome is the expected one
 *   xfer bench [N]               median cold fetch: pidfd vs socket
 * The exporter serves unless XFER_SERVE=0 (as IPCBYVAL_TRANSPORT=pidfd).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "handles/broker.h"
#include "handles/transport.h"

#define XFER_SIZE (64 * 1024 + 100) /* not a page multiple: the record rounds up */

static uint8_t pattern(size_t i)
{
    return (uint8_t)(i * 13 + 5);
}

static int wait_for(const char *path, int seconds)
{
    for (int i = 0; i < seconds * 100; i++) {
        if (access(path, F_OK) == 0)
            return 0;
        usleep(10000);
    }
    return -1;
}

/* A memfd with the pattern, offered (unless XFER_SERVE=0), and its record. */
static int make_export(byval_record_t *rec)
{
    byval_self_t self;
    int fd = memfd_create("xfer", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, XFER_SIZE) != 0 || byval_self_get(&self) != 0)
        return -1;
    uint8_t *p = mmap(NULL, XFER_SIZE, PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        return -1;
    for (size_t i = 0; i < XFER_SIZE; i++)
        p[i] = pattern(i);
    munmap(p, XFER_SIZE);
    const char *serve = getenv("XFER_SERVE");
    if ((!serve || strcmp(serve, "0") != 0) && byval_broker_offer(fd) != 0)
        fprintf(stderr, "xfer: byval_broker_offer: %s\n", strerror(errno));
    memset(rec, 0, sizeof(*rec));
    rec->kind = BYVAL_KIND_ZE_MEM;
    byval_record_set_exporter(rec, &self);
    rec->fd = (uint32_t)fd;
    rec->fd_ino = (uint32_t)byval_fd_inode(fd);
    rec->alloc_id = 1;
    rec->size = XFER_SIZE;
    return fd;
}

static int do_export(const char *file, int seconds)
{
    byval_record_t rec;
    uint8_t wire[BYVAL_WIRE_LEN];
    char tmp[512], done[512];
    snprintf(tmp, sizeof(tmp), "%s.tmp", file);
    snprintf(done, sizeof(done), "%s.done", file);
    if (make_export(&rec) < 0 || byval_wire_encode(&rec, wire) != BYVAL_WIRE_OK) {
        fprintf(stderr, "xfer: export failed: %s\n", strerror(errno));
        return 1;
    }
    FILE *f = fopen(tmp, "w");
    if (!f || fwrite(wire, sizeof(wire), 1, f) != 1 || fclose(f) != 0 || rename(tmp, file) != 0)
        return 1;
    int rc = wait_for(done, seconds);
    uint64_t served, refused;
    byval_broker_counts(&served, &refused);
    printf("served %llu refused %llu\n", (unsigned long long)served, (unsigned long long)refused);
    return rc == 0 ? 0 : 1;
}

static const char *via_name(byval_via_t v)
{
    static const char *const names[] = {"none", "pidfd", "pidfd-translated", "socket"};
    return v <= BYVAL_VIA_SOCKET ? names[v] : "?";
}

static int mode_of(const char *s)
{
    return !strcmp(s, "pidfd") ? BYVAL_MODE_PIDFD : !strcmp(s, "socket") ? BYVAL_MODE_SOCKET : 0;
}

/* One fetch and check; returns the status (BYVAL_E_FDKIND for wrong data). */
static byval_status_t fetch_check(const byval_record_t *rec, int mode, byval_fetch_info_t *info,
                                  char *msg, size_t msglen)
{
    byval_self_t self;
    int fd, pidfd;
    if (byval_self_get(&self) != 0)
        return BYVAL_E_SYS;
    byval_status_t st = byval_transport_fetch_fd(rec, &self, mode, &fd, &pidfd, info, msg, msglen);
    if (st != BYVAL_OK)
        return st;
    uint8_t *p = mmap(NULL, XFER_SIZE, PROT_READ, MAP_SHARED, fd, 0);
    size_t bad = p == MAP_FAILED ? 1 : 0;
    for (size_t i = 0; !bad && i < XFER_SIZE; i++)
        bad = p[i] != pattern(i);
    if (p != MAP_FAILED)
        munmap(p, XFER_SIZE);
    if (bad)
        snprintf(msg, msglen, "the fd maps other data than the exporter's");
    close(fd);
    if (pidfd >= 0)
        close(pidfd);
    return bad ? BYVAL_E_FDKIND : BYVAL_OK;
}

static int do_import(int argc, char **argv)
{
    const char *file = argv[0], *expect = "ok";
    int mode = BYVAL_MODE_AUTO, again = 1;
    long uid = -1;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--mode"))
            mode = mode_of(argv[i + 1]);
        else if (!strcmp(argv[i], "--uid"))
            uid = strtol(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--expect"))
            expect = argv[i + 1];
        else if (!strcmp(argv[i], "--again"))
            again = atoi(argv[i + 1]);
    }
    uint8_t wire[BYVAL_WIRE_LEN];
    byval_record_t rec;
    char done[512], msg[1024] = "";
    snprintf(done, sizeof(done), "%s.done", file);
    FILE *f = wait_for(file, 10) == 0 ? fopen(file, "r") : NULL;
    int got = f && fread(wire, sizeof(wire), 1, f) == 1;
    if (f)
        fclose(f);
    if (!got || byval_wire_decode(wire, sizeof(wire), &rec) != BYVAL_WIRE_OK) {
        printf("FAILED: no handle in %s\n", file);
        return 1;
    }
    /* Drop every id (also the saved one): no way back to the exporter's
     * uid, as for a job of another user. */
    if (uid >= 0 && (setresgid((gid_t)uid, (gid_t)uid, (gid_t)uid) != 0 ||
                     setresuid((uid_t)uid, (uid_t)uid, (uid_t)uid) != 0)) {
        printf("FAILED: setresuid(%ld): %s\n", uid, strerror(errno));
        return 1;
    }
    byval_fetch_info_t info;
    byval_status_t st = BYVAL_OK;
    int switches = 0;
    for (int i = 0; i < again && st == BYVAL_OK; i++) {
        st = fetch_check(&rec, mode, &info, msg, sizeof(msg));
        switches += info.fell_back;
    }
    f = fopen(done, "w");
    if (f)
        fclose(f);
    if (st == BYVAL_OK)
        printf("OK via=%s local_pid=%u fetches=%d fallbacks=%d\n", via_name(info.via),
               info.local_pid, again, switches);
    else
        printf("FAILED (%s): %s\n", byval_status_str(st), msg);
    return !strcmp(expect, "ok") ? st != BYVAL_OK : strcmp(expect, byval_status_str(st)) != 0;
}

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median of n fetches in mode (the exporter is our child). */
static double bench_mode(const byval_record_t *rec, int mode, int n)
{
    double *t = calloc((size_t)n, sizeof(*t));
    byval_self_t self;
    if (!t || byval_self_get(&self) != 0)
        return -1;
    for (int i = 0; i < n; i++) {
        int fd, pidfd;
        char msg[512];
        double t0 = now_us();
        byval_status_t st = byval_transport_fetch_fd(rec, &self, mode, &fd, &pidfd, NULL, msg,
                                                     sizeof(msg));
        t[i] = now_us() - t0;
        if (st != BYVAL_OK) {
            fprintf(stderr, "xfer bench: %s\n", msg);
            free(t);
            return -1;
        }
        close(fd);
        if (pidfd >= 0)
            close(pidfd);
    }
    qsort(t, (size_t)n, sizeof(*t), cmp_double);
    double med = t[n / 2];
    free(t);
    return med;
}

static int do_bench(int n)
{
    int p[2], go[2];
    byval_record_t rec;
    if (pipe(p) != 0 || pipe(go) != 0)
        return 1;
    pid_t e = fork();
    if (e == 0) {
        char c;
        byval_self_reset(); /* the cached identity is the parent's */
        if (make_export(&rec) < 0 || write(p[1], &rec, sizeof(rec)) != (ssize_t)sizeof(rec))
            _exit(1);
        _exit(read(go[0], &c, 1) == 1 ? 0 : 1);
    }
    if (e < 0 || read(p[0], &rec, sizeof(rec)) != (ssize_t)sizeof(rec))
        return 1;
    double pidfd = bench_mode(&rec, BYVAL_MODE_PIDFD, n);
    double sock = bench_mode(&rec, BYVAL_MODE_SOCKET, n);
    if (write(go[1], "x", 1) != 1)
        return 1;
    waitpid(e, NULL, 0);
    if (pidfd < 0 || sock < 0)
        return 1;
    printf("cold fetch, median of %d: pidfd %.1f us, socket %.1f us (%.1fx)\n", n, pidfd, sock,
           sock / pidfd);
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc >= 3 && !strcmp(argv[1], "export"))
        return do_export(argv[2], argc > 3 ? atoi(argv[3]) : 30);
    if (argc >= 3 && !strcmp(argv[1], "import"))
        return do_import(argc - 2, argv + 2);
    if (argc >= 2 && !strcmp(argv[1], "bench"))
        return do_bench(argc > 2 ? atoi(argv[2]) : 2001);
    fprintf(stderr, "usage: xfer export FILE [SECONDS] | import FILE [options] | bench [N]\n");
    return 2;
}
