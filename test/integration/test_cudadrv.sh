#!/bin/bash
# SPDX-License-Identifier: MIT
# The CUDA test double behaves like the real driver in what the CPU tests
# rely on (its own checks: handle types, versions, IPC semantics, context
# and memory lifetimes, device-memory accounting across processes).
. "$(dirname "$0")/lib.sh"
CHECK="$BUILD/test/cudadrv/cudadrv_check"
need "$CHECK"
out=$("$CHECK" 2>&1)
rc=$?
line=$(tail -1 <<<"$out")
if [ $rc -eq 0 ] && grep -qE '^cudadrv_check: [0-9]+ passed, 0 failed$' <<<"$line"; then
    pass "CUDA double self-check: ${line#cudadrv_check: }"
else
    fail "CUDA double self-check" "$(grep -i fail <<<"$out" | head -5 | tr '\n' ' ')"
fi
finish
