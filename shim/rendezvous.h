/* SPDX-License-Identifier: MIT */
/* rendezvous.h - IPCBYVAL_RENDEZVOUS_DIR and _GID handed to
 * handles/rendezvous.h, and what it has to say, logged. */
#ifndef BYVAL_SHIM_RENDEZVOUS_H
#define BYVAL_SHIM_RENDEZVOUS_H

/* At init, after the configuration: use the directory, or say once why
 * not (then everything behaves as without it). */
void byval_rendezvous_configure(void);

/* After the broker's start: say once why the exporter does not listen in
 * the directory, if it does not. Keeps errno. */
void byval_rendezvous_report(void);

#endif
