/* SPDX-License-Identifier: MIT */
/*
 * fdshare - PyTorch's expandable-segment sharing pattern, as our own
 * program: the exporter cuMemCreate's memory, exports it as a POSIX fd
 * and tells its pid and fd number through a file; the importer does
 * pidfd_open + pidfd_getfd itself (as ExpandableSegment::fromShared does)
 * and imports the fd. Runs on the CUDA double and on a real GPU.
 *
 *   fdshare export DIR [--reuse none|eventfd|memfd|nvidiactl]
 *   fdshare import DIR [--wrapper] [--ask exported|other]
 *
 * The exporter writes DIR/info ("pid fd other-fd inode") and waits for
 * DIR/done. --reuse: after exporting, close the exported fd and put
 * another file at its number (an eventfd: one inode shared by all, as
 * every /dev/nvidiactl fd; a memfd never exported; on a real GPU a new
 * /dev/nvidiactl fd, the same inode as the export). other-fd is a file the
 * exporter never exported.
 *
 * The importer prints "OK same object" when the fd it got is the memory
 * the exporter wrote (read back through the driver), or the errno of
 * pidfd_getfd. --wrapper: glibc's pidfd_getfd() instead of syscall().
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "handles/sys.h" /* SYS_pidfd_* where headers lack them */
#include "test/cudadrv/cu_pair.h"

/* glibc 2.36's wrapper (declared here: older headers lack <sys/pidfd.h>). */
int pidfd_getfd(int pidfd, int targetfd, unsigned int flags) __attribute__((weak));

static char path_info[4096], path_done[4096];

static void paths(const char *dir)
{
    snprintf(path_info, sizeof(path_info), "%s/info", dir);
    snprintf(path_done, sizeof(path_done), "%s/done", dir);
}

static int wait_for(const char *path, int seconds)
{
    for (int i = 0; i < seconds * 100; i++) {
        if (access(path, F_OK) == 0)
            return 0;
        usleep(10000);
    }
    fprintf(stderr, "fdshare: %s: %s did not appear within %d s\n", role, path, seconds);
    return 1;
}

static void touch(const char *path)
{
    int f = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (f >= 0)
        close(f);
}

static int setup_ctx(void)
{
    struct opts o = {.route = ROUTE_SYMBOL, .lib = "libcuda.so.1", .version = 12000};
    return setup(&o, 0);
}

static void pattern(unsigned char *b, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        b[i] = (unsigned char)(seed * 31u + i * 7u);
}

#define PAT 4096

/* Map handle h (size bytes) and access it read-write: *va. */
static int map(CUmemGenericAllocationHandle h, size_t size, CUdeviceptr *va)
{
    CUmemAccessDesc acc = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CU(MemAddressReserve, va, size, 0, 0, 0);
    CU(MemMap, *va, size, 0, h, 0);
    CU(MemSetAccess, *va, size, &acc, 1);
    return 0;
}

