#!/bin/bash
# SPDX-License-Identifier: MIT
# check-gpu-more.sh - several GPUs on one host, lifetimes, and the frameworks
# people run. scripts/check-gpu.sh sources it after its own tests (it uses
# that script's row, RUN, LIB, OUT, LOGS and NGPU); it also runs by itself
# (bash scripts/check-gpu-more.sh, after make check-gpu built everything)
# and then prints its own summary. Every case has its own timeout, and no
# case starts past GM_BUDGET seconds (default 420), so it ends within
# 7 minutes. Logs: $LOGS/more_*.log.
#   1. mpi_ipc with N = NGPU ranks (rank i on GPU i) and 2N ranks under
#      ipcbyval; natively --mem vmm must fail with the invalid-value error;
#      natively --mem legacy shows what the platform's own cross-GPU IPC does
#   2. bw_ipc: kernel + cuMemcpyPeer through the mappings, and the read
#      bandwidth of a by-value VMM mapping against a legacy one (0.95..1.05)
#   3. lifetime_ipc: an exporter's exit releases its cache entries only,
#      fds return to the baseline; exporter_exits stat; a --no-poll control
#   5. churn_ipc: 120 x 1 GiB allocate/share/free rounds natively and under
#      ipcbyval (release delay and memory held reported), a double close and
#      cudaDeviceReset between opens, natively and under ipcbyval
#   4. test/gpu/frameworks: torch.multiprocessing sharing (default and
#      expandable segments), torch NCCL all-reduce (NCCL_CUMEM_ENABLE=0/1),
#      mpi4py + CuPy IPC: natively and under ipcbyval, RESULT lines must
#      match; both times reported; ipcbyval's all-reduce no slower than native beyond noise

gm_standalone=0
if ! declare -F row >/dev/null; then
    gm_standalone=1
    set -u
    cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
    NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
    # shellcheck source=scripts/gpu-lib.sh
    . scripts/gpu-lib.sh # BUILD, OUT, LOGS, LIB, RUN; rows, failed, row
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

GM_T0=$SECONDS
GM_BUDGET=${GM_BUDGET:-420}
GM_FW=test/gpu/frameworks

# Seconds a case may run: WANT, or what the budget leaves (10 s kept for
# the kill grace and the summary).
gm_limit() {
    local left=$((GM_BUDGET - (SECONDS - GM_T0) - 10))
    if [ "$left" -lt "$1" ]; then echo "$left"; else echo "$1"; fi
}
gm_slug() { echo "$1" | tr -c 'A-Za-z0-9_.-' '_' | cut -c1-80; }
# Last line of a log that is not ipcbyval's own.
gm_last() { grep -v '^\[ipcbyval' "$1" 2>/dev/null | grep -v '^[[:space:]]*$' | tail -1 | cut -c1-100; }
# First ERROR/FAIL line of a log, else its last line.
gm_err() {
    local e; e=$(grep -m1 '^ERROR\|FAIL\|failed\|Error' "$1" 2>/dev/null | cut -c1-100)
    echo "${e:-$(gm_last "$1")}"
}
gm_time() { grep -m1 '^TIME ' "$1" 2>/dev/null | sed 's/^TIME //' | cut -c1-45; }

# gm_exec LOG WANT CMD...: runs CMD under timeout; sets gm_rc, gm_wall,
# gm_skipped (1 when the budget was spent and nothing ran).
gm_exec() {
    local log=$1 to t0
    to=$(gm_limit "$2")
    shift 2
    gm_skipped=0 gm_wall=0
    if [ "$to" -lt 5 ]; then
        echo "not run: the ${GM_BUDGET} s budget of check-gpu-more.sh is spent" >"$log"
        gm_skipped=1 gm_rc=125
        return
    fi
    t0=$(date +%s.%N)
    timeout -k 5 "$to" "$@" >"$log" 2>&1
    gm_rc=$?
    gm_wall=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    case $gm_rc in 124 | 137) echo "timed out after ${to} s" >>"$log" ;; esac
}

