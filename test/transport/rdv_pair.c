/* SPDX-License-Identifier: MIT */
/* rdv_pair.c - the two sides of rdv_pair (see rdv_pair.h), whatever the
 * GPU API. */
#include "rdv_pair.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "test/io_all.h"

static const char *kase = "rounds";
static unsigned rounds = 20;
static size_t size = (1 << 20) + 4096;
int rdv_double_close;
static const char *hold; /* wait for this file before sending (exporter) or opening (importer) */

static void hold_on(void)
{
    for (int i = 0; hold && i < 3000 && access(hold, F_OK) != 0; i++)
        usleep(10000);
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static uint64_t mix(uint64_t x)
{
    x ^= x >> 31;
    x *= 0x7fb5d329728ea185ull;
    x ^= x >> 27;
    x *= 0x81dadef4bc2dd44dull;
    return x ^ (x >> 33);
}

void rdv_fill(uint8_t *buf, size_t len, uint64_t seed)
{
    for (size_t i = 0; i < len; i++)
        buf[i] = (uint8_t)(mix(seed ^ (i / 8)) >> (8 * (i % 8)));
}

int rdv_check(const uint8_t *buf, size_t len, uint64_t seed)
{
    for (size_t i = 0; i < len; i++)
        if (buf[i] != (uint8_t)(mix(seed ^ (i / 8)) >> (8 * (i % 8))))
            return 0;
    return 1;
}

/* Wait (3 s at most) until the ledger's bytes held (all, or freed ones)
 * are 0; ms waited, or -1. */
static double wait_released(const struct rdv_ops *ops, int freed_only, uint64_t *left_p)
{
    double t0 = now_ms();
    uint64_t used = 0, held = 0;
    while (now_ms() - t0 < 3000) {
        if (ops->ledger(&used, &held) != 0)
            return -2;
        *left_p = freed_only ? held : used;
        if (*left_p == 0)
            return now_ms() - t0;
        usleep(2000);
    }
    return -1;
}

static int exporter(const struct rdv_ops *ops, int hfd, int afd)
{
    double slowest = 0;
    unsigned n = !strcmp(kase, "exit") ? 1 : rounds, acked = 0;
    for (unsigned r = 1; r <= n; r++) {
        struct rdv_msg m = {.round = r, .seed = mix(r * 7919u + 1), .size = size};
        void *alloc = NULL;
        int32_t ack = -1;
        int pools = !strcmp(kase, "pools");
        if (pools ? !ops->pool_export || ops->pool_export(m.h, &alloc)
                  : ops->export_one(size, m.seed, m.h, &alloc))
            return 1;
        hold_on();
        if (test_io_all(hfd, &m, sizeof(m), 1) || test_io_all(afd, &ack, sizeof(ack), 0)) {
            fprintf(stderr, "rdv exporter: the importer is gone in round %u\n", r);
            return 1;
        }
        acked += ack == 1;
        if (ack != 1 && !strcmp(kase, "free")) {
            /* Nothing opened holds nothing: the release would prove nothing. */
            printf("FAILED rdv free: round %u: the importer's open %s\n", r,
                   ack == 0 ? "mapped wrong data" : "failed");
            return 1;
        }
        if (!strcmp(kase, "exit"))
            break; /* exit without freeing: the importer watches */
        if (pools ? ops->pool_wait(alloc) : ops->free_one(alloc))
            return 1;
        if (!strcmp(kase, "free")) {
            uint64_t left = 0;
            double ms = wait_released(ops, 1, &left);
            if (ms < 0) {
                printf("FAILED rdv free: round %u: %llu freed bytes still held by the idle "
                       "importer after 3 s%s\n",
                       r, (unsigned long long)left, ms == -2 ? " (no ledger)" : "");
                return 1;
            }
            slowest = ms > slowest ? ms : slowest;
        }
    }
    struct rdv_msg end = {0};
    if (strcmp(kase, "exit") != 0)
        (void)test_io_all(hfd, &end, sizeof(end), 1);
    if (!strcmp(kase, "free"))
        printf("OK rdv free: %u rounds released, slowest %.1f ms\n", n, slowest);
    else
        printf("rdv exporter: %u of %u answered verified\n", acked, n);
    return 0;
}

static int importer(const struct rdv_ops *ops, int hfd, int afd)
{
    unsigned got = 0, right = 0;
    struct rdv_msg m;
    while (test_io_all(hfd, &m, sizeof(m), 0) == 0 && m.round != 0) {
        int ok = 0;
        got++;
        hold_on();
        if (!strcmp(kase, "pools"))
            ok = ops->pool_import(m.h) == 0;
        else if (ops->import_one(m.h, m.size, m.seed, &ok) != 0)
            ok = -1;
        right += ok == 1;
        int32_t ack = ok;
        if (test_io_all(afd, &ack, sizeof(ack), 1))
            break;
        if (!strcmp(kase, "exit"))
            break;
    }
    if (!strcmp(kase, "exit")) {
        /* Idle from here: no API call, only the ledger is read. */
        char c;
        while (read(hfd, &c, 1) > 0) /* end of file: the exporter exited */
            ;
        uint64_t left = 0;
        double ms = wait_released(ops, 0, &left);
        if (right != 1 || ms < 0) {
            printf("FAILED rdv exit: %s%llu bytes still held 3 s after the exporter exited\n",
                   right != 1 ? "the open failed; " : "", (unsigned long long)left);
            return 1;
        }
        printf("OK rdv exit: released %.1f ms after the exporter exited\n", ms);
        return 0;
    }
    if (got != rounds || right != rounds) {
        printf("FAILED rdv %s: %u of %u verified (%u received)\n", kase, right, rounds, got);
        return 1;
    }
    printf("OK rdv %s: %u of %u verified\n", kase, right, rounds);
    return 0;
}

/* "plant PATH UID SECONDS": a socket listening at PATH, owned by UID,
 * for SECONDS; prints how many connections it saw (an impostor's view). */
static int plant(int argc, char **argv)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    if (argc < 5 || strlen(argv[2]) >= sizeof(a.sun_path))
        return 2;
    snprintf(a.sun_path, sizeof(a.sun_path), "%s", argv[2]);
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0), seen = 0;
    unlink(argv[2]);
    if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(s, 8) != 0 ||
        lchown(argv[2], (uid_t)atol(argv[3]), (gid_t)-1) != 0) {
        perror("rdv plant");
        return 1;
    }
    printf("planted\n");
    fflush(stdout);
    for (long i = 0; i < atol(argv[4]) * 100; i++) {
        int c = accept(s, NULL, NULL);
        if (c >= 0) {
            seen++;
            close(c);
        }
        usleep(10000);
    }
    printf("plant: %d connections\n", seen);
    return 0;
}

