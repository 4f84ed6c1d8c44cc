#!/bin/bash
# SPDX-License-Identifier: MIT
# The import-lifecycle stress workload (test/stress/stress.h), natively as
# the baseline (every counter 0 there too), then under ipcbyval: Level
# Zero on the test driver with both context-destroy semantics (the
# default and compute-runtime's keep), CUDA legacy and CUDA VMM on the
# driver double. STRESS_SECONDS per run (make torture: 90, STRESS_SETTLE 5).
. "$(dirname "$0")/../integration/lib.sh"
SZ="$BUILD/test/stress/stress_ze"
SC="$BUILD/test/stress/stress_cu"
need "$LIB" "$ZEDRV" "$SZ"
S=${STRESS_SECONDS:-2}
# How long mappings may take to go after the exporter freed everything:
# the issue's bound, 5 s. (At 1 s the merged tree left 15-55 mappings in
# 2 of 5 runs on a loaded 2-core machine, every one released by 5 s: a
# slow release under this load, not a lost one; see the closing note of
# issue 22.)
SETTLE=${STRESS_SETTLE:-5}
# make torture sets 0: there a mapping that outlasts the settle time fails.
export STRESS_HELD_KNOWN=${STRESS_HELD_KNOWN:-1}
L="$BUILD/test-logs"
# TSan: children of a multi-threaded process are what is tested.
[ "${SAN:-}" = tsan ] && export TSAN_OPTIONS="${TSAN_OPTIONS:-}:die_after_fork=0"

run() {
    local name=$1; shift
    local log="$L/stress-$name.log"
    STRESS_LOG="$L/stress-$name.procs.log" timeout $((${S%.*} * 3 + 120)) "$@" --seconds "$S" --settle "$SETTLE" >"$log" 2>&1
    local rc=$?
    if grep -qE '^(PASS|FAIL): ' "$log"; then
        grep -E '^(PASS|FAIL): ' "$log"
        grep -E '^KNOWN: ' "$log" | sed "s/^KNOWN: /SKIP: stress $name, release after free: /; s/\$/ (a known open defect of issue 22; make torture fails on it)/"
        [ $rc -eq 0 ] || grep -q '^FAIL: ' "$log" || fail "stress $name" "exit $rc"
    else
        fail "stress $name" "exit $rc: $(tail -3 "$log" | tr '\n' ' ')"
    fi
}

run ze-native "$SZ" ze-native --native
run ze "$RUN" "$SZ" ze
ZEDRV_CONTEXT_DESTROY=keep run ze-keep-native "$SZ" ze-keep-native --native
ZEDRV_CONTEXT_DESTROY=keep run ze-keep "$RUN" "$SZ" ze-keep
if [ -x "$SC" ]; then
    export LD_LIBRARY_PATH="$BUILD/test/cudadrv${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    run cuda-legacy-native "$SC" cuda-legacy-native --native
    run cuda-legacy "$RUN" "$SC" cuda-legacy
    STRESS_CU_VMM=1 run cuda-vmm "$RUN" "$SC" cuda-vmm
else
    skip "stress cuda" "built without the CUDA headers"
fi
finish
