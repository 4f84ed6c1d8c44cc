/* SPDX-License-Identifier: MIT */
/*
 * stripe.h - which counter stripe this thread writes. Counters bumped on
 * every hit (the cache's hits, the shim's statistics) are split into
 * BYVAL_STRIPES cache-line stripes, summed when read: a thread always
 * bumps its own stripe with a plain load and store, no lock prefix and no
 * line shared with other CPUs. Threads beyond BYVAL_STRIPES share stripes
 * and may then lose a count (statistics, not state).
 */
#ifndef BYVAL_CACHE_STRIPE_H
#define BYVAL_CACHE_STRIPE_H

#include <stdint.h>

#define BYVAL_STRIPES 32

extern __thread unsigned byval_tls_stripe __attribute__((tls_model("initial-exec")));
unsigned byval_stripe_assign(void);

/* 0 .. BYVAL_STRIPES - 1, fixed for the thread. */
static inline unsigned byval_stripe(void)
{
    unsigned s = byval_tls_stripe;
    return s ? s - 1 : byval_stripe_assign();
}

static inline void byval_stripe_add(uint64_t *counter, uint64_t v)
{
    __atomic_store_n(counter, __atomic_load_n(counter, __ATOMIC_RELAXED) + v, __ATOMIC_RELAXED);
}

static inline void byval_stripe_bump(uint64_t *counter)
{
    byval_stripe_add(counter, 1);
}

#endif
