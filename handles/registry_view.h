/* SPDX-License-Identifier: MIT */
/*
 * registry_view.h - an importer's read-only view of an exporter's registry
 * (registry.h), and the one thread that watches every view for frees and
 * for the exporter's exit or exec.
 */
#ifndef BYVAL_HANDLES_REGISTRY_VIEW_H
#define BYVAL_HANDLES_REGISTRY_VIEW_H

#include <stddef.h>
#include <stdint.h>

#include "handles/registry.h"
#include "handles/resolve.h"
#include "handles/wire.h"

typedef struct byval_reg_view byval_reg_view_t;

/* Views listed at once (each costs an fd and a 256 KiB mapping): beyond
 * it the least recently used is evicted; its closed mappings are released
 * and its open ones at their last close (registry_watch.c), and the next
 * open of one of its handles attaches again. A GPU node's peers are a
 * few dozen at most. */
#define BYVAL_REG_VIEWS_MAX 32u

/* What the watcher reports: the exporter freed something (gone = 0: look
 * again at the slots of this view), or its process image is gone (exit or
 * exec: everything of this view is freed). Runs on the watcher thread, no
 * lock held. */
typedef void (*byval_reg_event_fn)(byval_reg_view_t *v, int gone);

/* Set the handler (once, before the first attach). */
void byval_reg_on_event(byval_reg_event_fn fn);

/* The view of the exporter rec names, reached through pidfd (the
 * importer's verified pidfd of that exporter; -1 when it has none) with
 * transport mode. One view per exporter image, shared and referenced:
 * drop it with byval_reg_view_put. NULL when the exporter publishes no
 * registry or it cannot be reached (msg says why): the caller's mappings
 * of that exporter are then not tracked. The first attach starts the
 * watcher thread. */
byval_reg_view_t *byval_reg_attach(const byval_record_t *rec, int mode, int pidfd, char *msg,
                                   size_t msglen);

/* byval_reg_attach, also saying why not in *st_p (PERM where the ptrace
 * rules refuse us, as pidfd_getfd would be refused). */
byval_reg_view_t *byval_reg_attach_st(const byval_record_t *rec, int mode, int pidfd,
                                      byval_status_t *st_p, char *msg, size_t msglen);

/* The same for an exporter known only by its pid in our namespace (a
 * legacy CUDA handle carries the driver's getpid()): the registry found
 * there must describe the process behind a pidfd of that pid. pidfd
 * transport only. */
byval_reg_view_t *byval_reg_attach_pid(uint32_t pid, char *msg, size_t msglen);

/* Another reference / drop one. */
void byval_reg_view_get(byval_reg_view_t *v);
void byval_reg_view_put(byval_reg_view_t *v);

/* The serial word of the live export (key, ino) and its value now, or
 * NULL when the registry lists no such live export (freed already). */
const uint64_t *byval_reg_find(byval_reg_view_t *v, uint64_t key, uint32_t ino, uint64_t *serial_p);

/* The serial word of the live export (key, fd, ino) and its value now,
 * or NULL when the registry lists no such live export: the proof that fd
 * is that export (proof.c). */
const uint64_t *byval_reg_find_fd(byval_reg_view_t *v, uint64_t key, uint32_t fd, uint32_t ino,
                                  uint64_t *serial_p);

/* The proof of export the library installs (resolve.h's byval_prover_t):
 * the registry of the exporter lists the fd under the record's key. */
extern const byval_prover_t byval_reg_prover;

/* The live export whose serial's low 32 bits are serial32 (what a short
 * record names, handles/wire.h): its serial word, with a consistent copy
 * of its slot in *slot_p; NULL when none is live (freed). */
const uint64_t *byval_reg_find_serial(byval_reg_view_t *v, uint32_t serial32,
                                      byval_reg_slot_t *slot_p);

/* A listed view (not gone) of the exporter (pidns, pid) whose identity's
 * low 32 bits are id32, referenced, with its full identity; or NULL. */
byval_reg_view_t *byval_reg_lookup_id32(uint32_t pidns, uint32_t pid, uint32_t id32,
                                        uint64_t *identity_p);

/* The registry of the exporter a short record names (registry_short.c):
 * the exporter must live in our host and pid namespace (the record's
 * guard), its identity is read on a pidfd of its pid and must match the
 * record's low 32 bits, and the registry found must describe that
 * process. On BYVAL_OK: *v_p referenced, rec_p's exporter fields (pid,
 * pidns, boot, identity, flags) filled, *pidfd_p the pidfd opened for it
 * (-1 when a listed view served: the caller's kept pidfd then) for the
 * caller to keep or close. Else one line in msg. */
byval_status_t byval_reg_attach_short(const byval_short_t *s, const byval_self_t *self, int mode,
                                      byval_reg_view_t **v_p, byval_record_t *rec_p, int *pidfd_p,
                                      char *msg, size_t msglen);

/* 1 while the export found as (word, serial) is live. One load: what a
 * cache hit pays to refuse memory the exporter freed. */
static inline int byval_reg_live(const uint64_t *word, uint64_t serial)
{
    return __atomic_load_n(word, __ATOMIC_ACQUIRE) == serial;
}

/* When the watcher thread starts. By default with the first view: every
 * attach is watched at once. On demand (the library's choice, set once
 * before the first attach): a view's pipe joins the watcher's epoll set
 * at attach, which reports later whatever it missed (edge-triggered), and
 * the thread starts only once something needs it: byval_reg_watch_need
 * (a closed mapping depends on a view), an exit watch, or more views than
 * BYVAL_REG_VIEWS_MAX. Until then a lookup asks a view's pipe itself
 * whether the exporter's image is gone. Why (issue 23): a thread start is
 * 20-70 us, which a first open paid whether or not anything it imported
 * would ever be closed and cached. */
void byval_reg_watch_on_demand(int on);

/* The watcher runs from now on: 1 when started here, 0 when it ran
 * already, -1 when no thread could be started (msg says why). */
int byval_reg_watch_need(char *msg, size_t msglen);

/* Once the process behind pidfd has exited (its pidfd readable), call
 * fn(arg) on the watcher thread (started here if not yet). The pidfd is
 * duplicated (the caller keeps its own). 0, or -1 when no watcher runs or
 * no fd is left. */
int byval_reg_watch_exit(int pidfd, void (*fn)(void *arg), void *arg);

/* Whose registry v is. */
void byval_reg_view_id(const byval_reg_view_t *v, uint32_t *pidns_p, uint32_t *pid_p,
                       uint64_t *identity_p);

/* 1 once the exporter's image is gone (exit or exec seen). */
int byval_reg_view_gone(const byval_reg_view_t *v);

/* Views attached now (statistics, tests). */
unsigned byval_reg_views(void);

#endif
