/* SPDX-License-Identifier: MIT */
/*
 * cu_manifest.h - the layout of a VMM export manifest lives in
 * handles/manifest.h, beside its reader (pure, fuzzed); the CUDA export
 * (cu_export.c) and import (cu_import.c) use it from there.
 */
#ifndef BYVAL_SHIM_CU_MANIFEST_H
#define BYVAL_SHIM_CU_MANIFEST_H

#include "handles/manifest.h"

#endif
