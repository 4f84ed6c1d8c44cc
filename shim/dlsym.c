/* SPDX-License-Identifier: MIT */
/*
 * dlsym.c - the interposed dlsym().
 *
 * Programs and libraries that dlopen the Level Zero loader or libcuda and
 * dlsym() their entry points (oneCCL, UMF, libcudart's cuGetProcAddress
 * bootstrap) never see a symbol-level preload. We hand out our wrapper
 * when the symbol found belongs to the loader or to libcuda, and only
 * then: a driver's own zeGet*ProcAddrTable, dlsym'd by the loader, must
 * stay the driver's.
 */
#include <dlfcn.h>
#include <link.h>
#include <stddef.h>

#include "shim/dlsym_next.h"
#include "shim/symbols.h"

#define BYVAL_DECLARE_(name) extern char name[];
BYVAL_ALL_SYMBOLS(BYVAL_DECLARE_)
#undef BYVAL_DECLARE_

static const struct {
    const char *name;
    void *wrapper;
} symbol_table[] = {
#define BYVAL_ENTRY_(name) {#name, (void *)name},
    BYVAL_ALL_SYMBOLS(BYVAL_ENTRY_)
#undef BYVAL_ENTRY_
};

void *byval_symbol_wrapper(const char *name)
{
    if (!name || (name[0] != 'z' && name[0] != 'c'))
        return NULL;
    for (size_t i = 0; i < sizeof(symbol_table) / sizeof(symbol_table[0]); i++)
        if (byval_streq(symbol_table[i].name, name))
            return symbol_table[i].wrapper;
    return NULL;
}

typedef void *(*dlsym_fn_t)(void *, const char *);
static dlsym_fn_t real_dlsym_fn;

void *byval_real_dlsym(void *handle, const char *name)
{
    dlsym_fn_t fn = __atomic_load_n(&real_dlsym_fn, __ATOMIC_ACQUIRE);
    if (!fn) {
        /* glibc 2.34 moved dlsym into libc with a new version; older
         * programs still reference GLIBC_2.2.5. Either is the real one. */
        fn = (dlsym_fn_t)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
        if (!fn)
            fn = (dlsym_fn_t)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
        if (!fn)
            return NULL;
        __atomic_store_n(&real_dlsym_fn, fn, __ATOMIC_RELEASE);
    }
    return fn(handle, name);
}

/* 1 if addr lies in the Level Zero loader or in libcuda. */
static int owned_by_driver_lib(const void *addr)
{
    Dl_info info;
    if (!dladdr(addr, &info) || !info.dli_fname)
        return 0;
    const char *base = byval_basename(info.dli_fname);
    return byval_strneq(base, "libze_loader.so", 15) || byval_strneq(base, "libcuda.so", 10);
}

__attribute__((visibility("default"))) void *dlsym(void *handle, const char *name)
{
    void *sym;
    if (handle == RTLD_NEXT)
        sym = byval_dlsym_next(__builtin_return_address(0), name);
    else
        sym = byval_real_dlsym(handle, name);
    if (sym) {
        void *wrapper = byval_symbol_wrapper(name);
        if (wrapper && wrapper != sym && owned_by_driver_lib(sym))
            return wrapper;
    }
    return sym;
}
