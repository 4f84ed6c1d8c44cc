/* SPDX-License-Identifier: MIT */
/* pmuprof.h - samples and mappings of a profiled command, and their report
 * by symbol (pmuprof_sym.c). */
#ifndef BYVAL_PMUPROF_H
#define BYVAL_PMUPROF_H
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

struct prof;
struct prof *prof_new(void);
void prof_sample(struct prof *p, pid_t pid, uint64_t ip);
void prof_map(struct prof *p, pid_t pid, uint64_t addr, uint64_t len, uint64_t pgoff,
              const char *name);
void prof_lost(struct prof *p, unsigned long long n);
/* The executable mappings of PID as /proc/PID/maps lists them now. */
void prof_maps_from_proc(struct prof *p, pid_t pid);
/* TOP symbols by share of samples, then each module's share; with MODULE,
 * only samples in modules whose path contains it count. */
void prof_report(struct prof *p, FILE *out, int top, const char *module);
#endif
