/* SPDX-License-Identifier: MIT */
/* dlsym_next.h - RTLD_NEXT resolution relative to a given caller (dlsym.c). */
#ifndef BYVAL_SHIM_DLSYM_NEXT_H
#define BYVAL_SHIM_DLSYM_NEXT_H

/* What dlsym(RTLD_NEXT, name) called from the object containing caller
 * gives; allocation-free. NULL when none. */
void *byval_dlsym_next(const void *caller, const char *name);

#endif