# gm_case NAME ok|fail PATTERN WANT CMD...: one row from one run.
gm_case() {
    local name=$1 expect=$2 pat=$3 want=$4 log
    shift 4
    log="$LOGS/more_$(gm_slug "$name").log"
    gm_exec "$log" "$want" "$@"
    local last; last=$(gm_last "$log")
    if [ "$gm_skipped" = 1 ]; then
        row "$name" SKIP "$last"
    elif [ "$expect" = ok ] && [ "$gm_rc" -eq 0 ] && grep -q "$pat" "$log"; then
        row "$name" PASS "${gm_wall} s: $last"
    elif [ "$expect" = fail ] && [ "$gm_rc" -ne 0 ] && [ "$gm_rc" -ne 124 ] &&
        [ "$gm_rc" -ne 137 ] && grep -q "$pat" "$log"; then
        row "$name" PASS "fails as expected: $(grep -m1 "$pat" "$log" | cut -c1-80)"
    else
        row "$name" FAIL "rc=$gm_rc: $last (see $log)"
    fi
}

# 1. mpi_ipc with as many ranks as GPUs.
gm_mpi() {
    local M="$OUT/mpi_ipc" n=$NGPU
    local inval='cudaErrorInvalidValue\|CUDA_ERROR_INVALID_VALUE'
    if [ "$n" -lt 2 ]; then
        gm_case "mpirun -np 2 mpi_ipc --mem all, ipcbyval (both on GPU 0)" ok OK 90 \
            mpirun --oversubscribe -np 2 -x IPCBYVAL_LIB -x LD_LIBRARY_PATH \
            "$RUN" "$M" --mem all --chunks 3 --iters 3
        row "mpirun -np NGPU mpi_ipc across GPUs" SKIP "cross-GPU part not run: one GPU"
        return
    fi
    local -a mp=(mpirun --oversubscribe -np "$n" -x IPCBYVAL_LIB -x LD_LIBRARY_PATH)
    local -a mp2=(mpirun --oversubscribe -np $((2 * n)) -x IPCBYVAL_LIB -x LD_LIBRARY_PATH)
    gm_case "mpirun -np $n mpi_ipc --mem all, ipcbyval (rank i: GPU i)" ok OK 90 \
        "${mp[@]}" "$RUN" "$M" --mem all --chunks 3 --iters 3
    gm_case "mpirun -np $n mpi_ipc --mem vmm native, across GPUs" fail "$inval" 60 \
        "${mp[@]}" "$M" --mem vmm
    gm_case "mpirun -np $n mpi_ipc --mem legacy native (the driver)" ok OK 60 \
        "${mp[@]}" "$M" --mem legacy --iters 2
    gm_case "mpirun -np $((2 * n)) mpi_ipc --mem all, ipcbyval (2 per GPU)" ok OK 90 \
        "${mp2[@]}" "$RUN" "$M" --mem all --chunks 3 --iters 2
}

# 2. bw_ipc DEV_IMP: peer checks and the bandwidth ratio, GPU 0 -> DEV_IMP.
gm_bw() {
    local d=$1 tag="bw_ipc GPU 0->$1" log="$LOGS/more_bw_ipc_0_to_$1.log"
    gm_exec "$log" 90 "$RUN" "$OUT/bw_ipc" --dev-exp 0 --dev-imp "$d"
    local last; last=$(gm_last "$log")
    if [ "$gm_skipped" = 1 ] || [ "$gm_rc" -eq 3 ]; then
        row "$tag: kernel + cuMemcpyPeer via the mappings" SKIP "$last"
        row "$tag: bandwidth vmm-byvalue/legacy 0.95..1.05" SKIP "$last"
        return
    fi
    if grep -q '^bw_ipc: peer checks ok' "$log"; then
        row "$tag: kernel + cuMemcpyPeer via the mappings" PASS \
            "1 GiB vmm-byvalue (8 chunks) + 1 GiB legacy, every word checked"
    else
        row "$tag: kernel + cuMemcpyPeer via the mappings" FAIL "rc=$gm_rc: $(gm_err "$log")"
    fi
    local line v l r res=FAIL
    line=$(grep '^bw_ipc: vmm-byvalue' "$log" | tail -1)
    if [ "$gm_rc" -ne 0 ] || [ -z "$line" ]; then
        row "$tag: bandwidth vmm-byvalue/legacy 0.95..1.05" FAIL "rc=$gm_rc, no bandwidth: $last"
        return
    fi
    read -r v l r < <(echo "$line" |
        sed -n 's/.*vmm-byvalue \([0-9.]*\) GB\/s, legacy \([0-9.]*\) GB\/s, ratio \([0-9.]*\).*/\1 \2 \3/p')
    awk -v r="${r:-x}" 'BEGIN { exit !(r + 0 >= 0.95 && r + 0 <= 1.05) }' && res=PASS
    row "$tag: bandwidth vmm-byvalue/legacy 0.95..1.05" $res \
        "vmm ${v:-?} GB/s, legacy ${l:-?} GB/s, ratio ${r:-?}"
}

