/* SPDX-License-Identifier: MIT */
/*
 * dlsym.c - the interposed dlsym(). Programs that dlopen the Level Zero
 * loader or libcuda and dlsym() their entry points (oneCCL, UMF, libcudart)
 * get our wrapper (symbols.h) for a symbol of the loader or libcuda, and
 * only of them (the loader's dlsym of a driver's getters stays the driver's).
 * dlsym(RTLD_NEXT) would now resolve relative to us (a PMPI library would
 * get its own wrapper back): we walk the link map from the real caller's
 * object as ld.so does. Sanitizer runtimes call dlsym before their
 * allocator and interceptors work: built uninstrumented (shim/module.mk),
 * no malloc, no C library string functions.
 */
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <stddef.h>
#include <stdint.h>

#include "shim/dlsym_next.h"
#include "shim/symbols.h"

typedef struct dyn_tables {
    const ElfW(Sym) * symtab;
    const char *strtab;
    const uint32_t *gnu_hash;
    const uint32_t *sysv_hash;
    const ElfW(Half) * versym;
} dyn_tables_t;

static int streq(const char *a, const char *b)
{
    while (*a && *a == *b) {
        a++;
        b++;
    }
    return *a == *b;
}

/* 1 if the file name of path starts with prefix. */
static int file_is(const char *path, const char *prefix)
{
    const char *s = path;
    for (const char *p = path; *p; p++)
        if (*p == '/')
            s = p + 1;
    while (*prefix)
        if (*s++ != *prefix++)
            return 0;
    return 1;
}

/* ld.so relocates .dynamic pointers in place on x86_64, not everywhere:
 * an address below the load base still needs it added. */
static const void *dyn_ptr(const struct link_map *l, ElfW(Addr) p)
{
    return (const void *)(p < l->l_addr ? p + l->l_addr : p);
}

static int dyn_tables(const struct link_map *l, dyn_tables_t *t)
{
    *t = (dyn_tables_t){0};
    if (!l->l_ld)
        return -1;
    for (const ElfW(Dyn) *d = l->l_ld; d->d_tag != DT_NULL; d++) {
        switch (d->d_tag) {
        case DT_SYMTAB: t->symtab = dyn_ptr(l, d->d_un.d_ptr); break;
        case DT_STRTAB: t->strtab = dyn_ptr(l, d->d_un.d_ptr); break;
        case DT_GNU_HASH: t->gnu_hash = dyn_ptr(l, d->d_un.d_ptr); break;
        case DT_HASH: t->sysv_hash = dyn_ptr(l, d->d_un.d_ptr); break;
        case DT_VERSYM: t->versym = dyn_ptr(l, d->d_un.d_ptr); break;
        }
    }
    return t->symtab && t->strtab && (t->gnu_hash || t->sysv_hash) ? 0 : -1;
}

/* A definition that dlsym would return: defined, global or weak, not a
 * hidden (non-default) version. */
static int sym_usable(const dyn_tables_t *t, uint32_t i, const char *name)
{
    const ElfW(Sym) *s = &t->symtab[i];
    unsigned bind = ELF64_ST_BIND(s->st_info), type = ELF64_ST_TYPE(s->st_info);
    if (s->st_shndx == SHN_UNDEF || (bind != STB_GLOBAL && bind != STB_WEAK) ||
        (type != STT_FUNC && type != STT_OBJECT && type != STT_GNU_IFUNC && type != STT_NOTYPE))
        return 0;
    if (t->versym && (t->versym[i] & 0x8000))
        return 0;
    return streq(t->strtab + s->st_name, name);
}

