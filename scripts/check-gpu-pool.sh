#!/bin/bash
# SPDX-License-Identifier: MIT
# check-gpu-pool.sh - PyTorch's expandable segments shared the way servers
# share them (test/gpu/frameworks/torch_pool_ipc.py: torch + CuPy cudaIpc*
# + mpi4py, 2 ranks, one per GPU where there are two). scripts/check-gpu.sh
# sources it (row, RUN, LOGS, NGPU); it also runs by itself after make lib
# (bash scripts/check-gpu-pool.sh) and then prints its own summary.
# One row per case of the script, from its "PASS|FAIL|SKIP: case:" lines;
# a case with no line is a FAIL. Natively the driver refuses the export
# (a row that must fail). With 2 GPUs, release and grow once more with
# both ranks on GPU 0. Logs: $LOGS/pool-*.log, ipcbyval's debug lines and
# statistics per process in $LOGS/pool-*.d/PID.log.

gp_standalone=0
if ! declare -F row >/dev/null; then
    gp_standalone=1
    set -u
    cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
    NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
    # shellcheck source=scripts/gpu-lib.sh
    . scripts/gpu-lib.sh # BUILD, LOGS, LIB, RUN; rows, failed, row
    [ -f "$LIB" ] || make -j"$(nproc)" lib EXTRA_INC="${EXTRA_INC:-}" >"$LOGS/build.log" 2>&1
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
GP_PY=test/gpu/frameworks/torch_pool_ipc.py
GP_CASES="release grow interleave vaspace chunks"

gp_what() {
    case $1 in
    release) echo "empty_cache frees what the peer cached" ;;
    grow) echo "grow after export, 50 opens, >= 49 hits" ;;
    interleave) echo "interleaved exports read, re-opens hit" ;;
    vaspace) echo "8 open x 50: VA of one reservation" ;;
    chunks) echo "pools of > 1024 pages export, open" ;;
    esac
}

# gp_job TAG TIMEOUT CASES [ARGS...]: one 2-rank job under ipcbyval; a row
# per case named in CASES (comma-separated).
gp_job() {
    local tag=$1 to=$2 cases=$3
    shift 3
    local slug log d rc c line detail why
    slug=$(echo "$tag" | tr -c 'A-Za-z0-9_.-' '_')
    log="$LOGS/pool-$slug.log" d="$LOGS/pool-$slug.d"
    [ "${d#/}" = "$d" ] && d="$PWD/$d" # the ranks read it too
    rm -rf "$d" && mkdir -p "$d"
    timeout -k 5 "$to" mpirun --oversubscribe -np 2 -x IPCBYVAL_LIB -x LD_LIBRARY_PATH \
        -x PYTHONUNBUFFERED=1 -x IPCBYVAL_LOG=debug -x IPCBYVAL_LOG_FILE="$d/%p.log" \
        -x IPCBYVAL_STATS=1 -x PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True \
        "$RUN" python3 -u "$GP_PY" --case "$cases" "$@" >"$log" 2>&1
    rc=$?
    case $rc in 124 | 137) echo "timed out after $to s" >>"$log" ;; esac
    grep '^INFO\|^PASS\|^FAIL\|^SKIP\|^OK\|^ERROR' "$log"
    for c in ${cases//,/ }; do
        line=$(grep -m1 -E "^(PASS|FAIL|SKIP): $c: " "$log")
        if [ -z "$line" ]; then
            why=$(grep -m1 'ERROR\|Error\|timed out' "$log" ||
                grep -v '^\[ipcbyval\|^---\|^[[:space:]]*$' "$log" | tail -1)
            row "torch pool $tag: $(gp_what "$c")" FAIL "no result, rc=$rc: ${why:0:100} (see $log)"
        else
            detail=${line#*: "$c": }
            row "torch pool $tag: $(gp_what "$c")" "${line%%:*}" "${detail:0:220}"
        fi
    done
}

gp_main() {
    echo "== PyTorch expandable segments as servers share them (torch_pool_ipc)"
    local out why="" where
    if [ "${NGPU:-0}" -lt 1 ]; then
        why="no GPU (nvidia-smi -L lists none)"
    elif ! command -v mpirun >/dev/null; then
        why="no mpirun"
    elif ! out=$(timeout 90 python3 -c 'import mpi4py, cupy, torch
assert torch.cuda.is_available(), "torch sees no CUDA device"' 2>&1); then
        why="torch + CuPy + mpi4py unusable: $(echo "$out" | tail -1 | cut -c1-80)"
    fi
    if [ -n "$why" ]; then
        local c
        for c in $GP_CASES; do row "torch pool $c: $(gp_what "$c")" SKIP "$why"; done
        return
    fi
    local t0=$SECONDS
    where="GPU0->1"
    [ "$NGPU" -lt 2 ] && where="1 GPU"
    gp_job "$where" 150 "${GP_CASES// /,}"
    [ "$NGPU" -ge 2 ] && gp_job "GPU0x2" 90 release,grow --same-gpu
    run "torch pool native: the driver refuses the export" fail \
        "cudaErrorInvalidValue\|CUDA_ERROR_INVALID_VALUE" mpirun --oversubscribe -np 2 \
        -x LD_LIBRARY_PATH -x PYTHONUNBUFFERED=1 -x PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True \
        python3 -u "$GP_PY" --case grow
    echo "-- torch_pool_ipc took $((SECONDS - t0)) s"
}

gp_main
if [ "$gp_standalone" = 1 ]; then
    gpu_summary "check-gpu-pool.sh, ${NGPU:-0} GPU(s)"
    exit "$failed"
fi