# 3. lifetime_ipc: A on GPU 0, B on GPU 1 (or 0), importer on GPU 0.
gm_lifetime() {
    local L="$OUT/lifetime_ipc" b=0 log="$LOGS/more_lifetime_ipc.log"
    [ "$NGPU" -ge 2 ] && b=1
    local name="lifetime_ipc: A (GPU 0) exits, B (GPU $b) stays valid"
    gm_exec "$log" 60 env IPCBYVAL_STATS=1 "$RUN" "$L" --dev-a 0 --dev-b "$b" --dev-imp 0
    local phases pid exits stat="lifetime_ipc: stats exporter_exits = 2 (A, then B)"
    if [ "$gm_skipped" = 1 ]; then
        row "$name" SKIP "$(gm_last "$log")"
        row "$stat" SKIP "$(gm_last "$log")"
        row "lifetime_ipc --no-poll: A released with no call (watcher)" SKIP "$(gm_last "$log")"
        return
    fi
    phases=$(sed -n 's/^lifetime_ipc: \([A-Za-z ]*[a-z]\) *fds \([0-9]*\) (pidfds \([0-9]*\)).*/\1 \2(\3)/p' \
        "$log" | tr '\n' ',' | sed 's/,$//; s/,/, /g')
    if [ "$gm_rc" -eq 0 ] && grep -q '^OK lifetime_ipc' "$log"; then
        row "$name" PASS "fds(pidfds) $phases"
    else
        row "$name" FAIL "rc=$gm_rc: $(grep -m1 'FAIL\|failed' "$log" | cut -c1-70) [$phases]"
    fi
    # Importer's own stats line: exporter_exits counts A (mid-run) and B (end).
    pid=$(sed -n 's/^lifetime_ipc: importer pid \([0-9]*\).*/\1/p' "$log" | head -1)
    exits=$(grep "^\[ipcbyval ${pid:-none} .*exporter_exits" "$log" |
        awk '{ for (i = 1; i < NF; i++) if ($i == "exporter_exits") print $(i + 1) }' | tail -1)
    if [ "${exits:-}" = 2 ]; then
        row "$stat" PASS "importer pid $pid"
    else
        row "$stat" FAIL \
            "got '${exits:-no stats line}' for importer pid ${pid:-?}"
    fi
    gm_case "lifetime_ipc --no-poll: A released with no call (watcher)" ok \
        "^OK lifetime_ipc" 60 "$RUN" "$L" --dev-a 0 --dev-b "$b" --dev-imp 0 --no-poll
}

