/* SPDX-License-Identifier: MIT */
/*
 * ze_route.h - what the route files (ze_entry*.c) share: the loader's own
 * entry points resolved lazily, the next function on the symbol route,
 * and the DDI-table slot wrapping.
 */
#ifndef BYVAL_SHIM_ZE_ROUTE_H
#define BYVAL_SHIM_ZE_ROUTE_H

#include "shim/init.h"
#include "shim/ze.h"

#define ZE_EXPORT __attribute__((visibility("default")))

/* Resolve the loader's `name` once; NULL stays NULL until it appears
 * (functions newer than the loader stay NULL: see SYM_NEXT's `missing`). */
void *byval_ze_real_cached(void **slot, const char *name);

#define REAL(type, name)                                  \
    ({                                                    \
        static void *real_##name;                         \
        (type) byval_ze_real_cached(&real_##name, #name); \
    })

/*
 * The next function on the symbol route: the loader's own, called inside
 * byval_enter(). The loader jumps through its table, which holds our table
 * wrapper: inside the guard that wrapper passes straight on, so a call
 * that came in by symbol is handled, logged and counted once whether the
 * shim used the handle or passed it through. `missing` is what the call
 * returns when the loader lacks the function (a loader older than the
 * entry point: what the program would get from a driver without it).
 */
#define SYM_NEXT(fn, type, missing, params, args) \
    static ze_result_t sym_next_##fn params       \
    {                                             \
        type real = REAL(type, fn);               \
        if (!real)                                \
            return (missing);                     \
        byval_enter();                            \
        ze_result_t r = real args;                \
        byval_leave();                            \
        return r;                                 \
    }

/*
 * Put our wrapper into *slot, remembering what was there as its next.
 * Idempotent: a table that already holds our wrapper (a program calling
 * the getter again, or a getter re-entering) is left as it is. The first
 * next wins; every table the loader or a program asks for holds the same
 * entry (the driver's or the loader's intercept) in one process.
 */
void byval_ze_wrap_slot(void **slot, void **next, void *wrapper, const char *what);

#define WRAP_SLOT(table_field, next_var, wrapper) \
    byval_ze_wrap_slot((void **)&(table_field), (void **)&(next_var), (void *)(wrapper), #next_var)

#define NEXT_OF(var) __atomic_load_n(&(var), __ATOMIC_ACQUIRE)

#endif
