/* SPDX-License-Identifier: MIT */
/*
 * config.c - the one table of IPCBYVAL_* variables, its parser and printer,
 * and IPCBYVAL_SET_PTRACER's effect. The man page's ENVIRONMENT section and
 * `ipcbyval-run --print-config` are checked against the table (test_config.sh).
 */
#include "cache/config.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "cache/log.h"

byval_config_t byval_cfg;

enum cfg_type { CFG_BOOL, CFG_SIZE, CFG_BYTES, CFG_LEVEL, CFG_STRING, CFG_TRANSPORT, CFG_GID };

typedef struct cfg_entry {
    const char *name, *defval;
    enum cfg_type type;
    size_t offset, size; /* of the field in byval_config_t */
    const char *doc;
} cfg_entry_t;

#define CFG_AT_(f) offsetof(byval_config_t, f), sizeof(byval_cfg.f)
#define CFG_(name, def, type, f) "IPCBYVAL_" #name, def, CFG_##type, CFG_AT_(f)

static const cfg_entry_t cfg_table[] = {
    {CFG_(ENABLE, "1", BOOL, enable), "0 makes every wrapper a pure pass-through to the driver"},
    {CFG_(LOG, "warn", LEVEL, log_level), "log level: none, error, warn, info, debug (or 0-4)"},
    {CFG_(LOG_FILE, "", STRING, log_file),
     "append log lines to this file instead of stderr (%p expands to the pid)"},
    {CFG_(CACHE_SIZE, "1024", SIZE, cache_size),
     "import cache entries (mappings kept open for reuse), >= 1"},
    {CFG_(CACHE_BYTES, "1G", BYTES, cache_bytes),
     "bytes of closed mappings the import caches may keep (K/M/G/T suffixes; 0: none)"},
    {CFG_(EXPORT_CACHE_SIZE, "4096", SIZE, export_cache_size),
     "export cache entries (one exported fd per live allocation), >= 1"},
    {CFG_(STATS, "0", BOOL, stats), "print counters and cache statistics to the log at exit"},
    {CFG_(STATS_DIR, "", STRING, stats_dir),
     "write the counters to DIR/HOST.PID.stats at exit, for one table per job "
     "(ipcbyval-run --stats sets it; ipcbyval-run --report DIR)"},
    {CFG_(ZE, "1", BOOL, ze), "handle Level Zero IPC (0: pass Level Zero calls through)"},
    {CFG_(CUDA, "1", BOOL, cuda), "handle CUDA IPC (0: pass CUDA calls through)"},
    {CFG_(CUDA_LEGACY_CACHE, "1", BOOL, cuda_legacy_cache),
     "cache opens of legacy cuMemAlloc handles (0: pure pass-through)"},
    {CFG_(TRANSPORT, "auto", TRANSPORT, transport),
     "how importers get the exporter's fd: pidfd, socket, auto (pidfd, else socket)"},
    {CFG_(SET_PTRACER, "0", BOOL, set_ptracer),
     "exporters allow any process to ptrace them (Yama ptrace_scope 1); off by default"},
    {CFG_(RENDEZVOUS_DIR, "", STRING, rendezvous_dir),
     "a directory both sides reach (a volume shared by two pods or containers): exporters "
     "also listen there and importers in other pid/network namespaces connect there"},
    {CFG_(RENDEZVOUS_GID, "", GID, rendezvous_gid),
     "a numeric group whose members (another uid) are served through the rendezvous "
     "directory, which that group may own; empty: our uid only"},
};

#define CFG_COUNT (sizeof(cfg_table) / sizeof(cfg_table[0]))

/* What each type accepts, for the invalid-value warning. */
static const char *const type_hint[] = {
    [CFG_BOOL] = "y/yes/on/true/1 or n/no/off/false/0",
    [CFG_SIZE] = "an integer from 1 to 4294967296",
    [CFG_BYTES] = "a byte count, with an optional K, M, G or T suffix",
    [CFG_LEVEL] = "none, error, warn, info, debug or 0-4",
    [CFG_STRING] = "a path of at most 255 bytes",
    [CFG_TRANSPORT] = "auto, pidfd or socket",
    [CFG_GID] = "a numeric group id, or empty",
};

/* Index 5-9 are the levels' digits and the true words. */
static const char *const level_names[] = {"none", "error", "warn", "info", "debug", "0",
                                          "1",    "2",     "3",    "4",    NULL};
static const char *const transport_names[] = {"auto", "pidfd", "socket", NULL};
/* y/yes/on/true/1 and n/no/off/false/0, as UCX accepts. */
static const char *const bool_names[] = {"0", "n",   "no", "off",  "false", "1",
                                         "y", "yes", "on", "true", NULL};
