/* SPDX-License-Identifier: MIT */
/*
 * hostile - an exporter on handles/ alone and the peers that attack its
 * broker, for test_hostile.sh. The attackers speak the broker's wire
 * protocol themselves (broker_internal.h): they run no ipcbyval code.
 *   hostile export INFO [--dir D] [--gid G] [--n N] [--dup2 FILE] [--secs S]
 *       N memfd exports (default 2), offered, registered for the rescue
 *       and published in the registry as the shim does; with --dup2, FILE then sits at the
 *       registry's fd number (an application's dup2). Writes INFO (the
 *       abstract name, the directory's socket, one record per export),
 *       waits for INFO.done (or S seconds, default 30)
 *   hostile import INFO [--idx I] [--dir D] [--gid G] [--mode auto|socket]
 *       fetch export I and check its bytes: "OK via=..." or
 *       "FAILED (status): message"
 *   hostile page ADDR            ask for the registry page (rescue request)
 *   hostile grab ADDR            a peer sent nothing: the page, then every
 *                                live export it lists, by handle (its fd
 *                                and inode from the page, with no tag and
 *                                with a made-up one) and by number
 *                                (rescue): "grab: K of M exports fetched
 *                                (R refused for the tag)", "rescue: ..."
 *   hostile idle ADDR N SECS     hold N connections that send nothing
 *   hostile squat NAME SECS      listen at the abstract NAME
 *   hostile stack                the stack size of a background thread
 * ADDR: @NAME (abstract) or the path of a socket.
 */
#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "handles/bgthread.h"
#include "handles/broker.h"
#include "handles/broker_internal.h"
#include "handles/registry.h"
#include "handles/rendezvous.h"
#include "handles/tag.h"
#include "handles/transport.h"

#define H_SIZE 8192
#define H_MAX 16

