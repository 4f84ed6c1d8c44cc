/* SPDX-License-Identifier: MIT */
/*
 * exporters.h - the importer's view of the processes it imported from:
 * one pidfd each, polled (rate-limited, no thread) so that an exited
 * exporter's imports are released, and lent to later cold opens of it,
 * which skip pidfd_open and the identity check (done on it once).
 */
#ifndef BYVAL_CACHE_EXPORTERS_H
#define BYVAL_CACHE_EXPORTERS_H

#include <stdint.h>

typedef struct byval_exporter_id {
    uint32_t pidns;
    uint32_t pid;
    uint64_t identity;
} byval_exporter_id_t;

/* Called for each exporter seen exiting (outside any lock). */
typedef void (*byval_exporter_exit_fn)(const byval_exporter_id_t *id);

/* Set the handler (the import flow's). */
void byval_exporters_on_exit(byval_exporter_exit_fn fn);

/* The kept pidfd of exporter id, lent to the caller (it stays open until
 * the matching byval_exporters_release, even if the exporter exits and is
 * dropped meanwhile), or -1 when id is not kept. */
int byval_exporters_hold(const byval_exporter_id_t *id);

/* Give back pidfd for id: a pidfd lent by byval_exporters_hold is
 * returned; any other pidfd (verified for id by the caller) is kept for
 * id, or closed when id already has one or the table is full. -1: no-op. */
void byval_exporters_release(const byval_exporter_id_t *id, int pidfd);

/* Poll kept pidfds (at most once a millisecond): the handlers run for
 * those that exited. */
void byval_exporters_poll(void);

/* The exporter's image is gone (its registry pipe hung up: exit or
 * exec). Exited: its pidfd dropped and the handlers run now (1); else the
 * registry watcher does so when its pidfd says it exited (never after an
 * exec: the pidfd stays for the new image). */
int byval_exporters_gone(const byval_exporter_id_t *id);

/* Number of exporters kept (pidfds held for them). */
unsigned byval_exporters_count(void);

#endif