static int do_export(const char *dir, const char *reuse)
{
    role = "exporter";
    CUmemAllocationProp prop = vmm_prop(0);
    CUmemGenericAllocationHandle h;
    CUdeviceptr va;
    size_t size;
    unsigned char buf[PAT];
    int fd = -1;
    if (setup_ctx())
        return 1;
    CU(MemGetAllocationGranularity, &size, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    CU(MemCreate, &h, size, &prop, 0);
    if (map(h, size, &va))
        return 1;
    pattern(buf, sizeof(buf), (unsigned)getpid());
    CU(MemcpyHtoD, va, buf, sizeof(buf));
    CU(MemExportToShareableHandle, &fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    struct stat st;
    if (fstat(fd, &st) != 0)
        return perror("fstat"), 1;
    int other = memfd_create("fdshare-never-exported", MFD_CLOEXEC);
    if (other < 0)
        return perror("memfd_create"), 1;
    if (strcmp(reuse, "none") != 0) {
        /* The number stays, the file behind it changes. */
        int x = strcmp(reuse, "eventfd") == 0   ? eventfd(0, EFD_CLOEXEC)
                : strcmp(reuse, "nvidiactl") == 0 ? open("/dev/nvidiactl", O_RDWR | O_CLOEXEC)
                                                  : memfd_create("fdshare-reuse", MFD_CLOEXEC);
        if (x < 0 || close(fd) != 0 || dup2(x, fd) != fd || close(x) != 0)
            return perror("reuse"), 1;
    }
    char tmp[4200];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path_info);
    FILE *f = fopen(tmp, "w");
    if (!f || fprintf(f, "%d %d %d %llu\n", (int)getpid(), fd, other,
                      (unsigned long long)st.st_ino) < 0 ||
        fclose(f) != 0 || rename(tmp, path_info) != 0)
        return perror(tmp), 1;
    int rc = wait_for(path_done, 60);
    close(fd);
    close(other);
    CU(MemUnmap, va, size);
    CU(MemAddressFree, va, size);
    CU(MemRelease, h);
    if (rc == 0)
        printf("OK exporter\n");
    return rc;
}

static int do_import(const char *dir, int wrapper, const char *ask)
{
    role = "importer";
    int pid, fd, other;
    unsigned long long ino;
    (void)dir;
    if (wait_for(path_info, 60))
        return 1;
    FILE *f = fopen(path_info, "r");
    if (!f || fscanf(f, "%d %d %d %llu", &pid, &fd, &other, &ino) != 4)
        return fprintf(stderr, "fdshare: importer: cannot read %s\n", path_info), 1;
    fclose(f);
    int target = strcmp(ask, "other") == 0 ? other : fd;
    int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (pidfd < 0)
        return perror("pidfd_open"), 1;
    int got;
    /* The C library leaves errno alone on success: a rescued call must too. */
    errno = EILSEQ;
    if (wrapper) {
        if (!pidfd_getfd)
            return fprintf(stderr, "SKIP: this C library has no pidfd_getfd wrapper\n"), 77;
        got = pidfd_getfd(pidfd, target, 0);
    } else {
        got = (int)syscall(SYS_pidfd_getfd, pidfd, target, 0);
    }
    if (got < 0) {
        int err = errno;
        printf("fdshare: importer: pidfd_getfd(pid %d, fd %d) failed: %s (errno %d)\n", pid,
               target, strerror(err), err);
        return 1;
    }
    if (errno != EILSEQ)
        return fprintf(stderr, "fdshare: importer: errno %d (%s) after a successful "
                       "pidfd_getfd, was EILSEQ: a success must leave errno alone\n",
                       errno, strerror(errno)), 1;
    int fl = fcntl(got, F_GETFD);
    if (fl < 0 || !(fl & FD_CLOEXEC))
        return fprintf(stderr, "fdshare: importer: fd without FD_CLOEXEC (%d)\n", fl), 1;
    struct stat st;
    if (fstat(got, &st) != 0 || (unsigned long long)st.st_ino != ino)
        return fprintf(stderr, "fdshare: importer: inode %llu, the export's is %llu\n",
                       (unsigned long long)st.st_ino, ino), 1;
    /* The same memory, through the driver: what the exporter wrote. */
    CUmemAllocationProp prop = vmm_prop(0);
    CUmemGenericAllocationHandle h;
    CUdeviceptr va;
    size_t size;
    unsigned char want[PAT], back[PAT];
    if (setup_ctx())
        return 1;
    CU(MemGetAllocationGranularity, &size, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    CU(MemImportFromShareableHandle, &h, (void *)(intptr_t)got,
       CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    if (map(h, size, &va))
        return 1;
    CU(MemcpyDtoH, back, va, sizeof(back));
    pattern(want, sizeof(want), (unsigned)pid);
    if (memcmp(want, back, sizeof(want)) != 0)
        return fprintf(stderr, "fdshare: importer: the memory is not the exporter's\n"), 1;
    CU(MemUnmap, va, size);
    CU(MemAddressFree, va, size);
    CU(MemRelease, h);
    close(got);
    close(pidfd);
    printf("OK same object (pid %d fd %d, %s)\n", pid, target, wrapper ? "pidfd_getfd()" : "syscall()");
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: fdshare export DIR [--reuse none|eventfd|memfd|nvidiactl]\n"
                        "       fdshare import DIR [--wrapper] [--ask exported|other]\n");
        return 2;
    }
    paths(argv[2]);
    const char *reuse = "none", *ask = "exported";
    int wrapper = 0;
    for (int i = 3; i < argc; i++) {
        if (strcmp(argv[i], "--reuse") == 0 && i + 1 < argc)
            reuse = argv[++i];
        else if (strcmp(argv[i], "--ask") == 0 && i + 1 < argc)
            ask = argv[++i];
        else if (strcmp(argv[i], "--wrapper") == 0)
            wrapper = 1;
        else
            return fprintf(stderr, "fdshare: unknown argument %s\n", argv[i]), 2;
    }
    if (strcmp(argv[1], "export") == 0)
        return do_export(argv[2], reuse);
    if (strcmp(argv[1], "import") == 0) {
        int rc = do_import(argv[2], wrapper, ask);
        touch(path_done);
        return rc;
    }
    return fprintf(stderr, "fdshare: export or import, not %s\n", argv[1]), 2;
}
