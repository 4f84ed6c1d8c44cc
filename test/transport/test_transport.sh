#!/bin/bash
# SPDX-License-Identifier: MIT
# The socket fallback: forced (IPCBYVAL_TRANSPORT=socket), chosen by auto
# where pidfd_getfd is denied (a seccomp filter standing in for Yama or a
# container profile), refused to another uid; and the MPI demo over it.
. "$(dirname "$0")/../integration/lib.sh"
DENY="$BUILD/test/transport/deny_getfd"
need "$LIB" "$ZEDRV" "$APPS/ze_pair" "$DENY"
L="$BUILD/test-logs"
A=(--allocs 3 --iters 2)
"$DENY" true || { skip transport "seccomp filters not available here"; exit 77; }

IPCBYVAL_TRANSPORT=pidfd expect_fail "pidfd_getfd denied, transport=pidfd: refused with the hint" \
    "$L/tr-pidfd.log" 'Operation not permitted \(hint' "$DENY" "$RUN" "$APPS/ze_pair" "${A[@]}"
IPCBYVAL_TRANSPORT=auto IPCBYVAL_LOG=info expect_ok "pidfd_getfd denied, transport=auto: socket fallback" \
    "$L/tr-auto.log" "$DENY" "$RUN" "$APPS/ze_pair" "${A[@]}"
grep -q 'using the socket fallback for this exporter' "$L/tr-auto.log" &&
    pass "auto says once why it switched" || fail "auto switch logged" "$(tail -3 "$L/tr-auto.log")"
n=$(grep -c 'using the socket fallback' "$L/tr-auto.log")
[ "$n" -eq 1 ] && pass "auto remembers the exporter (one switch for $((3 * 2)) opens)" ||
    fail "auto remembers" "$n switches logged"
IPCBYVAL_TRANSPORT=socket expect_ok "transport=socket under the denial" "$L/tr-socket.log" \
    "$DENY" "$RUN" "$APPS/ze_pair" "${A[@]}"
IPCBYVAL_TRANSPORT=auto expect_ok "event pools, pidfd_getfd denied, transport=auto: socket fallback" \
    "$L/tr-pool-auto.log" "$DENY" "$RUN" "$APPS/ze_pair" --allocs 0 --events --iters 3

if [ -n "$MPIRUN_OMPI" ] && [ -x "$APPS/ze_mpi_exchange_ompi" ]; then
    IPCBYVAL_TRANSPORT=socket expect_ok "MPI demo (2 ranks) with IPCBYVAL_TRANSPORT=socket" \
        "$L/tr-mpi.log" "${OMPI[@]}" -np 2 -x IPCBYVAL_TRANSPORT "$RUN" \
        "$APPS/ze_mpi_exchange_ompi" --allocs 4 --size 65536 --iters 3
else
    skip "MPI over the socket" "Open MPI missing"
fi

CU="$BUILD/test/cudadrv"
if [ -x "$CU/cu_pair" ] && nm -D --defined-only "$LIB" | grep -qw cuIpcGetMemHandle; then
    LD_LIBRARY_PATH="$CU" expect_ok "CUDA VMM (3 chunks) over the socket fallback" "$L/tr-cuda.log" \
        "$DENY" "$RUN" "$CU/cu_pair" --mem vmm-multi --route cudart --iters 3
else
    skip "CUDA over the socket" "no CUDA double"
fi

F="$BUILD/test/faults/fault_main"
if [ "$(id -u)" = 0 ] && [ -x "$F" ]; then
    IPCBYVAL_TRANSPORT=socket "$RUN" "$F" perm >"$L/tr-uid.log" 2>&1
    grep -q '^PASS: ' "$L/tr-uid.log" && grep -q 'refused the socket fallback' "$L/tr-uid.log" &&
        pass "another uid is refused by the exporter's socket (SO_PEERCRED)" ||
        fail "foreign uid refused" "$(tail -3 "$L/tr-uid.log" | tr '\n' ' ')"
else
    skip "foreign uid" "needs root and fault_main"
fi
# Pid namespaces: test_xns.sh.
finish
