/* SPDX-License-Identifier: MIT */
/*
 * stress_exp.c - the exporter: 3 threads, each allocating 4 KiB-1 MiB
 * (the backend rounds: CUDA VMM takes 1-3 chunks of 2 MiB), filling it
 * with its serial's pattern, marking it live, sending its handle, then
 * freeing it at once (30%) or keeping it (up to 8: the oldest goes);
 * sometimes a kept handle is sent again, sometimes every kept one freed.
 * A serial is marked dead BEFORE its free, so an importer that sees it
 * live before and after a refused open knows the allocation was alive.
 */
#include "test/stress/stress.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define KEEP 8

static int sock;
static pthread_mutex_t send_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t next_serial = 1;

struct kept {
    void *blk;
    uint64_t serial, size;
};

static void send_one(void *blk, uint64_t serial, uint64_t size)
{
    struct stress_msg m = {.serial = serial, .size = size};
    int fd = -1;
    if (stress_backend.get(blk, &m, &fd) != 0)
        return;
    pthread_mutex_lock(&send_lock);
    stress_backend.send(sock, &m, stress_o.native ? fd : -1);
    pthread_mutex_unlock(&send_lock);
    ADD(exports, 1);
}

static void drop(struct kept *k)
{
    __atomic_store_n(&stress_sh->live[k->serial % STRESS_LIVE], 0, __ATOMIC_RELEASE);
    stress_backend.free(k->blk);
}

static void *exp_thread(void *arg)
{
    uint64_t rnd = (uint64_t)(uintptr_t)arg * 7919 + 17;
    struct kept kept[KEEP];
    int n = 0;
    while (!LOAD(stop)) {
        struct kept k;
        size_t size = 4096 + stress_rand(&rnd) % (1024 * 1024 - 4096);
        k.serial = __atomic_fetch_add(&next_serial, 1, __ATOMIC_RELAXED);
        if (stress_backend.alloc(&k.blk, &size, k.serial) != 0) {
            stress_sleep_ms(1);
            continue;
        }
        k.size = size;
        __atomic_store_n(&stress_sh->live[k.serial % STRESS_LIVE], k.serial, __ATOMIC_RELEASE);
        send_one(k.blk, k.serial, k.size);
        unsigned r = (unsigned)(stress_rand(&rnd) % 100);
        if (r < 30) {
            drop(&k);
        } else {
            if (n == KEEP) {
                drop(&kept[0]);
                memmove(kept, kept + 1, sizeof(kept[0]) * (KEEP - 1));
                n--;
            }
            kept[n++] = k;
        }
        r = (unsigned)(stress_rand(&rnd) % 100);
        if (r < 10 && n) {
            struct kept *o = &kept[stress_rand(&rnd) % (unsigned)n];
            send_one(o->blk, o->serial, o->size);
        } else if (r < 12) {
            while (n)
                drop(&kept[--n]);
        }
        stress_sleep_ms(0.3); /* the importer opens the newest ones, not a flood */
    }
    while (n)
        drop(&kept[--n]);
    return NULL;
}

int stress_exporter(int s)
{
    sock = s;
    if (stress_backend.init(0) != 0) {
        fprintf(stderr, "stress: exporter: init failed\n");
        return 1;
    }
    pthread_t t[STRESS_EXP_THREADS];
    for (int i = 0; i < STRESS_EXP_THREADS; i++)
        pthread_create(&t[i], NULL, exp_thread, (void *)(uintptr_t)(i + 1));
    for (int i = 0; i < STRESS_EXP_THREADS; i++)
        pthread_join(t[i], NULL);
    STORE(exp_freed, 1);
    shutdown(sock, SHUT_WR);
    /* Alive until the importer has looked at what it still holds. */
    while (!LOAD(imp_done))
        stress_sleep_ms(10);
    return 0;
}
