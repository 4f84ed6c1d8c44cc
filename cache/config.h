/* SPDX-License-Identifier: MIT */
/* config.h - every IPCBYVAL_* variable, parsed once from the environment
 * (the table, with defaults and docs, is config.c's). */
#ifndef BYVAL_CACHE_CONFIG_H
#define BYVAL_CACHE_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum byval_transport { BYVAL_TRANSPORT_AUTO, BYVAL_TRANSPORT_PIDFD, BYVAL_TRANSPORT_SOCKET };

/* Each field is the variable its table entry in config.c names (IPCBYVAL_LOG
 * is log_level); "" and -1: unset. */
typedef struct byval_config {
    int enable, log_level, stats, ze, cuda, cuda_legacy_cache, set_ptracer;
    int transport; /* enum byval_transport */
    char log_file[256], stats_dir[256], rendezvous_dir[256];
    size_t cache_size, export_cache_size; /* entries of the import and export caches */
    uint64_t cache_bytes;                 /* of closed mappings kept */
    long rendezvous_gid;
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

/* Print every variable: name, current value, default, doc; flushed. */
void byval_config_print(FILE *out);

#endif
