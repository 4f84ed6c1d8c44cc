#!/bin/bash
# SPDX-License-Identifier: MIT
# The import-lifecycle stress workload (test/stress/stress.h), natively as
# the baseline (every counter 0 there too), then under ipcbyval: Level
# Zero on the test driver with both context-destroy semantics (the
# default and compute-runtime's keep), CUDA legacy and CUDA VMM on the
# driver double. STRESS_SECONDS per run (make torture: 90).
. "$(dirname "$0")/../integration/lib.sh"
SZ="$BUILD/test/stress/stress_ze"
SC="$BUILD/test/stress/stress_cu"
need "$LIB" "$ZEDRV" "$SZ"
S=${STRESS_SECONDS:-2}
# How long mappings may take to go after the exporter freed everything
# (STRESS_SETTLE): a release follows a free within milliseconds (the
# watcher's rate limit is 5 ms), so 1 s holds under any sanitizer and
# load; the issue's bound is 5 s. (Mappings that outlasted it, released
# only at the exporter's exit, were free's wake-ups lost to another
# importer of the pipe: handles/registry_watch.c, test_registry_wake.)
SETTLE=${STRESS_SETTLE:-1}
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
        [ $rc -eq 0 ] || grep -q '^FAIL: ' "$log" || fail "stress $name" "exit $rc"
    else
        fail "stress $name" "exit $rc: $(tail -3 "$log" | tr '\n' ' ')"
    fi
}

# The workload checks each allocation's bytes after frees and
# re-allocations: in a USM pool an importer's mapping is the whole pool,
# whose freed chunks are reused (natively too), so the driver's pools are off.
export EnableDeviceUsmAllocationPool=0 EnableHostUsmAllocationPool=0
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
