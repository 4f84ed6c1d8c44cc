/* SPDX-License-Identifier: MIT */
/*
 * exporters.h - the importer's view of the processes it imported from.
 * One pidfd per exporter, polled (rate-limited, no thread) so that cache
 * entries of an exporter that exited are released.
 */
#ifndef BYVAL_SHIM_EXPORTERS_H
#define BYVAL_SHIM_EXPORTERS_H

#include <stdint.h>

typedef struct byval_exporter_id {
    uint32_t pidns;
    uint32_t pid;
    uint64_t identity;
} byval_exporter_id_t;

/* Called for each exporter seen exiting (outside any lock). */
typedef void (*byval_exporter_exit_fn)(const byval_exporter_id_t *id);

/* Register a handler (each API family registers one, once). */
void byval_exporters_on_exit(byval_exporter_exit_fn fn);

/* Remember pidfd for id (takes ownership of pidfd: kept or closed). */
void byval_exporters_track(const byval_exporter_id_t *id, int pidfd);

/* Poll tracked pidfds at most once per millisecond; runs the handlers
 * for those that exited. Cheap when nothing is due. */
void byval_exporters_poll(void);

/* Number of exporters tracked (pidfds held). */
unsigned byval_exporters_count(void);

#endif
