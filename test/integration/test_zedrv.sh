#!/bin/bash
# SPDX-License-Identifier: MIT
# The Level Zero test driver behaves like Intel's compute-runtime where IPC
# clients and ipcbyval rely on it (its own checks, through the real loader:
# context handle reuse and destroy, close/free semantics, allocation ids,
# device-memory accounting across processes, queue groups, alignment,
# command-list reuse, a fork while another thread is inside the driver).
. "$(dirname "$0")/lib.sh"
CHECK="$BUILD/test/zedrv/zedrv_check"
need "$CHECK" "$ZEDRV"
out=$("$CHECK" 2>&1)
rc=$?
line=$(tail -1 <<<"$out")
if [ $rc -eq 0 ] && grep -qE '^zedrv_check: [0-9]+ passed, 0 failed$' <<<"$line"; then
    pass "Level Zero test driver self-check: ${line#zedrv_check: }"
else
    fail "Level Zero test driver self-check" "$(grep -i fail <<<"$out" | head -5 | tr '\n' ' ')"
fi
finish
