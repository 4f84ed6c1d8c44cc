/* SPDX-License-Identifier: MIT */
/* rendezvous_stats.c - fds the exporter served through the rendezvous
 * directory (see rendezvous.h): a file of its own, so that the statistics
 * link it without the rest of the transport. */
#include "handles/rendezvous.h"

static uint64_t served;

void byval_rendezvous_served(void)
{
    __atomic_fetch_add(&served, 1, __ATOMIC_RELAXED);
}

uint64_t byval_rendezvous_served_count(void)
{
    return __atomic_load_n(&served, __ATOMIC_RELAXED);
}
