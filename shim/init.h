/* SPDX-License-Identifier: MIT */
/* Moved to cache/init.h: this forwarder goes once every include names it there. */
#include "cache/init.h"
