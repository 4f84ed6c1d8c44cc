#!/bin/bash
# SPDX-License-Identifier: MIT
# check-gpu.sh - everything GPU-related in one go, on a machine with an
# NVIDIA GPU, CUDA, Open MPI and no package registry (make check-gpu).
# Builds the library and the GPU programs, runs the routing tests against
# the real driver, the static-cudart runtime program, a 2-rank MPI job, the
# latency benchmark, PyTorch's own pool shared over MPI (check-gpu-pool.sh)
# and check-gpu-more.sh's cases, then prints a summary table last.
set -u
cd "$(dirname "$0")/.."
. scripts/gpu-lib.sh # BUILD, OUT, LOGS, LIB, RUN; rows and ratios

kernel=$(uname -r)
echo "== machine: kernel $kernel"
case "$kernel" in 4.4.0*) echo "gVisor sandbox (kernel 4.4.0): pidfd_getfd may be missing" ;; esac
nvidia-smi -L 2>&1 | head -8
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')

echo "== build"
if make -j"$(nproc)" lib "$BUILD/test/cudadrv/cu_pair" "$BUILD/test/transport/fdshare" \
    "$BUILD/test/transport/deny_getfd" EXTRA_INC="${EXTRA_INC:-}" >"$LOGS/build.log" 2>&1 &&
    make -C test/gpu gpu-bins OUT="$PWD/$OUT" >>"$LOGS/build.log" 2>&1; then
    row "build: libipcbyval + cu_pair + GPU programs (nvcc)" PASS ""
else
    tail -30 "$LOGS/build.log"
    row "build" FAIL "see $LOGS/build.log"
fi

P="$BUILD/test/cudadrv/cu_pair"
echo "== routing against the real driver (cu_pair)"
for route in symbol procaddr cudart; do
    run "cu_pair vmm/$route native" fail CUDA_ERROR_INVALID_VALUE "$P" --mem vmm --route "$route"
    for mem in vmm vmm-multi legacy; do
        run "cu_pair $mem/$route under ipcbyval" ok OK "$RUN" "$P" --mem "$mem" --route "$route" --iters 3 --reopen
    done
done
IPCBYVAL_TRANSPORT=socket run "cu_pair vmm-multi over the socket fallback (real driver)" ok OK \
    "$RUN" "$P" --mem vmm-multi --route cudart --iters 3
if [ "$NGPU" -ge 2 ]; then
    run "cu_pair vmm-multi GPU0 -> GPU1 under ipcbyval" ok OK "$RUN" "$P" --mem vmm-multi --route cudart --dev-exp 0 --dev-imp 1
    run "cu_pair legacy GPU0 -> GPU1 under ipcbyval" ok OK "$RUN" "$P" --mem legacy --route cudart --dev-exp 0 --dev-imp 1 --iters 3
else
    row "cross-GPU cu_pair" SKIP "one GPU on this machine"
fi

echo "== ipcbyval-run --doctor and the per-open debug lines, real driver"
run "doctor: the real libcuda with its driver version; by-value works" ok \
    "libcuda .*CUDA driver API [0-9][0-9]*\.[0-9]" "$RUN" --doctor
IPCBYVAL_LOG=debug run "cu_pair vmm: debug line per open (miss via pidfd, then hits)" ok \
    "open: hit: exporter pid [0-9]*, [0-9]* bytes" "$RUN" "$P" --mem vmm --route cudart --iters 3 --reopen

echo "== pidfd_getfd rescue: fdshare (PyTorch's pattern, its own pidfd_getfd) under a denial"
FSP=(test/transport/fdshare_pair.sh "$BUILD/test/transport/fdshare")
DENY="$BUILD/test/transport/deny_getfd"
run "fdshare, pidfd_getfd denied, native" fail "Operation not permitted" \
    "${FSP[@]}" "$LOGS/fs-native.imp" "" "" -- env -- "$DENY"
run "fdshare, denied, ipcbyval in both: syscall() rescued" ok "OK same object" \
    "${FSP[@]}" "$LOGS/fs-syscall.imp" "" "" -- "$RUN" -- "$DENY" "$RUN"
