#!/bin/bash
# SPDX-License-Identifier: MIT
# demo.sh - the README's first command (make demo): one unmodified 2-rank
# Open MPI job that sends Level Zero IPC handles with MPI_Sendrecv, run on
# the Level Zero test driver through the real loader, first without
# ipcbyval (the peer's open fails, as on a real Intel GPU), then with it.
#   scripts/demo.sh --installed   the same with the installed ipcbyval-run
#                                 and library (make install, the .deb)
set -u
. "$(dirname "$0")/../test/integration/lib.sh"
APP="$APPS/ze_mpi_exchange_ompi"
if [ "${1:-}" = --installed ]; then
    unset IPCBYVAL_LIB
    RUN=$(command -v ipcbyval-run) || { echo "demo: no ipcbyval-run on PATH" >&2; exit 1; }
    LIB=$("$RUN" sh -c 'echo "$LD_PRELOAD"' | tr ':' '\n' | grep libipcbyval)
    # mpirun's -x of an unset variable warns: pass the driver's twice.
    OMPI=("${OMPI[@]/IPCBYVAL_LIB/ZE_ENABLE_ALT_DRIVERS}")
    echo "== installed: $RUN, $LIB"
fi
for f in "$LIB" "$ZEDRV" "$APP"; do
    [ -e "$f" ] || { echo "demo: $f is missing (run make demo from the top directory)" >&2; exit 1; }
done
[ -n "$MPIRUN_OMPI" ] || { echo "demo: mpirun.openmpi not found (scripts/deps.sh installs it)" >&2; exit 1; }
ARGS=(--allocs 4 --size 1048576 --iters 5)

echo "== 1. without ipcbyval: mpirun -np 2 ${APP##*/} ${ARGS[*]}"
"${OMPI[@]}" -np 2 "$APP" "${ARGS[@]}" >"$BUILD/demo-without.log" 2>&1
rc1=$?
grep -E '^rank' "$BUILD/demo-without.log" | sort -u | head -4
echo
echo "== 2. with ipcbyval: mpirun -np 2 ipcbyval-run --stats ${APP##*/} ${ARGS[*]}"
"${OMPI[@]}" -np 2 "$RUN" --stats "$APP" "${ARGS[@]}" >"$BUILD/demo-with.log" 2>&1
rc2=$?
grep -E '^rank' "$BUILD/demo-with.log"
echo
# The job's table, printed by rank 0's ipcbyval-run once both ranks ended.
awk '/^ipcbyval statistics: /     { t = 1 }
     t && !/^(ipcbyval statistics: |counter |[a-z0-9_.]+ +[0-9]|0 in every process:|  )/ { t = 0 }
     t { print "  " $0 }' "$BUILD/demo-with.log"
echo
printf '%-22s %-8s %s\n' "run" "exit" "result"
printf '%-22s %-8s %s\n' "without ipcbyval" "$rc1" "$([ $rc1 -ne 0 ] && echo 'open failed (expected: fd is process-local)' || echo 'UNEXPECTED success')"
printf '%-22s %-8s %s\n' "with ipcbyval" "$rc2" "$([ $rc2 -eq 0 ] && echo 'data transferred and verified' || echo 'FAILED')"
echo "(logs: $BUILD/demo-without.log, $BUILD/demo-with.log)"
[ $rc1 -ne 0 ] && [ $rc2 -eq 0 ]
