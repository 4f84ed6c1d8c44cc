/* SPDX-License-Identifier: MIT */
/*
 * dlsym_next.c - dlsym(RTLD_NEXT, name) on behalf of another caller.
 *
 * glibc resolves RTLD_NEXT relative to the object that called dlsym, found
 * from the return address; once we interpose dlsym that object would be
 * us. Wrong answers are dangerous: a PMPI-style library asking for the
 * next "MPI_Send" would get its own wrapper back and recurse. So we walk
 * the link map from the real caller's object and look the name up in each
 * later object's own dynamic symbol table (GNU or SysV hash), as ld.so
 * does. No dlopen and no malloc: sanitizer runtimes call dlsym(RTLD_NEXT)
 * while their allocator is not ready yet.
 */
#include <elf.h>
#include <link.h>
#include <stddef.h>
#include <stdint.h>

#include "shim/dlsym_next.h"

typedef struct dyn_tables {
    const ElfW(Sym) * symtab;
    const char *strtab;
    const uint32_t *gnu_hash;
    const uint32_t *sysv_hash;
    const ElfW(Half) * versym;
} dyn_tables_t;

int byval_streq(const char *a, const char *b)
{
    while (*a && *a == *b) {
        a++;
        b++;
    }
    return *a == *b;
}

int byval_strneq(const char *a, const char *b, unsigned long n)
{
    for (unsigned long i = 0; i < n; i++) {
        if (a[i] != b[i])
            return 0;
        if (!a[i])
            return 1;
    }
    return 1;
}

const char *byval_basename(const char *path)
{
    const char *base = path;
    for (const char *p = path; *p; p++)
        if (*p == '/')
            base = p + 1;
    return base;
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
        default: break;
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
        (type != STT_FUNC && type != STT_OBJECT && type != STT_GNU_IFUNC && type != STT_NOTYPE &&
         type != STT_TLS) ||
        type == STT_TLS)
        return 0;
    if (t->versym && (t->versym[i] & 0x8000))
        return 0;
    return byval_streq(t->strtab + s->st_name, name);
}

static uint32_t gnu_hash(const char *name)
{
    uint32_t h = 5381;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        h = h * 33 + *p;
    return h;
}

static uint32_t sysv_hash(const char *name)
{
    uint32_t h = 0, g;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        h = (h << 4) + *p;
        g = h & 0xf0000000u;
        if (g)
            h ^= g >> 24;
        h &= ~g;
    }
    return h;
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
    uint32_t h = gnu_hash(name);
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
    if (!nbucket)
        return -1;
    for (uint32_t i = bucket[sysv_hash(name) % nbucket]; i; i = chain[i])
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
