#!/bin/bash
# SPDX-License-Identifier: MIT
# The fault and abuse suite: exporters that exit or are killed, PID reuse,
# allocation and fd reuse, fd exhaustion, threads and fork, bad input,
# another uid. Each case prints its counts; all run under ipcbyval.
. "$(dirname "$0")/../integration/lib.sh"
F="$BUILD/test/faults/fault_main"
need "$LIB" "$ZEDRV" "$F"
L="$BUILD/test-logs"
# Sanitizer builds run the long loops at a tenth of the rounds.
[ -n "${SAN:-}" ] && export FAULT_SCALE=${FAULT_SCALE:-10}
# ASan's allocator can deadlock a forked child that mallocs while other
# threads did (libsanitizer, not ipcbyval): its fork child only exits.
[ "${SAN:-}" = asan ] && export FAULT_FORK_NO_MALLOC=1
# TSan's dlopen interceptor takes a lock of its own that a fork leaves held
# in the child, and ASan's allocator its own (see above): under either the
# CUDA fork test makes its first call before forking, so that the lazy
# initialisation's allocations (the import caches) are not raced by a fork
# that the sanitizer's runtime cannot survive. Plain builds race it all.
case "${SAN:-}" in asan | tsan) export FAULT_CUDA_WARM=1 ;; esac

run_case() {
    local name=$1; shift
    local log="$L/fault-$name.log"
    IPCBYVAL_STATS=1 timeout 300 "$@" >"$log" 2>&1
    local rc=$?
    grep -E '^(PASS|FAIL|SKIP): ' "$log"
    if ! grep -qE '^(PASS|FAIL|SKIP): ' "$log" || { [ $rc -ne 0 ] && ! grep -q '^FAIL: ' "$log"; }; then
        fail "fault $name" "exit $rc: $(grep -v '^\[ipcbyval' "$log" | tail -3 | tr '\n' ' ')"
    fi
}

for c in exit-before exit-after kill realloc fdreuse badinput threads; do
    run_case "$c" "$RUN" "$F" "$c"
done
# The dead exporter's cache entry was released when its pidfd said so.
grep -qE 'stats: exporter_exits +[1-9]' "$L/fault-exit-after.log" &&
    pass "exporter exit seen on its pidfd, cache entry released" ||
    fail "exporter exit seen" "$(grep -E 'exporter_exits|removals' "$L/fault-exit-after.log" | tr '\n' ' ')"
# A fork child's registry reached through its broker only (issue 22).
IPCBYVAL_TRANSPORT=socket run_case forkoffer "$RUN" "$F" forkoffer
if [ "${SAN:-}" != tsan ]; then
    run_case exporters100 "$RUN" "$F" exporters100
else # 100 processes starting TSan's runtime: 100 s (2 s under ASan)
    skip "100 live exporters under RLIMIT_NOFILE 256" "too slow under TSan; plain and ASan run it"
fi
IPCBYVAL_CACHE_SIZE=64 run_case fdlimit "$RUN" "$F" fdlimit
# Threads and fork on the CUDA path (the driver double): first wrapped
# calls on one thread, forks on another; then with the log blocking in a
# slow pipe, so a thread holds it across forks.
FC="$BUILD/test/faults/fault_cuda"
if [ -x "$FC" ] && [ -e "$BUILD/test/cudadrv/libcuda.so.1" ]; then
    CUDRV_PATH="$BUILD/test/cudadrv${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    LD_LIBRARY_PATH="$CUDRV_PATH" IPCBYVAL_LOG_FILE=/dev/null run_case cuda-fork "$RUN" "$FC" \
        $((100 / ${FAULT_SCALE:-1}))
    LD_LIBRARY_PATH="$CUDRV_PATH" run_case cuda-fork-slowlog "$RUN" "$FC" $((40 / ${FAULT_SCALE:-1})) slowlog
else
    skip "CUDA threads+fork" "built without the CUDA headers"
fi
grep -q 'hint: pidfd_getfd needs ptrace access' "$L/fault-fdlimit.log" 2>/dev/null || true

if id nobody >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    run_case perm "$RUN" "$F" perm
    grep -qE '(Operation not permitted|Permission denied) \(hint: ptrace access denied' "$L/fault-perm.log" &&
        pass "EPERM logged with the ptrace hint" ||
        fail "EPERM hint" "$(grep -i 'perm' "$L/fault-perm.log" | head -2 | tr '\n' ' ')"
else
    skip "another uid" "needs root to switch uids"
fi
if [ "$(id -u)" = 0 ] && command -v unshare >/dev/null; then
    run_case pidreuse unshare --pid --fork --mount-proc "$RUN" "$F" pidreuse
else
    skip "pid reuse" "needs root and unshare for a private pid namespace"
fi
finish
