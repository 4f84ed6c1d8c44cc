/* SPDX-License-Identifier: MIT */
/* test_registry_peers.h - the processes test_registry_hostile.c runs: an
 * exporter publishing through handles/registry.c, a third process that
 * misbehaves on its page and pipe, and a forger of another uid. */
#ifndef BYVAL_TEST_REGISTRY_PEERS_H
#define BYVAL_TEST_REGISTRY_PEERS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "handles/registry_view.h"
#include "handles/wire.h"

#define KEY BYVAL_REG_KEY(1, 77)

typedef struct peer_exporter {
    pid_t pid;
    int sock;
    byval_record_t rec;
    int page_fd, pipe_fd; /* its registry's, in it */
} peer_exporter_t;

/* Fork an exporter that publishes KEY (inode 5, fd 3) and obeys commands:
 * 'r' remove KEY, 'a' add it again, 'n' 10,000 exports and frees of
 * another key, 'e' exec /bin/sleep 30 (answered before the exec: stop it
 * with kill), 'x' exit. 0, or -1. */
int peer_exporter_start(peer_exporter_t *e);
/* One command and its reply within ms: 0, or -1 (no reply: blocked or
 * dead). */
int peer_exporter_cmd(peer_exporter_t *e, char c, int ms);
/* Exit it: 0 when it exited by itself with status 0. */
int peer_exporter_stop(peer_exporter_t *e);

/* A third process (same uid) opens the page through /proc read-write,
 * writes `high` = 0xffffffff (write(2) and a writable mapping) and
 * truncates it; what worked goes to what. */
void peer_attack_page(pid_t pid, int page_fd, char *what, size_t len);
/* A third process takes the pipe's read end (pidfd_getfd: the shared open
 * file), clears O_NONBLOCK and shrinks the pipe to 4096 bytes. */
void peer_attack_pipe(pid_t pid, int pipe_fd, char *what, size_t len);
/* A third process takes the pipe's read end, reopens it for writing
 * through /proc/self/fd and holds that write end until killed: its pid,
 * or -1. */
pid_t peer_hold_pipe_writer(pid_t pid, int pipe_fd);
/* A third process writes the pipe in a loop for ms; its writes. */
uint64_t peer_spam_pipe(pid_t pid, int pipe_fd, int ms);

/* The view of rec's exporter (pidfd transport); its pidfd kept in
 * *pidfd_p (as the shim's exporters table keeps one per exporter) or
 * closed when pidfd_p is NULL. NULL with msg saying why. */
byval_reg_view_t *peer_attach(const byval_record_t *rec, int *pidfd_p, char *msg,
                              size_t msglen);

/* Set the watcher's handler, start an exporter into *e and attach its
 * view: the view, or NULL (why printed). */
byval_reg_view_t *peer_exporter_attached(peer_exporter_t *e, byval_reg_event_fn fn);

/* The watcher's reports in this process: the test's handler counts each
 * with peer_event(). */
void peer_event(void);
int peer_events(void);
/* 1 when a report came after `before` (a peer_events() value) within ms. */
int peer_event_after(int before, int ms);

/* Run argv (argv[0] a path) with its stdin and stdout on pipes: its pid,
 * with *in_p writing its stdin and *out_p reading its stdout; -1. */
pid_t peer_spawn(char *const argv[], int *in_p, int *out_p);

/* CPU time (user + system) of this process's ipcbyval-watch thread, ms;
 * -1 when it runs no such thread (waited for up to 2 s). */
long peer_watcher_cpu_ms(void);
/* 1 when this process runs an ipcbyval-watch thread now (no wait). */
int peer_watcher_running(void);

typedef struct peer_forger {
    pid_t pid;
    int in, out;
    byval_record_t rec;
} peer_forger_t;

/* Run this program as uid 65534 (setpriv) in forger mode: a registry of
 * its own, unsealed or sealed, full of hostile values. Commands: 't'
 * truncate the page, 'w' write the pipe once, 's' write it for 1 s. */
int peer_forger_start(peer_forger_t *f, int sealed);
int peer_forger_cmd(peer_forger_t *f, char c);
void peer_forger_stop(peer_forger_t *f);
/* The forger itself (main's "forger [sealed]"). */
int peer_forger_main(int sealed);

#endif