static uint8_t pattern(size_t i, int k)
{
    return (uint8_t)(i * 7 + 3 + k);
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

static const char *opt(int argc, char **argv, const char *name, const char *def)
{
    for (int i = 0; i + 1 < argc; i++)
        if (!strcmp(argv[i], name))
            return argv[i + 1];
    return def;
}

static int setup_dir(int argc, char **argv)
{
    const char *dir = opt(argc, argv, "--dir", NULL), *gid = opt(argc, argv, "--gid", NULL);
    char msg[512];
    if (dir && byval_rendezvous_setup(dir, gid ? atol(gid) : BYVAL_RENDEZVOUS_NO_GID, msg,
                                      sizeof(msg)) != 0) {
        printf("FAILED: %s\n", msg);
        return -1;
    }
    return 0;
}

static int do_export(int argc, char **argv)
{
    const char *info = argv[2], *dup = opt(argc, argv, "--dup2", NULL);
    int n = atoi(opt(argc, argv, "--n", "2")), secs = atoi(opt(argc, argv, "--secs", "30"));
    byval_self_t self;
    char tmp[512], done[512], name[64];
    if (setup_dir(argc, argv) != 0 || byval_self_get(&self) != 0 || n < 1 || n > H_MAX)
        return 1;
    snprintf(tmp, sizeof(tmp), "%s.tmp", info);
    snprintf(done, sizeof(done), "%s.done", info);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return 1;
    for (int k = 0; k < n; k++) {
        int fd = memfd_create("hostile", MFD_CLOEXEC);
        uint8_t *p = MAP_FAILED;
        if (fd < 0 || ftruncate(fd, H_SIZE) != 0 ||
            (p = mmap(NULL, H_SIZE, PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED)
            return 1;
        for (size_t i = 0; i < H_SIZE; i++)
            p[i] = pattern(i, k);
        munmap(p, H_SIZE);
        byval_record_t rec = {.kind = BYVAL_KIND_ZE_MEM, .alloc_id = (uint64_t)k + 1,
                              .size = H_SIZE};
        byval_record_set_exporter(&rec, &self);
        rec.fd = (uint32_t)fd;
        rec.fd_ino = (uint32_t)byval_fd_inode(fd);
        uint8_t wire[BYVAL_WIRE_LEN];
        if (byval_record_tag(&rec) != 0)
            return 1;
        int page_fd, pipe_rd;
        if (byval_broker_offer(fd) != 0 || byval_reg_add_fd(fd) != 0 ||
            byval_reg_add(BYVAL_REG_KEY(BYVAL_KIND_ZE_MEM, rec.alloc_id), rec.fd_ino, rec.fd,
                          H_SIZE) != 0 ||
            byval_wire_encode(&rec, wire) != BYVAL_WIRE_OK) {
            fprintf(stderr, "hostile: export %d: %s\n", k, strerror(errno));
            return 1;
        }
        if (byval_reg_fds_to_offer(&page_fd, &pipe_rd) == 0 &&
            (byval_broker_offer_open(page_fd) != 0 || byval_broker_offer_open(pipe_rd) != 0))
            return 1;
        fprintf(f, "rec ");
        for (int i = 0; i < BYVAL_WIRE_LEN; i++)
            fprintf(f, "%02x", wire[i]);
        fprintf(f, "\n");
    }
    struct sockaddr_un a;
    byval_broker_addr(&a, self.boot, self.pidns, self.pid, self.identity);
    fprintf(f, "abstract @%s\n", a.sun_path + 1);
    if (byval_rendezvous_enabled()) {
        byval_rendezvous_name(name, sizeof(name), self.boot, self.identity);
        fprintf(f, "dirsock %s/%s\n", byval_rendezvous_dir(), name);
    }
    if (dup) {
        /* The application puts another file at the registry's number. */
        char link[128] = "";
        ssize_t l = readlink("/proc/self/fd/1000", link, sizeof(link) - 1);
        int sfd = open(dup, O_RDONLY | O_CLOEXEC);
        if (l <= 0 || !strstr(link, BYVAL_REG_NAME) || sfd < 0 || dup2(sfd, 1000) != 1000) {
            fprintf(stderr, "hostile: no registry at fd 1000 (%s) or no %s\n", link, dup);
            return 1;
        }
        close(sfd);
    }
    if (fclose(f) != 0 || chmod(tmp, 0644) != 0 || rename(tmp, info) != 0)
        return 1;
    int rc = wait_for(done, secs);
    uint64_t served, refused;
    byval_broker_counts(&served, &refused);
    printf("served %llu refused %llu\n", (unsigned long long)served, (unsigned long long)refused);
    return rc == 0 ? 0 : 1;
}

/* Line KEY of INFO (the idx-th), its value into out. */
static int info_get(const char *info, const char *key, int idx, char *out, size_t len)
{
    char line[512];
    size_t kl = strlen(key);
    FILE *f = wait_for(info, 20) == 0 ? fopen(info, "r") : NULL;
    int found = -1;
    while (f && fgets(line, sizeof(line), f))
        if (!strncmp(line, key, kl) && line[kl] == ' ' && idx-- == 0) {
            line[strcspn(line, "\n")] = '\0';
            snprintf(out, len, "%s", line + kl + 1);
            found = 0;
            break;
        }
    if (f)
        fclose(f);
    return found;
}

static int do_import(int argc, char **argv)
{
    const char *info = argv[2], *mode_s = opt(argc, argv, "--mode", "auto");
    int idx = atoi(opt(argc, argv, "--idx", "0"));
    int mode = !strcmp(mode_s, "socket") ? BYVAL_MODE_SOCKET : BYVAL_MODE_AUTO;
    char hex[512], msg[1024] = "";
    uint8_t wire[BYVAL_WIRE_LEN];
    byval_record_t rec;
    byval_self_t self;
    byval_fetch_info_t fi;
    int fd = -1, pidfd = -1;
    if (setup_dir(argc, argv) != 0)
        return 1;
    if (info_get(info, "rec", idx, hex, sizeof(hex)) != 0 || strlen(hex) != 2 * BYVAL_WIRE_LEN) {
        printf("FAILED: no record %d in %s\n", idx, info);
        return 1;
    }
    for (int i = 0; i < BYVAL_WIRE_LEN; i++)
        sscanf(hex + 2 * i, "%2hhx", &wire[i]);
    if (byval_wire_decode(wire, sizeof(wire), &rec) != BYVAL_WIRE_OK || byval_self_get(&self))
        return 1;
    byval_status_t st = byval_transport_fetch_fd(&rec, &self, mode, &fd, &pidfd, &fi, msg,
                                                 sizeof(msg));
    if (st != BYVAL_OK) {
        printf("FAILED (%s): %s\n", byval_status_str(st), msg);
        return 1;
    }
    uint8_t *p = mmap(NULL, H_SIZE, PROT_READ, MAP_SHARED, fd, 0);
    int bad = p == MAP_FAILED;
    for (size_t i = 0; !bad && i < H_SIZE; i++)
        bad = p[i] != pattern(i, idx);
    printf(bad ? "FAILED: other data\n" : "OK via=%d\n", (int)fi.via);
    return bad;
}

/* Connect to ADDR (@abstract or a path); -1 on failure. */
static int dial(const char *addr)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    socklen_t len = sizeof(a);
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (addr[0] == '@') {
        snprintf(a.sun_path + 1, sizeof(a.sun_path) - 1, "%s", addr + 1);
        len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(addr + 1));
    } else {
        snprintf(a.sun_path, sizeof(a.sun_path), "%s", addr);
    }
    if (s >= 0 && connect(s, (struct sockaddr *)&a, len) != 0) {
        close(s);
        return -1;
    }
    return s;
}

/* One request; the status, *fd_p the fd that came with it or -1. */
static int ask(const char *addr, uint32_t magic, uint32_t fd, uint32_t ino, uint64_t tag,
               int *fd_p)
{
    struct broker_req req = {magic, fd, ino, tag};
    struct broker_rsp rsp = {0, -EPROTO};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } cbuf;
    struct iovec iov = {&rsp, sizeof(rsp)};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf.buf,
                        .msg_controllen = sizeof(cbuf.buf)};
    *fd_p = -1;
    int s = dial(addr);
    if (s < 0)
        return -ENOTCONN;
    struct timeval tv = {5, 0};
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (send(s, &req, sizeof(req), MSG_NOSIGNAL) != sizeof(req) ||
        recvmsg(s, &mh, MSG_CMSG_CLOEXEC) != sizeof(rsp)) {
        close(s);
        return -EPROTO;
    }
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    if (c && c->cmsg_type == SCM_RIGHTS)
        memcpy(fd_p, CMSG_DATA(c), sizeof(int));
    close(s);
    return rsp.status;
}

