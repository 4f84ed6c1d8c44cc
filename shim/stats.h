/* SPDX-License-Identifier: MIT */
/* Moved to cache/stats.h: this forwarder goes once every include names it there. */
#include "cache/stats.h"