static const char *const *const enum_names[] = {
    [CFG_BOOL] = bool_names, [CFG_LEVEL] = level_names, [CFG_TRANSPORT] = transport_names};

static int parse_enum(const char *s, const char *const *names)
{
    for (int i = 0; names[i]; i++)
        if (strcasecmp(s, names[i]) == 0)
            return i;
    return -1;
}

/* A decimal number, with a binary suffix K, M, G or T when units. */
static int parse_u64(const char *s, int units, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    static const char suffix[] = "KMGT";
    const char *u = units && *end ? strchr(suffix, toupper((unsigned char)*end)) : NULL;
    unsigned shift = u ? 10u * (unsigned)(u - suffix + 1) : 0;
    if (errno || end == s || (*end && (!u || end[1] != '\0')) || v > (UINT64_MAX >> shift))
        return -1;
    *out = (uint64_t)v << shift;
    return 0;
}

/* Every field but a string is an int or 8 bytes (size_t, uint64_t, long). */
static int parse_value(byval_config_t *c, const cfg_entry_t *e, const char *s)
{
    void *field = (char *)c + e->offset;
    uint64_t v = UINT64_MAX; /* an empty group id: none (-1) */
    int i = -1, ok = 0;
    switch (e->type) {
    case CFG_BOOL:
    case CFG_LEVEL:
    case CFG_TRANSPORT:
        ok = (i = parse_enum(s, enum_names[e->type])) >= 0;
        v = e->type == CFG_BOOL ? i >= 5 : (uint64_t)(i % 5);
        break;
    case CFG_SIZE: ok = *s != '-' && parse_u64(s, 0, &v) == 0 && v >= 1 && v <= (1ULL << 32); break;
    case CFG_BYTES: ok = isdigit((unsigned char)*s) && parse_u64(s, 1, &v) == 0; break;
    case CFG_GID:
        ok = !*s || (isdigit((unsigned char)*s) && parse_u64(s, 0, &v) == 0 && v < UINT32_MAX);
        break;
    case CFG_STRING: ok = strlen(s) < e->size; break;
    }
    if (!ok)
        return -1;
    if (e->type == CFG_STRING)
        strcpy(field, s);
    else if (e->size == sizeof(int))
        *(int *)field = (int)v;
    else
        memcpy(field, &v, sizeof(v));
    return 0;
}

static void format_value(const byval_config_t *c, const cfg_entry_t *e, char *buf, size_t len)
{
    const char *field = (const char *)c + e->offset;
    uint64_t v = 0;
    if (e->size == sizeof(int))
        v = (uint64_t)((const int *)field)[0];
    else if (e->type != CFG_STRING)
        memcpy(&v, field, sizeof(v));
    if (e->type == CFG_STRING || e->type == CFG_LEVEL || e->type == CFG_TRANSPORT)
        snprintf(buf, len, "%s", e->type == CFG_STRING ? field : enum_names[e->type][v]);
    else if (e->type == CFG_GID && (int64_t)v < 0) /* -1: empty */
        buf[0] = '\0';
    else
        snprintf(buf, len, "%llu", (unsigned long long)v);
}

/* Levenshtein distance, to suggest a fix for a misspelt variable. */
static size_t edit_distance(const char *a, size_t la, const char *b)
{
    size_t lb = strlen(b), d[64]; /* d[j]: distance of a[0..i) and b[0..j) */
    if (la >= 63 || lb >= 63)
        return SIZE_MAX;
    for (size_t j = 0; j <= lb; j++)
        d[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = d[0]++;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = d[j], sub = diag + (a[i - 1] != b[j - 1]);
            size_t step = (up < d[j - 1] ? up : d[j - 1]) + 1; /* a deletion or an insertion */
            d[j] = step < sub ? step : sub;
            diag = up;
        }
    }
    return d[lb];
}

static int name_is(const char *want, const char *name, size_t len)
{
    return strlen(want) == len && strncmp(want, name, len) == 0;
}

static const cfg_entry_t *find_entry(const char *name, size_t len)
{
    for (size_t i = 0; i < CFG_COUNT; i++)
        if (name_is(cfg_table[i].name, name, len))
            return &cfg_table[i];
    return NULL;
}

/* Read by ipcbyval-run, scripts/deps.sh or at load time, not by the table. */
static const char *const launcher_names[] = {
    "IPCBYVAL_LIB",         "IPCBYVAL_PRINT_CONFIG", "IPCBYVAL_APT_WAIT", "IPCBYVAL_DOCTOR",
    "IPCBYVAL_RUN_CHECKED", "IPCBYVAL_ENVMOD_ROOT",  "IPCBYVAL_HELPER"};

