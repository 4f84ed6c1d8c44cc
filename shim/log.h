/* SPDX-License-Identifier: MIT */
/* Moved to cache/log.h: this forwarder goes once every include names it there. */
#include "cache/log.h"
