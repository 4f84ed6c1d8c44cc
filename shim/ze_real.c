/* SPDX-License-Identifier: MIT */
/* ze_real.c - the loader's own entry points, found at run time: ipcbyval
 * never links against the loader, so a process without Level Zero is
 * untouched. */
#include <dlfcn.h>

#include "shim/symbols.h"
#include "shim/ze.h"

void *byval_ze_sym(const char *name)
{
    /* Loaded into the global scope (linked, or dlopen RTLD_GLOBAL). */
    void *p = byval_real_dlsym(RTLD_NEXT, name);
    if (p)
        return p;
    /* dlopen(..., RTLD_LOCAL): RTLD_NEXT cannot see it, a no-load handle can. */
    void *h = dlopen("libze_loader.so.1", RTLD_NOLOAD | RTLD_LAZY);
    if (!h)
        return NULL;
    p = byval_real_dlsym(h, name);
    dlclose(h);
    return p;
}
