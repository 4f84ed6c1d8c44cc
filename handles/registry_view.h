/* SPDX-License-Identifier: MIT */
/* registry_view.h - an importer's read-only view of an exporter's registry
 * (registry.h), and the thread that watches every view for frees and for
 * the exporter's exit or exec. */
#ifndef BYVAL_HANDLES_REGISTRY_VIEW_H
#define BYVAL_HANDLES_REGISTRY_VIEW_H

#include "handles/registry.h"
#include "handles/resolve.h"

typedef struct byval_reg_view byval_reg_view_t;

/* Views listed at once (an fd and a 256 KiB mapping each); beyond, the
 * least recently used is evicted (registry_watch.c). */
#define BYVAL_REG_VIEWS_MAX 32u

/* What the watcher reports, on its thread, no lock held: the exporter
 * freed something (gone 0: look at v's slots again), or its image is gone
 * (exit or exec: everything of v is freed). */
typedef void (*byval_reg_event_fn)(byval_reg_view_t *v, int gone);

/* Set the handler (once, before the first attach). */
void byval_reg_on_event(byval_reg_event_fn fn);

/* The view of the exporter rec names, reached through pidfd (verified;
 * -1: none) with transport mode: one per exporter image, referenced (drop
 * it with byval_reg_view_put). NULL (msg says why): not tracked. _st: why
 * not in *st_p (PERM where ptrace rules refuse us). */
byval_reg_view_t *byval_reg_attach(const byval_record_t *rec, int mode, int pidfd, char *msg,
                                   size_t msglen);

/* The same for an exporter known only by its pid here (a legacy CUDA
 * handle's getpid()): the registry must describe the process behind a
 * pidfd of it. pidfd transport only. */
byval_reg_view_t *byval_reg_attach_pid(uint32_t pid, char *msg, size_t msglen);

/* Drop a reference. */
void byval_reg_view_put(byval_reg_view_t *v);

/* The serial word of the live export (key, ino; ino 0: any), of (key, fd,
 * ino), or whose serial's low 32 bits are serial32 (what a short record
 * names; a consistent copy of its slot in *slot_p), with its value now;
 * NULL when the registry lists no such live export. */
const uint64_t *byval_reg_find(byval_reg_view_t *v, uint64_t key, uint32_t ino, uint64_t *serial_p);

const uint64_t *byval_reg_find_fd(byval_reg_view_t *v, uint64_t key, uint32_t fd, uint32_t ino,
                                  uint64_t *serial_p);

/* The proof of export the library installs (resolve.h): the exporter's
 * registry lists the fd under the record's key. */
extern const byval_prover_t byval_reg_prover;

const uint64_t *byval_reg_find_serial(byval_reg_view_t *v, uint32_t serial32,
                                      byval_reg_slot_t *slot_p);

/* The registry of the exporter a short record names: in our pid
 * namespace by its pid and identity's low 32 bits, in another through the
 * rendezvous directory. BYVAL_OK: *v_p referenced, rec_p's exporter
 * fields filled, *pidfd_p the pidfd opened for it (-1: a listed view
 * served) for the caller to keep or close. */
byval_status_t byval_reg_attach_short(const byval_short_t *s, const byval_self_t *self, int mode,
                                      byval_reg_view_t **v_p, byval_record_t *rec_p, int *pidfd_p,
                                      char *msg, size_t msglen);

/* 1 while the export found as (word, serial) is live. One load: what a
 * cache hit pays to refuse memory the exporter freed. */
static inline int byval_reg_live(const uint64_t *word, uint64_t serial)
{
    return __atomic_load_n(word, __ATOMIC_ACQUIRE) == serial;
}

/* When the watcher thread starts: with the first view (default), or on
 * demand (set once before the first attach): only once something needs
 * it (byval_reg_watch_need, an exit watch, too many views), so that a
 * first open does not pay a thread start (20-70 us). Its epoll set
 * reports later whatever it missed. */
void byval_reg_watch_on_demand(int on);

/* The watcher runs from now on: 1 when started here, 0 when it ran
 * already, -1 when no thread could be started (msg says why). */
int byval_reg_watch_need(char *msg, size_t msglen);

/* Once pidfd's process has exited, fn(arg) on the watcher thread (started
 * here if not yet; pidfd is duplicated). 0, or -1. */
int byval_reg_watch_exit(int pidfd, void (*fn)(void *arg), void *arg);

/* Whose registry v is. */
void byval_reg_view_id(const byval_reg_view_t *v, uint32_t *pidns_p, uint32_t *pid_p,
                       uint64_t *identity_p);

/* 1 once the exporter's image is gone (exit or exec seen). */
int byval_reg_view_gone(const byval_reg_view_t *v);

/* Views attached now (statistics, tests). */
unsigned byval_reg_views(void);

#endif
