// SPDX-License-Identifier: MIT
/*
 * pmuprof_sym.c - where pmuprof's samples fell: each instruction pointer
 * mapped to its file (the command's mmap records, or /proc/PID/maps), to
 * the ELF virtual address through the file's program headers, and to the
 * function around it (.symtab, else .dynsym: the CUDA driver ships only
 * the latter). Kernel addresses resolve through /proc/kallsyms.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <elf.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pmuprof.h"

struct map { pid_t pid; uint64_t addr, len, pgoff; int file; };
struct sym { uint64_t lo, hi; const char *name; };
struct file {
    char *path;
    int loaded;
    struct sym *syms;
    size_t nsyms;
    const Elf64_Phdr *ph; /* copied program headers */
    int nph;
};
struct sample { pid_t pid; uint64_t ip; };
struct prof {
    struct map *maps; size_t nmaps, capmaps;
    struct file *files; size_t nfiles, capfiles;
    struct sample *s; size_t ns, caps;
    unsigned long long lost;
};

#define GROW(arr, n, cap)                                                      \
    do {                                                                       \
        if ((n) == (cap)) {                                                    \
            (cap) = (cap) ? 2 * (cap) : 256;                                   \
            (arr) = realloc((arr), (cap) * sizeof(*(arr)));                    \
            if (!(arr))                                                        \
                abort();                                                       \
        }                                                                      \
    } while (0)

struct prof *prof_new(void)
{
    struct prof *p = calloc(1, sizeof(*p));
    if (!p)
        abort();
    return p;
}

void prof_lost(struct prof *p, unsigned long long n) { p->lost += n; }

void prof_sample(struct prof *p, pid_t pid, uint64_t ip)
{
    GROW(p->s, p->ns, p->caps);
    p->s[p->ns++] = (struct sample){ pid, ip };
}

static int file_index(struct prof *p, const char *path)
{
    for (size_t i = 0; i < p->nfiles; i++)
        if (!strcmp(p->files[i].path, path))
            return (int)i;
    GROW(p->files, p->nfiles, p->capfiles);
    p->files[p->nfiles] = (struct file){ .path = strdup(path) };
    return (int)p->nfiles++;
}

void prof_map(struct prof *p, pid_t pid, uint64_t addr, uint64_t len, uint64_t pgoff,
              const char *name)
{
    GROW(p->maps, p->nmaps, p->capmaps);
    p->maps[p->nmaps++] = (struct map){ pid, addr, len, pgoff, file_index(p, name) };
}

void prof_maps_from_proc(struct prof *p, pid_t pid)
{
    char path[64], line[4096];
    snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    while (fgets(line, sizeof(line), f)) {
        unsigned long long lo, hi, off;
        char perm[8];
        int n = 0;
        if (sscanf(line, "%llx-%llx %7s %llx %*s %*s %n", &lo, &hi, perm, &off, &n) < 4 ||
            perm[2] != 'x')
            continue;
        char *name = line + n;
        name[strcspn(name, "\n")] = 0;
        prof_map(p, pid, lo, hi - lo, off, *name ? name : "[anon]");
    }
    fclose(f);
}

