#!/bin/bash
# SPDX-License-Identifier: MIT
# The README's demo by hand, DEMO_RUNS times each under Open MPI and MPICH
# (make torture: 100) at the default log level: it must pass and ipcbyval
# must print nothing (a release racing the program's zeContextDestroy
# used to print "zeMemCloseIpcHandle(...) on release returned ..." in a
# few percent of runs).
. "$(dirname "$0")/../integration/lib.sh"
N=${DEMO_RUNS:-10}
L="$BUILD/test-logs"
unset IPCBYVAL_LOG IPCBYVAL_LOG_FILE IPCBYVAL_STATS

loop() {
    local name=$1 prog=$2; shift 2
    local log="$L/demo-quiet-$name.log" bad=0 noisy=0
    need "$prog"
    for i in $(seq "$N"); do
        if ! timeout 120 "$@" "$RUN" "$prog" --allocs 4 >"$log.$i" 2>&1 || ! grep -q OK "$log.$i"; then
            bad=$((bad + 1)); cp "$log.$i" "$log"
        elif grep -q '\[ipcbyval' "$log.$i"; then
            noisy=$((noisy + 1)); cp "$log.$i" "$log"
        fi
        rm -f "$log.$i"
    done
    if [ $bad -eq 0 ] && [ $noisy -eq 0 ]; then
        pass "demo by hand, $name, $N runs: nothing printed by ipcbyval"
    else
        fail "demo by hand, $name" "$bad of $N failed, $noisy printed by ipcbyval: $(grep -m2 -E 'ipcbyval|rank' "$log" | tr '\n' ' ')"
    fi
}

[ -n "$MPIRUN_OMPI" ] && loop ompi "$APPS/ze_mpi_exchange_ompi" "${OMPI[@]}" -np 2 ||
    skip "demo by hand, Open MPI" "mpirun.openmpi not installed"
[ -n "$MPIEXEC_MPICH" ] && loop mpich "$APPS/ze_mpi_exchange_mpich" "${MPICH[@]}" -n 2 ||
    skip "demo by hand, MPICH" "mpiexec.mpich not installed"
finish