static int do_page(const char *addr)
{
    int fd, st = ask(addr, BROKER_MAGIC_REGISTRY, 0, 0, 0, &fd);
    char buf[256] = "", link[128] = "", path[64];
    printf("page: status %d\n", st);
    if (fd < 0)
        return 0;
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    ssize_t l = readlink(path, link, sizeof(link) - 1);
    ssize_t r = pread(fd, buf, sizeof(buf) - 1, 0);
    printf("page: got %s\n", l > 0 ? link : "?");
    if (r > 0 && memmem(buf, (size_t)r, "TOPSECRET", 9))
        printf("page: LEAKED another file's contents\n");
    return 0;
}

static int do_grab(const char *addr)
{
    int pfd, st = ask(addr, BROKER_MAGIC_REGISTRY, 0, 0, 0, &pfd);
    int got = 0, live = 0, untagged = 0;
    if (pfd < 0) {
        printf("grab: page refused (%d): 0 of 0 exports fetched\n", st);
        return 0;
    }
    const byval_reg_header_t *h = mmap(NULL, BYVAL_REG_BYTES, PROT_READ, MAP_SHARED, pfd, 0);
    if (h == MAP_FAILED) {
        printf("grab: page not mapped\n");
        return 1;
    }
    const byval_reg_slot_t *slot = (const byval_reg_slot_t *)(h + 1);
    uint32_t high = h->high < BYVAL_REG_SLOTS ? h->high : BYVAL_REG_SLOTS;
    int rescued = 0;
    for (uint32_t i = 0; i < high; i++) {
        int fd;
        if (!slot[i].serial || !slot[i].ino)
            continue;
        live++;
        /* The request of this version, its tag missing, then made up. */
        uint64_t tags[2] = {0, ((uint64_t)slot[i].ino * 0x9E3779B97F4A7C15ull >> 24) | 1};
        int fetched = 0;
        for (int t = 0; t < 2; t++) {
            int rc = ask(addr, BROKER_MAGIC, slot[i].fd, slot[i].ino, tags[t], &fd);
            if (rc == 0 && fd >= 0) {
                fetched = 1;
                close(fd);
            }
            untagged += rc == -EACCES;
        }
        got += fetched;
        if (ask(addr, BROKER_MAGIC_RESCUE, slot[i].fd, 0, 0, &fd) == 0 && fd >= 0) {
            rescued++;
            close(fd);
        }
    }
    printf("rescue: %d of %d exports fetched by number\n", rescued, live);
    printf("grab: %d of %d exports fetched (%d of %d requests refused for the tag)\n", got, live,
           untagged, 2 * live);
    return 0;
}