/* Warnings about the environment, counted: at warn level, or at debug level
 * when ipcbyval-run checked it once for the whole job (IPCBYVAL_RUN_CHECKED=1),
 * so that N ranks do not print N copies. */
static int cfg_problems;

static int problem_level(void)
{
    cfg_problems++;
    const char *c = getenv("IPCBYVAL_RUN_CHECKED");
    return c && strcmp(c, "1") == 0 ? BYVAL_LOG_LVL_DEBUG : BYVAL_LOG_LVL_WARN;
}

static void warn_unknown(const char *var, size_t len)
{
    if (find_entry(var, len))
        return;
    for (size_t i = 0; i < sizeof(launcher_names) / sizeof(launcher_names[0]); i++)
        if (name_is(launcher_names[i], var, len))
            return;
    /* One typo in a short name (ZEE for ZE), two in a longer one (TRANSPROT). */
    const char *best = NULL;
    size_t best_d = SIZE_MAX;
    for (size_t i = 0; i < CFG_COUNT; i++) {
        size_t d = edit_distance(var, len, cfg_table[i].name);
        if (d < best_d && d <= (strlen(cfg_table[i].name) - 9 >= 6 ? 2u : 1u)) {
            best_d = d;
            best = cfg_table[i].name;
        }
    }
    int lvl = problem_level();
    BYVAL_LOG_(lvl, "unknown variable %.*s (%s%s%s)", (int)len, var, best ? "did you mean " : "",
               best ? best : "ipcbyval-run --print-config lists them", best ? "?" : "");
}

int byval_config_load(void)
{
    extern char **environ;
    cfg_problems = 0;
    /* The log level first, so that the warnings below obey it. */
    const char *level = getenv("IPCBYVAL_LOG");
    if (level && parse_value(&byval_cfg, find_entry("IPCBYVAL_LOG", 12), level) == 0)
        byval_log_level = byval_cfg.log_level;
    for (size_t i = 0; i < CFG_COUNT; i++) {
        const cfg_entry_t *e = &cfg_table[i];
        const char *val = getenv(e->name);
        (void)parse_value(&byval_cfg, e, e->defval);
        if (val && parse_value(&byval_cfg, e, val) != 0) { /* the default stays */
            int lvl = problem_level();
            BYVAL_LOG_(lvl, "invalid value %s='%s' (expected %s); using the default '%s'", e->name,
                       val, type_hint[e->type], e->defval);
        }
    }
    byval_log_level = byval_cfg.log_level;
    for (char **env = environ; env && *env; env++) {
        const char *eq = strchr(*env, '=');
        if (strncmp(*env, "IPCBYVAL_", 9) == 0 && eq)
            warn_unknown(*env, (size_t)(eq - *env));
    }
    return cfg_problems;
}

void byval_config_print(FILE *out)
{
    char val[300];
    for (size_t i = 0; i < CFG_COUNT; i++) {
        format_value(&byval_cfg, &cfg_table[i], val, sizeof(val));
        fprintf(out, "%s=%s\n    default: %s\n    %s\n", cfg_table[i].name, val,
                cfg_table[i].defval[0] ? cfg_table[i].defval : "(empty)", cfg_table[i].doc);
    }
    fflush(out);
}

void byval_config_changed(char *buf, size_t len)
{
    char val[300], def[300];
    byval_config_t dflt = {0};
    size_t n = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < CFG_COUNT && n < len; i++) {
        const cfg_entry_t *e = &cfg_table[i];
        (void)parse_value(&dflt, e, e->defval);
        format_value(&dflt, e, def, sizeof(def));
        format_value(&byval_cfg, e, val, sizeof(val));
        if (strcmp(val, def) != 0) /* n >= len ends it */
            n += (size_t)snprintf(buf + n, len - n, "%s%s=%s", n ? " " : "", e->name, val);
    }
}

/* Under Yama ptrace_scope 1 a process may only pidfd_getfd its descendants:
 * MPI peers (siblings) are refused. PR_SET_PTRACER_ANY lifts that for this
 * process, which any process of the uid may then ptrace (read its memory,
 * not only the exported fds): Intel's driver does it at every context
 * creation; ipcbyval only when asked. */
void byval_ptracer_allow(void)
{
    static pid_t done_pid; /* per process: a forked child sets its own */
    if (!byval_cfg.set_ptracer)
        return;
    pid_t pid = getpid();
    /* EINVAL means no Yama: nothing to lift. */
    if (__atomic_exchange_n(&done_pid, pid, __ATOMIC_RELAXED) != pid &&
        prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0) == 0)
        BYVAL_LOG_INFO("IPCBYVAL_SET_PTRACER: any process may now ptrace pid %d", (int)pid);
}
