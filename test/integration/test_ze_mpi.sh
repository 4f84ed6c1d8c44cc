#!/bin/bash
# SPDX-License-Identifier: MIT
# Unmodified MPI programs send the 64 handle bytes with MPI: they fail
# natively and pass under ipcbyval, with Open MPI (2 and 4 ranks) and MPICH.
# Event pools too (--events): each rank signals an event in its
# predecessor's pool, which the predecessor waits for.
. "$(dirname "$0")/lib.sh"
need "$LIB" "$ZEDRV"
L="$BUILD/test-logs"
NATIVE_ERR='zeMemOpenIpcHandle failed|ERROR_INVALID_ARGUMENT'
A=(--allocs 4 --size 65536 --iters 3)
EV=(--allocs 0 --events --iters 3)
POOL_ERR='zeEventPoolOpenIpcHandle failed'

if [ -n "$MPIRUN_OMPI" ] && [ -x "$APPS/ze_mpi_exchange_ompi" ]; then
    APP="$APPS/ze_mpi_exchange_ompi"
    expect_fail "Open MPI 2 ranks: native open fails" "$L/ompi2-native.log" "$NATIVE_ERR" \
        "${OMPI[@]}" -np 2 "$APP" "${A[@]}"
    expect_ok "Open MPI 2 ranks: by value" "$L/ompi2.log" "${OMPI[@]}" -np 2 "$RUN" "$APP" "${A[@]}"
    expect_fail "Open MPI 4 ranks: native open fails" "$L/ompi4-native.log" "$NATIVE_ERR" \
        "${OMPI[@]}" -np 4 "$APP" "${A[@]}"
    expect_ok "Open MPI 4 ranks: by value" "$L/ompi4.log" "${OMPI[@]}" -np 4 "$RUN" "$APP" "${A[@]}"
    expect_ok "Open MPI 2 ranks, DDI route, loader dlopen'ed" "$L/ompi2-ddi.log" \
        "${OMPI[@]}" -np 2 "$RUN" "$APPS/ze_mpi_exchange_ompi_dl" --route ddi "${A[@]}"
    expect_fail "Open MPI 2 ranks, event pools: native open fails" "$L/ompi2-events-native.log" \
        "$POOL_ERR" "${OMPI[@]}" -np 2 "$APP" "${EV[@]}"
    expect_ok "Open MPI 2 ranks, event pools signalled across ranks by value" \
        "$L/ompi2-events.log" "${OMPI[@]}" -np 2 "$RUN" "$APP" "${EV[@]}"
    expect_ok "Open MPI 4 ranks, memory and event pools by value" "$L/ompi4-events.log" \
        "${OMPI[@]}" -np 4 "$RUN" "$APP" --events "${A[@]}"
    expect_ok "Open MPI 2 ranks, event pools, DDI route, loader dlopen'ed" \
        "$L/ompi2-events-ddi.log" "${OMPI[@]}" -np 2 "$RUN" "$APPS/ze_mpi_exchange_ompi_dl" \
        --route ddi "${EV[@]}"
else
    skip "Open MPI" "mpirun.openmpi or ze_mpi_exchange_ompi missing"
fi

if [ -n "$MPIEXEC_MPICH" ] && [ -x "$APPS/ze_mpi_exchange_mpich" ]; then
    APP="$APPS/ze_mpi_exchange_mpich"
    expect_fail "MPICH 2 ranks: native open fails" "$L/mpich2-native.log" "$NATIVE_ERR" \
        "${MPICH[@]}" -n 2 "$APP" "${A[@]}"
    expect_ok "MPICH 2 ranks: by value" "$L/mpich2.log" "${MPICH[@]}" -n 2 "$RUN" "$APP" "${A[@]}"
    expect_ok "MPICH 4 ranks: by value" "$L/mpich4.log" "${MPICH[@]}" -n 4 "$RUN" "$APP" "${A[@]}"
    expect_fail "MPICH 2 ranks, event pools: native open fails" "$L/mpich2-events-native.log" \
        "$POOL_ERR" "${MPICH[@]}" -n 2 "$APP" "${EV[@]}"
    expect_ok "MPICH 3 ranks, event pools signalled across ranks by value" \
        "$L/mpich3-events.log" "${MPICH[@]}" -n 3 "$RUN" "$APP" "${EV[@]}"
else
    skip "MPICH" "mpiexec.mpich or ze_mpi_exchange_mpich missing"
fi
finish