run "fdshare, denied, ipcbyval in both: pidfd_getfd() rescued" ok "OK same object" \
    "${FSP[@]}" "$LOGS/fs-wrapper.imp" "" "--wrapper" -- "$RUN" -- "$DENY" "$RUN"
IPCBYVAL_LOG=debug run "fdshare: export closed, its number a new /dev/nvidiactl fd: refused" fail \
    "no longer holds the open file" "${FSP[@]}" "$LOGS/fs-reuse.imp" "--reuse nvidiactl" "" \
    -- "$RUN" -- "$DENY" "$RUN"
IPCBYVAL_LOG=debug run "fdshare: an fd never exported stays refused" fail "does not serve fd" \
    "${FSP[@]}" "$LOGS/fs-other.imp" "" "--ask other" -- "$RUN" -- "$DENY" "$RUN"

echo "== runtime API, static cudart (rt_vmm_ipc)"
R="$OUT/rt_vmm_ipc"
for drv in link entry; do
    run "rt_vmm_ipc vmm --drv $drv native" fail cudaErrorInvalidValue "$R" --mem vmm --drv "$drv"
    run "rt_vmm_ipc vmm --drv $drv under ipcbyval" ok OK "$RUN" "$R" --mem vmm --drv "$drv" --iters 3 --reopen
    run "rt_vmm_ipc vmm-multi --drv $drv under ipcbyval" ok OK "$RUN" "$R" --mem vmm-multi --drv "$drv" --iters 3
done
run "rt_vmm_ipc legacy native" ok OK "$R" --mem legacy --iters 3
run "rt_vmm_ipc legacy under ipcbyval" ok OK "$RUN" "$R" --mem legacy --iters 3 --reopen

echo "== the exporter's context ends under an importer (cu_life; issue 22)"
# Legacy: the importer's close and re-open after the exporter's
# cuCtxDestroy / primary reset / last primary release, natively and under
# ipcbyval side by side (the cuMemAlloc memory goes with the context: the
# export ends first, so a re-open must fail as natively). VMM: by value
# only; its memory is no context's, so the export must live on.
CL="$OUT/cu_life"
for c in exporter-destroy exporter-reset exporter-release; do
    nl="$LOGS/cu-life-$c.native" bl="$LOGS/cu-life-$c.byval"
    timeout 90 "$CL" --case "$c" --mem legacy >"$nl" 2>&1
    timeout 90 "$RUN" "$CL" --case "$c" --mem legacy >"$bl" 2>&1
    nat=$(grep -h '^cu_life: after' "$nl" | sed 's/.*ended: //;s/, imports held -1//')
    byv=$(grep -h '^cu_life: after' "$bl" | sed 's/.*ended: //;s/, imports held -1//')
    if [ -n "$nat" ] && [ "$nat" = "$byv" ] && grep -q '^OK' "$bl"; then
        row "cu_life legacy $c: native = ipcbyval" PASS "$nat"
    else
        row "cu_life legacy $c: native = ipcbyval" FAIL "native '${nat:-$(tail -1 "$nl")}' ipcbyval '${byv:-$(tail -1 "$bl")}'"
    fi
    run "cu_life vmm $c under ipcbyval: export lives on" ok "re-open CUDA_SUCCESS" \
        "$RUN" "$CL" --case "$c" --mem vmm
done
# The importer opens with its reset (inactive) primary context current.
nat=$(timeout 90 "$CL" --case reset --mem legacy 2>&1 | grep -h 'reset context current')
for m in legacy vmm; do
    byv=$(timeout 90 "$RUN" "$CL" --case reset --mem $m 2>&1 | grep -h 'reset context current')
    if [ -n "$nat" ] && [ "$nat" = "$byv" ]; then
        row "cu_life $m: open, reset context current: as natively" PASS "${nat##*: }"
    else
        row "cu_life $m: open, reset context current: as natively" FAIL "native '${nat##*: }' ipcbyval '${byv##*: }'"
    fi
done

