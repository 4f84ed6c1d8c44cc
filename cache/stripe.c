/* SPDX-License-Identifier: MIT */
/* stripe.c - round-robin stripe for each thread's counters (stripe.h). */
#include "cache/stripe.h"

__thread unsigned byval_tls_stripe __attribute__((tls_model("initial-exec")));
static unsigned stripe_next;

unsigned byval_stripe_assign(void)
{
    unsigned s = __atomic_fetch_add(&stripe_next, 1, __ATOMIC_RELAXED) % BYVAL_STRIPES;
    byval_tls_stripe = s + 1;
    return s;
}
