/* SPDX-License-Identifier: MIT */
/* config.h - every IPCBYVAL_* variable, parsed once from the environment
 * (the table, with defaults and docs, is config.c's). */
#ifndef BYVAL_CACHE_CONFIG_H
#define BYVAL_CACHE_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum byval_transport {
    BYVAL_TRANSPORT_AUTO = 0,
    BYVAL_TRANSPORT_PIDFD = 1,
    BYVAL_TRANSPORT_SOCKET = 2,
};

typedef struct byval_config {
    int enable;               /* IPCBYVAL_ENABLE */
    int log_level;            /* IPCBYVAL_LOG */
    char log_file[256];       /* IPCBYVAL_LOG_FILE ("" = stderr) */
    size_t cache_size;        /* IPCBYVAL_CACHE_SIZE: import cache entries */
    uint64_t cache_bytes;     /* IPCBYVAL_CACHE_BYTES: closed mappings kept */
    size_t export_cache_size; /* IPCBYVAL_EXPORT_CACHE_SIZE */
    int stats;                /* IPCBYVAL_STATS */
    char stats_dir[256];      /* IPCBYVAL_STATS_DIR ("" = no file) */
    int ze;                   /* IPCBYVAL_ZE: handle Level Zero */
    int cuda;                 /* IPCBYVAL_CUDA: handle CUDA */
    int cuda_legacy_cache;    /* IPCBYVAL_CUDA_LEGACY_CACHE */
    int transport;            /* IPCBYVAL_TRANSPORT (enum byval_transport) */
    int set_ptracer;          /* IPCBYVAL_SET_PTRACER */
    char rendezvous_dir[256]; /* IPCBYVAL_RENDEZVOUS_DIR ("" = none) */
    long rendezvous_gid;      /* IPCBYVAL_RENDEZVOUS_GID (-1 = none) */
} byval_config_t;

/* The parsed configuration; valid after byval_init(). */
extern byval_config_t byval_cfg;

/* Parse the environment into byval_cfg; warn about invalid values (the
 * default is kept) and unknown IPCBYVAL_* names (closest name suggested).
 * With IPCBYVAL_RUN_CHECKED=1 (ipcbyval-run reported them once for the
 * job) those warnings are debug lines. Returns how many there were. */
int byval_config_load(void);

/* "NAME=value NAME=value" for every variable not at its default ("" when
 * none is), into buf. */
void byval_config_changed(char *buf, size_t len);

/* Before a by-value export, with IPCBYVAL_SET_PTRACER=1: let any process
 * ptrace this one (Yama ptrace_scope 1), once per process. */
void byval_ptracer_allow(void);

/* Print every variable: name, current value, default, doc. */
void byval_config_print(FILE *out);

#endif
