/* SPDX-License-Identifier: MIT */
/* dlsym_next.h - RTLD_NEXT resolution relative to a given caller. */
#ifndef BYVAL_SHIM_DLSYM_NEXT_H
#define BYVAL_SHIM_DLSYM_NEXT_H

#include <dlfcn.h>

/* The first definition of name in the objects loaded after the object
 * containing caller, as dlsym(RTLD_NEXT, name) called from there gives.
 * Allocation-free. NULL when none. */
void *byval_dlsym_next(const void *caller, const char *name);

/* String helpers for the dlsym path: sanitizer runtimes call dlsym while
 * they initialise, before their own strcmp interceptors work, so this path
 * (built without sanitizer instrumentation, see shim/module.mk) must not
 * call the C library's string functions. */
int byval_streq(const char *a, const char *b);
int byval_strneq(const char *a, const char *b, unsigned long n);
const char *byval_basename(const char *path);

#endif