/* Keep n connections open that never send a request: one the exporter
 * closed (its deadline, or told to retry) is dialled again at once. */
static int do_idle(const char *addr, int n, int secs)
{
    int s[64], redials = 0;
    char b[16];
    n = n < 64 ? n : 64;
    for (int i = 0; i < n; i++)
        s[i] = dial(addr);
    printf("idle: %d connecting\n", n);
    for (int t = 0; t < secs * 1000; t++) {
        for (int i = 0; i < n; i++) {
            if (s[i] >= 0 && recv(s[i], b, sizeof(b), MSG_DONTWAIT) < 0 && errno == EAGAIN)
                continue; /* still held */
            if (s[i] >= 0)
                close(s[i]);
            s[i] = dial(addr);
            redials++;
        }
        usleep(1000);
    }
    printf("idle: %d redials\n", redials);
    return 0;
}

static int do_squat(const char *name, int secs)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path + 1, sizeof(a.sun_path) - 1, "%s", name + (name[0] == '@'));
    socklen_t len =
        (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(a.sun_path + 1));
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0 || bind(s, (struct sockaddr *)&a, len) != 0 || listen(s, 64) != 0) {
        printf("squat: %s\n", strerror(errno));
        return 1;
    }
    printf("squat: listening as uid %u\n", (unsigned)getuid());
    fflush(stdout);
    sleep((unsigned)secs);
    return 0;
}

static void *stack_of(void *arg)
{
    pthread_attr_t a;
    size_t size = 0;
    if (pthread_getattr_np(pthread_self(), &a) == 0) {
        pthread_attr_getstacksize(&a, &size);
        pthread_attr_destroy(&a);
    }
    __atomic_store_n((size_t *)arg, size ? size : 1, __ATOMIC_RELEASE);
    return NULL;
}

static int do_stack(void)
{
    static size_t size;
    if (byval_bgthread_start(stack_of, &size, NULL) != 0)
        return 1;
    for (int i = 0; i < 1000 && !__atomic_load_n(&size, __ATOMIC_ACQUIRE); i++)
        usleep(10000);
    printf("stack: %zu bytes\n", size);
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc >= 3 && !strcmp(argv[1], "export"))
        return do_export(argc, argv);
    if (argc >= 3 && !strcmp(argv[1], "import"))
        return do_import(argc, argv);
    if (argc == 3 && !strcmp(argv[1], "page"))
        return do_page(argv[2]);
    if (argc == 3 && !strcmp(argv[1], "grab"))
        return do_grab(argv[2]);
    if (argc == 5 && !strcmp(argv[1], "idle"))
        return do_idle(argv[2], atoi(argv[3]), atoi(argv[4]));
    if (argc == 4 && !strcmp(argv[1], "squat"))
        return do_squat(argv[2], atoi(argv[3]));
    if (argc == 2 && !strcmp(argv[1], "stack"))
        return do_stack();
    fprintf(stderr, "usage: see test/transport/hostile.c\n");
    return 2;
}
