/* SPDX-License-Identifier: MIT */
/* Moved to cache/config.h: this forwarder goes once every include names it there. */
#include "cache/config.h"
