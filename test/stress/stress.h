/* SPDX-License-Identifier: MIT */
/*
 * stress.h - the import-lifecycle stress workload (issue 22, defect 0):
 * an exporter process with 3 threads allocating, filling, sending and
 * freeing; an importer process with 6 threads opening, checking, keeping,
 * closing (some twice), destroying their contexts and forking. The GPU
 * API is a backend (stress_ze.c, stress_cu.c); the counters live in memory
 * shared by every process of the run, so children add to them too.
 */
#ifndef STRESS_H
#define STRESS_H

#include <stddef.h>
#include <stdint.h>

#define STRESS_HANDLE 64
#define STRESS_LIVE 4096 /* serials tracked as live, modulo */
#define STRESS_EXP_THREADS 3
#define STRESS_IMP_THREADS 6

/* What the exporter sends for one allocation. */
struct stress_msg {
    uint64_t serial;
    uint64_t size;
    uint8_t handle[STRESS_HANDLE];
};

/* A context of the importer: own (0-3), shared by two threads, or a
 * device's primary context (CUDA). */
enum stress_ctx_kind { STRESS_CTX_OWN, STRESS_CTX_SHARED, STRESS_CTX_PRIMARY };

struct stress_ctx {
    enum stress_ctx_kind kind;
    int device;
    void *h; /* the API's context handle */
};

/* Counters: each must stay 0 (opens and closes are work done). */
#define STRESS_COUNTERS(X)                                                          \
    X(wrong_reads, "wrong reads")                                                   \
    X(crashes, "crashes")                                                           \
    X(refused_live, "opens refused while live")                                     \
    X(double_close_ok, "second closes accepted")                                    \
    X(dead_ctx_closes, "closes on destroyed contexts")                              \
    X(warnings, "[ipcbyval warnings")                                                  \
    X(held_after, "mappings held after the exporter freed everything")

struct stress_shared {
#define X(f, d) uint64_t f;
    STRESS_COUNTERS(X)
#undef X
    uint64_t opens, closes, double_closes, destroys, forks, exports;
    uint64_t abandoned; /* mappings left open at a destroy */
    int stop;           /* main: stop the workload */
    int exp_freed;      /* exporter: everything freed */
    int imp_done;       /* importer: contexts destroyed, may exit */
    int exp_exited;     /* main: the exporter is gone */
    uint64_t live[STRESS_LIVE]; /* serial while the exporter has it */
};

struct stress_api {
    const char *name;
    /* 1 when mappings left open at a context's destroy stay mapped natively */
    int (*destroy_keeps)(void);
    int (*init)(int importer);
    /* exporter */
    int (*alloc)(void **blk, size_t *size, uint64_t serial); /* size rounded */
    int (*get)(void *blk, struct stress_msg *m, int *fd_p);  /* fd: native ZE */
    void (*free)(void *blk);
    /* importer */
    int (*ctx_new)(struct stress_ctx *c);
    void (*ctx_bind)(const struct stress_ctx *c);
    int (*ctx_destroy)(struct stress_ctx *c);
    int (*open)(const struct stress_ctx *c, const struct stress_msg *m, int fd, uintptr_t *p);
    int (*close)(const struct stress_ctx *c, uintptr_t p); /* 0: success */
    int (*read)(const struct stress_ctx *c, uintptr_t p, uint64_t *w);
    /* live imports now, closes on destroyed contexts so far; -1: unknown */
    int (*stats)(uint64_t *live, uint64_t *dead_closes);
    int (*send)(int sock, const struct stress_msg *m, int fd);
    int (*recv)(int sock, struct stress_msg *m, int *fd_p);
};

struct stress_opts {
    double seconds, settle;
    int native, forks, double_closes, destroys, one_context;
};

extern const struct stress_api stress_backend;

/* A backend file defines the stress_api functions under these names and
 * its stress_backend with this. */
#define STRESS_BACKEND(api_name)                                                          \
    const struct stress_api stress_backend = {                                            \
        .name = (api_name), .destroy_keeps = keeps,                                       \
        .init = init, .alloc = alloc, .get = get, .free = mfree,                          \
        .ctx_new = ctx_new, .ctx_bind = ctx_bind, .ctx_destroy = ctx_destroy,             \
        .open = open_ipc, .close = close_ipc, .read = read_word, .stats = stats,          \
        .send = send_msg, .recv = recv_msg,                                               \
    }
extern struct stress_shared *stress_sh;
extern struct stress_opts stress_o;

/* The word at byte offset off of allocation serial. */
uint64_t stress_word(uint64_t serial, uint64_t off);
/* xorshift; *s must not be 0 */
uint64_t stress_rand(uint64_t *s);
double stress_now(void);
void stress_sleep_ms(double ms);

int stress_exporter(int sock);
int stress_importer(int sock);

#define ADD(f, n) __atomic_add_fetch(&stress_sh->f, (n), __ATOMIC_RELAXED)
#define LOAD(f) __atomic_load_n(&stress_sh->f, __ATOMIC_ACQUIRE)
#define STORE(f, v) __atomic_store_n(&stress_sh->f, (v), __ATOMIC_RELEASE)

#endif