echo "== stress workload (test/stress): threads, context destroys, double closes; no forks"
S="$OUT/stress_cu"
# Legacy: the workload is not valid on the real driver (H100, driver 580:
# natively, one context, 20 s: 64,946 wrong reads and 27,455 opens
# refused while live: the workload assumes what the real driver's legacy
# IPC does not do, not yet understood), so its rows are information,
# natively beside ipcbyval; the CUDA double judges legacy in make check.
stress_info() {
    local name=$1; shift
    local log="$LOGS/$(echo "$name" | tr -c 'A-Za-z0-9_.-' '_').log"
    timeout 90 "$@" >"$log" 2>&1
    row "$name" INFO "$(grep -E '^(PASS|FAIL): ' "$log" | tail -1 | cut -c1-150)"
}
stress_info "stress cuda-legacy native, one context, 20 s" "$S" cuda-legacy-native --native \
    --no-forks --one-context --seconds 20
stress_info "stress cuda-legacy under ipcbyval, one context, 20 s" "$RUN" "$S" cuda-legacy \
    --no-forks --one-context --seconds 20
CUDA_VISIBLE_DEVICES=0 STRESS_CU_VMM=1 run "stress cuda-vmm under ipcbyval, one device, 30 s" ok "^PASS" \
    "$RUN" "$S" cuda-vmm --no-forks --seconds 30

echo "== MPI (unmodified, 2 ranks)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIRUN=(mpirun --oversubscribe -np 2 -x IPCBYVAL_LIB -x LD_LIBRARY_PATH)
M="$OUT/mpi_ipc"
run "mpirun -np 2 mpi_ipc --mem vmm native" fail "cudaErrorInvalidValue\|CUDA_ERROR_INVALID_VALUE" "${MPIRUN[@]}" "$M" --mem vmm
run "mpirun -np 2 mpi_ipc --mem all under ipcbyval" ok OK "${MPIRUN[@]}" "$RUN" "$M" --mem all --chunks 3 --iters 5

echo "== latency (bench_ipc): native driver, then under ipcbyval"
B="$OUT/bench_ipc"
timeout 120 "$B" --iters 200 >"$LOGS/bench-native.log" 2>&1
timeout 120 "$RUN" "$B" --iters 2000 >"$LOGS/bench-ipcbyval.log" 2>&1
echo "-- native"; grep '^|\|^bench\|^Open' "$LOGS/bench-native.log"
echo "-- under ipcbyval"; grep '^|\|^bench\|^Open' "$LOGS/bench-ipcbyval.log"
NB="$LOGS/bench-native.log" IB="$LOGS/bench-ipcbyval.log"
nat=$(awk -v a="$(med "$NB" "legacy cuIpcOpenMemHandle")" -v b="$(med "$NB" "legacy cuIpcCloseMemHandle")" 'BEGIN { if (a != "" && b != "") print a + b }')
hit=$(awk -v a="$(med "$IB" "legacy cuIpcOpenMemHandle")" -v b="$(med "$IB" "legacy cuIpcCloseMemHandle")" 'BEGIN { if (a != "" && b != "") print a + b }')
ratio "legacy open+close: driver vs ipcbyval cached re-open" 100 "$nat" "$hit"
ratio "VMM export: cuMemExportToShareableHandle vs cached by-value get" 100 \
    "$(med "$NB" "VMM cuMemExportToShareableHandle")" "$(med "$IB" "VMM cuIpcGetMemHandle")"

# Across pod-like namespaces through the rendezvous directory (issue 24).
[ -f scripts/check-gpu-rendezvous.sh ] && . scripts/check-gpu-rendezvous.sh

# PyTorch's expandable segments shared as servers share them.
[ -f scripts/check-gpu-pool.sh ] && . scripts/check-gpu-pool.sh

# Several GPUs and the frameworks (issue: multi-GPU), when present.
[ -f scripts/check-gpu-more.sh ] && . scripts/check-gpu-more.sh

echo
echo "== summary (kernel $kernel, $NGPU GPU(s))"
printf '| %-58s | %-6s | %s\n' "check" "result" "detail"
printf '%s\n' "${rows[@]}"
p=$(printf '%s\n' "${rows[@]}" | grep -c '| PASS ') ; f=$(printf '%s\n' "${rows[@]}" | grep -c '| FAIL ')
s=$(printf '%s\n' "${rows[@]}" | grep -c '| SKIP ')
echo "$p passed, $f failed, $s skipped"
exit $failed