static int sym_cmp(const void *a, const void *b)
{
    const struct sym *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Function symbols of an ELF file (the largest table it has). */
static void file_load(struct file *fl)
{
    fl->loaded = 1;
    int fd = open(fl->path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0 || st.st_size < (off_t)sizeof(Elf64_Ehdr)) {
        if (fd >= 0)
            close(fd);
        return;
    }
    const char *b = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (b == MAP_FAILED)
        return;
    size_t sz = (size_t)st.st_size;
    const Elf64_Ehdr *eh = (const void *)b;
    if (memcmp(eh->e_ident, ELFMAG, SELFMAG) || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
        eh->e_phoff + (size_t)eh->e_phnum * sizeof(Elf64_Phdr) > sz ||
        eh->e_shoff + (size_t)eh->e_shnum * sizeof(Elf64_Shdr) > sz)
        return;
    fl->ph = (const void *)(b + eh->e_phoff);
    fl->nph = eh->e_phnum;
    const Elf64_Shdr *sh = (const void *)(b + eh->e_shoff);
    const Elf64_Shdr *best = NULL;
    for (int i = 0; i < eh->e_shnum; i++)
        if ((sh[i].sh_type == SHT_SYMTAB || sh[i].sh_type == SHT_DYNSYM) &&
            (!best || sh[i].sh_size > best->sh_size))
            best = &sh[i];
    if (!best || best->sh_link >= eh->e_shnum || best->sh_offset + best->sh_size > sz)
        return;
    const Elf64_Shdr *strs = &sh[best->sh_link];
    const Elf64_Sym *sy = (const void *)(b + best->sh_offset);
    size_t n = best->sh_size / sizeof(*sy);
    fl->syms = calloc(n ? n : 1, sizeof(*fl->syms));
    for (size_t i = 0; i < n; i++) {
        if (ELF64_ST_TYPE(sy[i].st_info) != STT_FUNC || !sy[i].st_value ||
            sy[i].st_name >= strs->sh_size)
            continue;
        fl->syms[fl->nsyms++] = (struct sym){ sy[i].st_value, sy[i].st_value + sy[i].st_size,
                                              b + strs->sh_offset + sy[i].st_name };
    }
    qsort(fl->syms, fl->nsyms, sizeof(*fl->syms), sym_cmp);
}

static const char *file_sym(struct file *fl, uint64_t off, char *buf, size_t len)
{
    if (!fl->loaded)
        file_load(fl);
    uint64_t va = off;
    for (int i = 0; i < fl->nph; i++)
        if (fl->ph[i].p_type == PT_LOAD && off >= fl->ph[i].p_offset &&
            off < fl->ph[i].p_offset + fl->ph[i].p_filesz)
            va = off - fl->ph[i].p_offset + fl->ph[i].p_vaddr;
    size_t lo = 0, hi = fl->nsyms;
    while (lo < hi) { /* last symbol starting at or below va */
        size_t mid = (lo + hi) / 2;
        if (fl->syms[mid].lo <= va)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo && va < fl->syms[lo - 1].hi + 16)
        return fl->syms[lo - 1].name;
    snprintf(buf, len, "0x%llx", (unsigned long long)va);
    return buf;
}

static struct sym *ksyms;
static size_t nksyms;

static const char *kernel_sym(uint64_t ip)
{
    if (!ksyms) {
        size_t cap = 0;
        FILE *f = fopen("/proc/kallsyms", "r");
        char line[512], name[256];
        unsigned long long a;
        char t;
        while (f && fgets(line, sizeof(line), f))
            if (sscanf(line, "%llx %c %255s", &a, &t, name) == 3 && a && (t == 't' || t == 'T')) {
                GROW(ksyms, nksyms, cap);
                ksyms[nksyms++] = (struct sym){ a, a, strdup(name) };
            }
        if (f)
            fclose(f);
        if (!ksyms)
            ksyms = calloc(1, sizeof(*ksyms));
        qsort(ksyms, nksyms, sizeof(*ksyms), sym_cmp);
    }
    size_t lo = 0, hi = nksyms;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (ksyms[mid].lo <= ip)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo ? ksyms[lo - 1].name : "?";
}

struct row { char *key; const char *mod; unsigned long n; };

static int row_cmp(const void *a, const void *b)
{
    const struct row *x = a, *y = b;
    return x->n < y->n ? 1 : x->n > y->n ? -1 : strcmp(x->key, y->key);
}

/* Add one to KEY's row (linear: a report has a few hundred keys). */
static void bump(struct row **rows, size_t *n, size_t *cap, const char *key, const char *mod)
{
    for (size_t i = 0; i < *n; i++)
        if (!strcmp((*rows)[i].key, key)) {
            (*rows)[i].n++;
            return;
        }
    GROW(*rows, *n, *cap);
    (*rows)[(*n)++] = (struct row){ strdup(key), mod, 1 };
}

void prof_report(struct prof *p, FILE *out, int top, const char *module)
{
    struct row *syms = NULL, *mods = NULL;
    size_t nsyms = 0, capsyms = 0, nmods = 0, capmods = 0;
    unsigned long total = 0;
    for (size_t i = 0; i < p->ns; i++) {
        const struct sample *s = &p->s[i];
        const char *mod = "[unknown]", *sym = "?";
        char buf[32], key[512];
        if (s->ip >= 0xffff800000000000ull) {
            mod = "[kernel]";
            sym = kernel_sym(s->ip);
        } else {
            for (size_t m = p->nmaps; m-- > 0;) { /* newest mapping wins */
                const struct map *mp = &p->maps[m];
                if (mp->pid != s->pid || s->ip < mp->addr || s->ip >= mp->addr + mp->len)
                    continue;
                struct file *fl = &p->files[mp->file];
                mod = fl->path;
                sym = fl->path[0] == '/' ? file_sym(fl, s->ip - mp->addr + mp->pgoff, buf, sizeof(buf))
                                         : fl->path;
                break;
            }
        }
        if (module && !strstr(mod, module))
            continue;
        const char *base = strrchr(mod, '/') ? strrchr(mod, '/') + 1 : mod;
        snprintf(key, sizeof(key), "%s  %s", sym, base);
        bump(&syms, &nsyms, &capsyms, key, base);
        bump(&mods, &nmods, &capmods, base, base);
        total++;
    }
    qsort(syms, nsyms, sizeof(*syms), row_cmp);
    qsort(mods, nmods, sizeof(*mods), row_cmp);
    fprintf(out, "pmuprof: %lu samples%s%s, %llu lost\n", total, module ? " in " : "",
            module ? module : "", p->lost);
    for (size_t i = 0; i < nsyms && (int)i < top; i++)
        fprintf(out, "  %6.2f%%  %s\n", 100.0 * (double)syms[i].n / (double)(total ? total : 1),
                syms[i].key);
    fprintf(out, "pmuprof: by module\n");
    for (size_t i = 0; i < nmods && i < 12; i++)
        fprintf(out, "  %6.2f%%  %s\n", 100.0 * (double)mods[i].n / (double)(total ? total : 1),
                mods[i].key);
}