# 5. churn_ipc: what the import cache must not change (issue: lifetimes).
# One churn row per kind of memory: 120 x 1 GiB rounds natively (legacy;
# VMM cannot be shared natively) and under ipcbyval; the importer stays
# idle after the last free and the exporter times the memory's return.
gm_churn() {
    local C="$OUT/churn_ipc" mem log ln lp
    for mem in legacy vmm; do
        lp="$LOGS/more_churn_${mem}_byval.log"
        gm_exec "$lp" 120 env IPCBYVAL_STATS=1 "$RUN" "$C" --case churn --mem "$mem" --rounds 120 --mib 1024
        local got; got=$(grep -h 'release_ms\|held_mib_max' "$lp" | sed 's/^churn_ipc: //' | tr '\n' ';' | cut -c1-90)
        if [ "$mem" = legacy ]; then
            ln="$LOGS/more_churn_${mem}_native.log"
            local prc=$gm_rc
            gm_exec "$ln" 120 "$C" --case churn --mem "$mem" --rounds 120 --mib 1024
            if [ "$prc" -eq 0 ] && [ "$gm_rc" -eq 0 ] && grep -q '^OK churn_ipc' "$ln" "$lp"; then
                row "churn_ipc legacy 120 x 1 GiB: native / ipcbyval" PASS "$got"
            else
                row "churn_ipc legacy 120 x 1 GiB: native / ipcbyval" FAIL "rc $gm_rc/$prc: $(grep -hm1 'FAILED\|failed' "$ln" "$lp" | cut -c1-70)"
            fi
        elif [ "$gm_rc" -eq 0 ] && grep -q '^OK churn_ipc' "$lp"; then
            row "churn_ipc vmm 120 x 1 GiB under ipcbyval" PASS "$got"
        else
            row "churn_ipc vmm 120 x 1 GiB under ipcbyval" FAIL "rc=$gm_rc: $(grep -m1 'FAILED\|failed' "$lp" | cut -c1-70)"
        fi
    done
    for c in double-close reset; do
        for mem in legacy vmm; do
            ln="$LOGS/more_${c}_${mem}_native.log" lp="$LOGS/more_${c}_${mem}_byval.log"
            gm_exec "$lp" 60 "$RUN" "$C" --case "$c" --mem "$mem" --mib 64
            local prc=$gm_rc
            if [ "$mem" = legacy ]; then
                gm_exec "$ln" 60 "$C" --case "$c" --mem "$mem" --mib 64
                if [ "$prc" -eq 0 ] && [ "$gm_rc" -eq 0 ]; then
                    row "churn_ipc $c legacy: native / ipcbyval" PASS "$(grep -hm1 'second close' "$lp" | cut -c1-60)"
                else
                    row "churn_ipc $c legacy: native / ipcbyval" FAIL "rc $gm_rc/$prc: $(grep -hm1 'FAILED\|failed' "$ln" "$lp" | cut -c1-70)"
                fi
            elif [ "$prc" -eq 0 ]; then
                row "churn_ipc $c vmm under ipcbyval" PASS "$(grep -hm1 'second close' "$lp" | cut -c1-60)"
            else
                row "churn_ipc $c vmm under ipcbyval" FAIL "rc=$prc: $(grep -m1 'FAILED\|failed' "$lp" | cut -c1-70)"
            fi
        done
    done
}

# gm_pair NAME WANT ALLOW_NATIVE_FAIL REFUSAL NATIVE_ARRAY PRELOAD_ARRAY:
# runs a program natively and under ipcbyval; PASS when both print "OK "
# and the same RESULT lines. ALLOW_NATIVE_FAIL=1: a native failure with
# ipcbyval working is a PASS (ipcbyval serves what the driver refuses).
# Both failing with the REFUSAL pattern (the framework's own refusal) is a
# SKIP. Sets gm_ln and gm_lp to the two logs.
gm_pair() {
    local name=$1 want=$2 allow=$3 refuse=$4
    local -n gm_pair_n=$5 gm_pair_p=$6
    local slug rn rp wn wp okn=0 okp=0 times
    slug=$(gm_slug "$name")
    gm_ln="$LOGS/more_${slug}_native.log" gm_lp="$LOGS/more_${slug}_ipcbyval.log"
    gm_exec "$gm_ln" "$want" "${gm_pair_n[@]}"
    rn=$gm_rc wn=$gm_wall
    [ "$gm_skipped" = 1 ] && { row "$name" SKIP "$(gm_last "$gm_ln")"; return; }
    gm_exec "$gm_lp" "$want" "${gm_pair_p[@]}"
    rp=$gm_rc wp=$gm_wall
    [ "$gm_skipped" = 1 ] && { row "$name" SKIP "$(gm_last "$gm_lp")"; return; }
    [ "$rn" -eq 0 ] && grep -q '^OK ' "$gm_ln" && okn=1
    [ "$rp" -eq 0 ] && grep -q '^OK ' "$gm_lp" && okp=1
    times="native ${wn} s $(gm_time "$gm_ln" | sed "s/ busbw.*//"); ipcbyval ${wp} s $(gm_time "$gm_lp")"
    if [ $okn = 1 ] && [ $okp = 1 ]; then
        if [ "$(grep '^RESULT' "$gm_ln")" = "$(grep '^RESULT' "$gm_lp")" ]; then
            row "$name" PASS "same results; $times"
        else
            row "$name" FAIL "RESULT lines differ: diff $gm_ln $gm_lp"
        fi
    elif [ $okp = 1 ] && [ "$allow" = 1 ]; then
        row "$name" PASS "native fails ($(gm_err "$gm_ln")), ipcbyval works; $times"
    elif [ $okn = 1 ]; then
        row "$name" FAIL "native ok, ipcbyval rc=$rp: $(gm_err "$gm_lp")"
    elif [ -n "$refuse" ] && grep -q "$refuse" "$gm_ln" && grep -q "$refuse" "$gm_lp"; then
        row "$name" SKIP "the framework refuses both ways: $(gm_err "$gm_ln")"
    else
        row "$name" FAIL "native rc=$rn: $(gm_err "$gm_ln") | ipcbyval rc=$rp: $(gm_err "$gm_lp")"
    fi
}