static void on_signal(int sig)
{
    (void)sig;
    _exit(124);
}

/* "stale PATH": exit 0 once nobody listens at PATH (ECONNREFUSED), within
 * 5 s; 1 otherwise. */
static int stale(int argc, char **argv)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    if (argc < 3 || strlen(argv[2]) >= sizeof(a.sun_path))
        return 2;
    snprintf(a.sun_path, sizeof(a.sun_path), "%s", argv[2]);
    for (int i = 0; i < 500; i++) {
        int s = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
        int refused = connect(s, (struct sockaddr *)&a, sizeof(a)) != 0 && errno == ECONNREFUSED;
        close(s);
        if (refused)
            return 0;
        usleep(10000);
    }
    return 1;
}

int rdv_main(int argc, char **argv, const struct rdv_ops *ops)
{
    if (argc >= 2 && !strcmp(argv[1], "plant"))
        return plant(argc, argv);
    if (argc >= 2 && !strcmp(argv[1], "stale"))
        return stale(argc, argv);
    if (argc < 3 || (strcmp(argv[1], "export") && strcmp(argv[1], "import"))) {
        fprintf(stderr, "usage: %s export|import DIR [--case rounds|free|exit|pools|seq] "
                        "[--rounds N] [--size BYTES]\n", argv[0]);
        return 2;
    }
    int exp = !strcmp(argv[1], "export");
    for (int i = 3; i < argc; i++) {
        int k;
        if (!strcmp(argv[i], "--case") && i + 1 < argc)
            kase = argv[++i];
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = (unsigned)strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--size") && i + 1 < argc)
            size = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--hold") && i + 1 < argc)
            hold = argv[++i];
        else if (!strcmp(argv[i], "--double-close"))
            rdv_double_close = 1;
        else if (ops->option && (k = ops->option(argc, argv, i)) > 0)
            i += k - 1;
        else {
            fprintf(stderr, "%s: unknown option %s\n", argv[0], argv[i]);
            return 2;
        }
    }
    /* Under unshare --pid --fork we are our namespace's init, which the
     * kernel spares every signal it has no handler for: SIGALRM and
     * SIGTERM must have one to end us. */
    signal(SIGALRM, on_signal);
    signal(SIGTERM, on_signal);
    alarm(90); /* never outlive the script's own timeout */
    char hpath[512], apath[512];
    snprintf(hpath, sizeof(hpath), "%s/c.h", argv[2]);
    snprintf(apath, sizeof(apath), "%s/c.a", argv[2]);
    /* Same order on both sides (c.h, then c.a): the opens pair up. */
    int hfd = open(hpath, exp ? O_WRONLY : O_RDONLY);
    int afd = hfd < 0 ? -1 : open(apath, exp ? O_RDONLY : O_WRONLY);
    if (hfd < 0 || afd < 0) {
        fprintf(stderr, "%s: open %s: %s\n", argv[0], hfd < 0 ? hpath : apath, strerror(errno));
        return 1;
    }
    if (ops->init(exp))
        return 1;
    if (!strcmp(kase, "seq"))
        return exp ? rdv_seq_exporter(ops, hfd, afd, size) : rdv_seq_importer(ops, hfd, afd);
    return exp ? exporter(ops, hfd, afd) : importer(ops, hfd, afd);
}
