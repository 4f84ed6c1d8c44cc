/* SPDX-License-Identifier: MIT */
/*
 * ze_entry.c - every route into the Level Zero calls of symbols.h: the
 * exported symbols (direct calls; dlsym of the loader, dlsym.c), the DDI
 * tables (the loader fills its own dispatch through its exported
 * zeGet*ProcAddrTable, and programs may call them too) and what
 * zeDriverGetExtensionFunctionAddress hands out. A symbol wrapper calls
 * the loader inside byval_enter(), so our table wrapper on the loader's
 * path passes through: a call is handled once whatever its route.
 */
#include <dlfcn.h>
#include <string.h>

#include "cache/init.h"
#include "cache/log.h"
#include "shim/symbols.h"
#include "shim/ze.h"

#define ZE_EXPORT __attribute__((visibility("default")))
#define ARGS(...) __VA_ARGS__
#define CALL(macro, ...) macro(__VA_ARGS__)

/* ipcbyval never links the loader: a process without Level Zero is untouched. */
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

/* The loader's `name`, resolved once; NULL until it appears (an entry
 * point newer than the loader: the row's error code). */
static void *real_cached(void **slot, const char *name)
{
    void *p = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
    if (!p) {
        p = byval_ze_sym(name);
        __atomic_store_n(slot, p, __ATOMIC_RELEASE);
    }
    return p;
}

#define REAL(type, name)                         \
    ({                                           \
        static void *real_##name;                \
        (type) real_cached(&real_##name, #name); \
    })

/*
 * Put our wrapper into *slot, what was there becoming its next. Idempotent
 * (a getter called again, or re-entered, finds our wrapper). The first
 * next wins: every table and the extension getter of one process hold the
 * same entry (the driver's or the loader's intercept).
 */
static void wrap_slot(void **slot, void **next, void *wrapper, const char *what)
{
    void *cur = *slot;
    if (!cur || cur == wrapper)
        return;
    void *expected = NULL;
    if (!__atomic_compare_exchange_n(next, &expected, cur, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) &&
        expected != cur)
        BYVAL_LOG_DEBUG("%s: a second table holds %p (first: %p); calls go to the first", what, cur,
                        expected);
    *slot = wrapper;
}

static ze_result_t ext_address(ze_pfnDriverGetExtensionFunctionAddress_t next,
                               ze_driver_handle_t drv, const char *name, void **pfn);

/* Each row's table and extension wrapper: its handler with the entry it replaced. */
#define TABLE_WRAPPER_(name, type, missing, handler, ext, params, args, ddi)        \
    static type next_##name;                                                        \
    static ze_result_t tw_##name params                                             \
    {                                                                               \
        return handler(__atomic_load_n(&next_##name, __ATOMIC_ACQUIRE), ARGS args); \
    }
BYVAL_ZE_SYMBOLS(TABLE_WRAPPER_)
BYVAL_ZE_EXTENSIONS(TABLE_WRAPPER_)

/* Each row's exported symbol: its handler with the loader's own function. */
#define SYMBOL_(name, type, missing, handler, ext, params, args, ddi) \
    static ze_result_t sym_next_##name params                         \
    {                                                                 \
        type real = REAL(type, name);                                 \
        if (!real)                                                    \
            return ZE_RESULT_ERROR_##missing;                         \
        byval_enter();                                                \
        ze_result_t r = real args;                                    \
        byval_leave();                                                \
        return r;                                                     \
    }                                                                 \
    ZE_EXPORT ze_result_t name params                                 \
    {                                                                 \
        return handler(sym_next_##name, ARGS args);                   \
    }
BYVAL_ZE_SYMBOLS(SYMBOL_)

/* Older loaders forward any name to the driver: the way to reach entry
 * points newer than the loader, and Intel's zex extensions. */
static ze_result_t ext_address(ze_pfnDriverGetExtensionFunctionAddress_t next,
                               ze_driver_handle_t drv, const char *name, void **pfn)
{
    if (!next)
        return ZE_RESULT_ERROR_UNINITIALIZED;
    ze_result_t r = next(drv, name, pfn);
    if (r != ZE_RESULT_SUCCESS || !name || !pfn || !*pfn || byval_in_shim() || !byval_init())
        return r;
#define EXT_(row, type, missing, handler, ext, params, args, ddi) \
    if (ext && strcmp(name, #row) == 0)                           \
        wrap_slot(pfn, (void **)&next_##row, (void *)tw_##row, #row);
    BYVAL_ZE_SYMBOLS(EXT_)
    BYVAL_ZE_EXTENSIONS(EXT_)
    return r;
}

#define TABLE_ID_(getter, layout, id) DDI_##id,
enum { BYVAL_ZE_TABLES(TABLE_ID_) };

/* The rows of DDI table `which` present in `version` get our wrappers. */
static ze_result_t wrap_table(int which, ze_api_version_t version, void *table, ze_result_t r)
{
    if (r != ZE_RESULT_SUCCESS || !table || !byval_init())
        return r;
#define SLOT_(name, id, layout, field, since)                                                   \
    if (which == DDI_##id && version >= (since))                                                \
        wrap_slot((void **)&((layout *)table)->field, (void **)&next_##name, (void *)tw_##name, \
                  #name);
#define WRAP_(name, type, missing, handler, ext, params, args, ddi) CALL(SLOT_, name, ARGS ddi)
    BYVAL_ZE_SYMBOLS(WRAP_)
    return r;
}

#define GETTER_(getter, layout, id)                                        \
    ZE_EXPORT ze_result_t getter(ze_api_version_t version, layout *table)  \
    {                                                                      \
        ze_result_t (*real)(ze_api_version_t, layout *) =                  \
            REAL(ze_result_t(*)(ze_api_version_t, layout *), getter);      \
        if (!real)                                                         \
            return ZE_RESULT_ERROR_UNINITIALIZED;                          \
        return wrap_table(DDI_##id, version, table, real(version, table)); \
    }
BYVAL_ZE_TABLES(GETTER_)