# ipcbyval must not slow the all-reduce: its median may exceed native's by
# no more than noise (10 %, or twice the larger interquartile spread when
# that is wider). Faster is not a failure: a 1-GPU all-reduce moves no
# data, and its ~0.02-0.09 ms medians swing several-fold between runs.
gm_nccl_time() {
    local name=$1 n p
    n=$(sed -n 's/^TIME allreduce_ms median=\([0-9.]*\) p25=\([0-9.]*\) p75=\([0-9.]*\).*/\1 \2 \3/p' "$gm_ln")
    p=$(sed -n 's/^TIME allreduce_ms median=\([0-9.]*\) p25=\([0-9.]*\) p75=\([0-9.]*\).*/\1 \2 \3/p' "$gm_lp")
    if [ -z "$n" ] || [ -z "$p" ]; then
        row "$name" SKIP "no timing from both runs (see the row above)"
        return
    fi
    local verdict
    verdict=$(awk -v n="$n" -v p="$p" 'BEGIN {
        split(n, a, " "); split(p, b, " ");
        tol = 0.10; sa = 2 * (a[3] - a[2]) / a[1]; sb = 2 * (b[3] - b[2]) / b[1];
        if (sa > tol) tol = sa; if (sb > tol) tol = sb;
        d = b[1] / a[1] - 1;
        printf "%s native %.3f ms, ipcbyval %.3f ms (%+.1f%%, noise +-%.0f%%)",
            (d <= tol ? "PASS" : "FAIL"), a[1], b[1], 100 * d, 100 * tol }')
    local res=${verdict%% *}
    # One GPU: a 1-rank all-reduce opens no IPC handle, so its time says
    # nothing about ipcbyval (and swings 2-4x between runs): reported only.
    [ "${NGPU:-0}" -lt 2 ] && res=INFO
    row "$name" "$res" "${verdict#* }"
}