static long lookup_gnu(const dyn_tables_t *t, const char *name)
{
    const uint32_t *ht = t->gnu_hash;
    uint32_t nbuckets = ht[0], symoffset = ht[1], bloom_size = ht[2];
    const ElfW(Addr) *bloom = (const ElfW(Addr) *)(ht + 4);
    const uint32_t *buckets = (const uint32_t *)(bloom + bloom_size);
    const uint32_t *chain = buckets + nbuckets;
    if (!nbuckets)
        return -1;
    uint32_t h = 5381;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        h = h * 33 + *p;
    uint32_t i = buckets[h % nbuckets];
    if (i < symoffset)
        return -1;
    for (;; i++) {
        uint32_t ch = chain[i - symoffset];
        if ((ch | 1) == (h | 1) && sym_usable(t, i, name))
            return i;
        if (ch & 1)
            return -1;
    }
}

static long lookup_sysv(const dyn_tables_t *t, const char *name)
{
    const uint32_t *ht = t->sysv_hash;
    uint32_t nbucket = ht[0];
    const uint32_t *bucket = ht + 2, *chain = bucket + nbucket;
    uint32_t h = 0;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        h = (h << 4) + *p;
        h = (h ^ ((h & 0xf0000000u) >> 24)) & 0x0fffffffu;
    }
    if (!nbucket)
        return -1;
    for (uint32_t i = bucket[h % nbucket]; i; i = chain[i])
        if (sym_usable(t, i, name))
            return i;
    return -1;
}

/* The address dlsym would give for name in object l, or NULL. */
static void *object_lookup(const struct link_map *l, const char *name)
{
    dyn_tables_t t;
    if (dyn_tables(l, &t) != 0)
        return NULL;
    long i = t.gnu_hash ? lookup_gnu(&t, name) : lookup_sysv(&t, name);
    if (i < 0)
        return NULL;
    const ElfW(Sym) *s = &t.symtab[i];
    void *addr = (void *)(l->l_addr + s->st_value);
    if (ELF64_ST_TYPE(s->st_info) == STT_GNU_IFUNC)
        addr = ((void *(*)(void))addr)(); /* what dlsym returns for an IFUNC */
    return addr;
}

void *byval_dlsym_next(const void *caller, const char *name)
{
    struct link_map *lm = NULL;
    Dl_info info;
    if (!name || !dladdr1(caller, &info, (void **)&lm, RTLD_DL_LINKMAP) || !lm)
        return NULL;
    for (struct link_map *l = lm->l_next; l; l = l->l_next) {
        void *sym = object_lookup(l, name);
        if (sym)
            return sym;
    }
    return NULL;
}

#define BYVAL_DECLARE_(name, ...) extern char name[];
BYVAL_ALL_SYMBOLS(BYVAL_DECLARE_)
#undef BYVAL_DECLARE_

static const struct {
    const char *name;
    void *wrapper;
} symbol_table[] = {
#define BYVAL_ENTRY_(name, ...) {#name, (void *)name},
    BYVAL_ALL_SYMBOLS(BYVAL_ENTRY_)
#undef BYVAL_ENTRY_
};

static void *symbol_wrapper(const char *name)
{
    if (!name || (name[0] != 'z' && name[0] != 'c'))
        return NULL;
    for (size_t i = 0; i < sizeof(symbol_table) / sizeof(symbol_table[0]); i++)
        if (streq(symbol_table[i].name, name))
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

/* 1 if addr lies in one of the drivers' libraries (symbols.h). */
static int owned_by_driver_lib(const void *addr)
{
    Dl_info info;
    if (!dladdr(addr, &info) || !info.dli_fname)
        return 0;
#define BYVAL_LIB_IS_(lib) file_is(info.dli_fname, lib) ||
    return BYVAL_DRIVER_LIBS(BYVAL_LIB_IS_) 0;
#undef BYVAL_LIB_IS_
}

__attribute__((visibility("default"))) void *dlsym(void *handle, const char *name)
{
    void *sym;
    if (handle == RTLD_NEXT)
        sym = byval_dlsym_next(__builtin_return_address(0), name);
    else
        sym = byval_real_dlsym(handle, name);
    if (sym) {
        void *wrapper = symbol_wrapper(name);
        if (wrapper && wrapper != sym && owned_by_driver_lib(sym))
            return wrapper;
    }
    return sym;
}