# shellcheck disable=SC2034 # nat/pre reach gm_pair by name (local -n)
gm_frameworks() {
    local out torch_err="" cupy_err="" w=$NGPU c conf
    [ "$w" -lt 1 ] && w=1
    if ! out=$(timeout 60 python3 -c 'import torch
assert torch.cuda.is_available(), "torch sees no CUDA device"
print("torch", torch.__version__)' 2>&1); then
        torch_err="torch unusable: $(echo "$out" | tail -1 | cut -c1-80)"
    fi
    if ! out=$(timeout 60 python3 -c 'import mpi4py, cupy
print("cupy", cupy.__version__, "gpus", cupy.cuda.runtime.getDeviceCount())' 2>&1); then
        cupy_err="mpi4py/cupy unusable: $(echo "$out" | tail -1 | cut -c1-80)"
    fi
    local -a nat pre
    for conf in default expandable_segments:True; do
        local name="torch.multiprocessing tensors, $conf"
        if [ -n "$torch_err" ]; then row "$name" SKIP "$torch_err"; continue; fi
        local -a envs=(env -u PYTORCH_CUDA_ALLOC_CONF PYTHONUNBUFFERED=1)
        [ "$conf" != default ] && envs=(env PYTORCH_CUDA_ALLOC_CONF="$conf" PYTHONUNBUFFERED=1)
        nat=("${envs[@]}" python3 -u "$GM_FW/torch_mp_share.py")
        pre=("${envs[@]}" "$RUN" python3 -u "$GM_FW/torch_mp_share.py")
        # Older torch refuses to share expandable segments itself.
        gm_pair "$name" 100 "$([ "$conf" = default ] && echo 0 || echo 1)" \
            "expandable_segments" nat pre
    done
    # The pidfd_getfd rescue: PyTorch's own pidfd_getfd, refused as in a
    # default Docker container (a seccomp filter), served by our broker.
    local deny="$BUILD/test/transport/deny_getfd" es=expandable_segments:True
    name="torch expandable segments, pidfd_getfd denied"
    if [ -n "$torch_err" ]; then
        row "$name" SKIP "$torch_err"
    else
        gm_case "$name, native" fail "pidfd_getfd" 100 env PYTORCH_CUDA_ALLOC_CONF=$es \
            PYTHONUNBUFFERED=1 "$deny" python3 -u "$GM_FW/torch_mp_share.py"
        gm_case "$name, ipcbyval: rescued" ok "OK torch_mp_share" 100 env PYTORCH_CUDA_ALLOC_CONF=$es \
            PYTHONUNBUFFERED=1 IPCBYVAL_STATS=1 "$deny" "$RUN" python3 -u "$GM_FW/torch_mp_share.py"
    fi
    local name="mpi4py + CuPy cudaMalloc IPC, 2 ranks"
    local -a mp=(mpirun --oversubscribe -np 2 -x IPCBYVAL_LIB -x LD_LIBRARY_PATH)
    nat=("${mp[@]}" python3 -u "$GM_FW/mpi4py_cupy_ipc.py")
    pre=("${mp[@]}" "$RUN" python3 -u "$GM_FW/mpi4py_cupy_ipc.py")
    if [ -n "$cupy_err" ]; then row "$name" SKIP "$cupy_err"; else gm_pair "$name" 90 0 "" nat pre; fi
    local -a launch=(python3 -u)
    command -v torchrun >/dev/null 2>&1 &&
        launch=(torchrun --standalone --nnodes=1 --nproc_per_node="$w")
    for c in 0 1; do
        local name="torch NCCL all-reduce x$w, NCCL_CUMEM_ENABLE=$c"
        if [ -n "$torch_err" ]; then row "$name" SKIP "$torch_err"; continue; fi
        nat=(env NCCL_CUMEM_ENABLE="$c" PYTHONUNBUFFERED=1 "${launch[@]}"
            "$GM_FW/torch_nccl_allreduce.py" --world "$w")
        pre=(env NCCL_CUMEM_ENABLE="$c" PYTHONUNBUFFERED=1 "$RUN" "${launch[@]}"
            "$GM_FW/torch_nccl_allreduce.py" --world "$w")
        gm_pair "$name" 100 0 "" nat pre
        gm_nccl_time "torch NCCL all-reduce 256 MiB time, CUMEM=$c"
    done
}

gm_main() {
    echo "== several GPUs, lifetimes, frameworks (check-gpu-more.sh, budget ${GM_BUDGET} s)"
    if [ "${NGPU:-0}" -lt 1 ]; then
        row "check-gpu-more.sh" SKIP "no GPU (nvidia-smi -L lists none)"
        return
    fi
    local b
    for b in mpi_ipc bw_ipc lifetime_ipc; do
        [ -x "$OUT/$b" ] || row "check-gpu-more.sh: $b" FAIL "not built ($OUT/$b): see the build row"
    done
    if [ "$NGPU" -ge 2 ]; then
        local p2p
        p2p=$(timeout 20 nvidia-smi topo -p2p r 2>/dev/null | awk '$1 == "GPU0" && $2 == "X" { print $3; exit }')
        if [ "$p2p" = OK ]; then row "GPU 0 <-> GPU 1 peer-to-peer read (nvidia-smi)" PASS "OK"
        else row "GPU 0 <-> GPU 1 peer-to-peer read (nvidia-smi)" SKIP \
            "'${p2p:-unknown}': cross-GPU IPC needs P2P; expect cross-GPU rows to fail"; fi
    fi
    echo "-- mpi_ipc, $NGPU GPU(s)"
    gm_mpi
    echo "-- bw_ipc"
    [ "$NGPU" -ge 2 ] && gm_bw 1
    gm_bw 0
    echo "-- lifetime_ipc"
    gm_lifetime
    echo "-- churn_ipc"
    gm_churn
    echo "-- frameworks"
    gm_frameworks
    echo "-- check-gpu-more.sh took $((SECONDS - GM_T0)) s"
}

gm_main
if [ "$gm_standalone" = 1 ]; then
    gpu_summary "check-gpu-more.sh, $NGPU GPU(s)"
    exit "$failed"
fi
