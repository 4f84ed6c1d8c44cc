#!/bin/bash
# SPDX-License-Identifier: MIT
# bench-gpu.sh - the GPU half of the benchmarks (make bench-gpu), on the
# GPU machine: CUDA IPC latencies natively and under ipcbyval (bench_ipc),
# the import cache's hit throughput from 1 to 16 threads on its cores, and
# bench-gpu-more.sh's rows (exec'd static-cudart pairs on a sample of
# vCPUs, the first VMM open at 1-512 chunks beside the driver and PyTorch,
# a 32 MiB tensor in PyTorch pools of 1-64 GiB beside PyTorch's own
# import, a perf profile of the cached cycle under $OUT).
# One table; ratios come from medians of this run. The whole must end
# within 8 minutes (a row says how long it took): per-vCPU rows run on a
# sample of the vCPUs, which the output names.
set -u
cd "$(dirname "$0")/.."
BGM_RESULTS=${OUT:-} # where the perf profile goes (the caller's $OUT)
. scripts/gpu-lib.sh # BUILD, OUT, LOGS, LIB, RUN; rows and ratios
. scripts/bench-gpu-more.sh # bgm_all: issue 23's rows (exec'd pairs, cold VMM, perf)
t_start=$SECONDS

make -j"$(nproc)" lib "$BUILD/test/bench/bench_lru" "$BUILD/test/bench/bench_pidfd" \
    "$BUILD/test/cudadrv/cu_pair" EXTRA_INC="${EXTRA_INC:-}" >"$LOGS/bench-build.log" 2>&1 &&
    make -C test/gpu "$PWD/$OUT/bench_ipc" OUT="$PWD/$OUT" >>"$LOGS/bench-build.log" 2>&1 ||
    { tail -20 "$LOGS/bench-build.log"; exit 1; }

B="$OUT/bench_ipc"
# A cached cycle costs ~100-200 ns and the GPU host's vCPUs differ by up to
# 2x at that scale (some share their core with other load; measured: the
# same binary at 0.11 us on one vCPU, 0.21 us on another). So the native
# and the ipcbyval run are pinned to the same vCPU, on several vCPUs
# spread over the machine, and each ratio is the median of the per-vCPU
# ratios (every vCPU's numbers are listed below the table).
CPUS=${BENCH_GPU_CPUS:-$(cpu_sample "${BENCH_GPU_NCPUS:-5}")}
pin() { if command -v taskset >/dev/null; then taskset -c "$1" "${@:2}"; else "${@:2}"; fi; }
echo "-- bench_ipc natively and under ipcbyval, pinned to vCPUs $CPUS (of $(nproc))"
t_sec=$SECONDS
for c in $CPUS; do
    pin "$c" timeout 120 "$B" --iters 500 >"$LOGS/bench-native-$c.log" 2>&1
    pin "$c" timeout 120 "$RUN" "$B" --iters 20000 >"$LOGS/bench-ipcbyval-$c.log" 2>&1
done
echo "-- pinned bench_ipc runs took $((SECONDS - t_sec)) s"
first=${CPUS%% *}
echo "-- native (vCPU $first)"; grep '^|\|^bench' "$LOGS/bench-native-$first.log"
echo "-- under ipcbyval (vCPU $first)"; grep '^|\|^bench' "$LOGS/bench-ipcbyval-$first.log"
NB="$LOGS/bench-native-$first.log" IB="$LOGS/bench-ipcbyval-$first.log"
# pinned_ratio NAME NATIVE_ROW IPCBYVAL_ROW: median over the vCPUs of
# native / ipcbyval (cycles timed in batches: no clock read per call).
spread=""
pinned_ratio() {
    local name=$1 nrow=$2 irow=$3 c n i list="" rs=""
    for c in $CPUS; do
        n=$(med "$LOGS/bench-native-$c.log" "$nrow") i=$(med "$LOGS/bench-ipcbyval-$c.log" "$irow")
        [ -n "$n" ] && [ -n "$i" ] || continue
        rs+="$(awk -v a="$n" -v b="$i" 'BEGIN { if (b > 0) printf "%.1f", a / b }') $n $i"$'\n'
        list+="cpu$c $n/$i "
    done
    spread+="$name per vCPU (native/ipcbyval us): $list"$'\n'
    local mid; mid=$(printf '%s' "$rs" | sort -g | awk '{ l[NR] = $0 } END { if (NR) print l[int((NR + 1) / 2)] }')
    if [ -z "$mid" ]; then row "$name (target >= 300x)" FAIL "bench rows missing (see $LOGS/bench-*.log)"; return; fi
    set -- $mid
    local res=PASS; awk -v r="$1" 'BEGIN { exit !(r >= 300) }' || res=FAIL
    row "$name (target >= 300x)" $res "median of $(echo $CPUS | wc -w) vCPUs: $2 us / $3 us = $1x"
}
pinned_ratio "legacy: driver open+close vs cached re-open" \
    "legacy cuIpcOpen+Close cycle" "legacy cuIpcOpen+Close cycle"
pinned_ratio "VMM: driver open+close (legacy) vs cached by-value re-open" \
    "legacy cuIpcOpen+Close cycle" "VMM cuIpcOpen+Close cycle"
ratio "VMM export: cuMemExportToShareableHandle vs cached get" 300 \
    "$(med "$NB" "VMM cuMemExportToShareableHandle")" "$(med "$IB" "VMM cuIpcGetMemHandle")"

# Before/after in one run: a baseline tree (the revision before a change,
# carried as .gpu-deps/baseline by make gpu-deps BASELINE=<rev>) built here, its
# cached re-open timed beside ours on the same vCPUs.
BASE_SRC=${BENCH_GPU_BASELINE:-.gpu-deps/baseline}
if [ -f "$BASE_SRC/Makefile" ]; then
    make -s -C "$BASE_SRC" -j"$(nproc)" lib EXTRA_INC="${EXTRA_INC:-}" >"$LOGS/bench-baseline-build.log" 2>&1
    BASE_LIB="$BASE_SRC/build/libipcbyval.so.1"
    if [ -e "$BASE_LIB" ]; then
        BCPUS=$(echo $CPUS | cut -d' ' -f1-3)
        echo "-- cached re-open: baseline vs this tree, pinned pairs on vCPUs $BCPUS"
        for c in $BCPUS; do
            for k in 1 2; do
                pin "$c" timeout 60 env IPCBYVAL_LIB="$PWD/$BASE_LIB" "$RUN" "$B" --iters 20000 \
                    >"$LOGS/bench-baseline-$c-$k.log" 2>&1
                pin "$c" timeout 60 "$RUN" "$B" --iters 20000 >"$LOGS/bench-after-$c-$k.log" 2>&1
            done
        done
        for what in legacy VMM; do
            rs="" list=""
            for c in $BCPUS; do
                for k in 1 2; do
                    b=$(med "$LOGS/bench-baseline-$c-$k.log" "$what cuIpcOpen+Close cycle")
                    a=$(med "$LOGS/bench-after-$c-$k.log" "$what cuIpcOpen+Close cycle")
                    [ -n "$a" ] && [ -n "$b" ] || continue
                    rs+="$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", a / b }') $b $a"$'\n'
                done
            done
            mid=$(printf '%s' "$rs" | sort -g | awk '{ l[NR] = $0 } END { if (NR) print l[int((NR + 1) / 2)] }')
            if [ -z "$mid" ]; then
                row "$what cached re-open: this tree vs baseline (<= 1.10x)" FAIL "rows missing (see $LOGS/bench-baseline-*.log)"
                continue
            fi
            set -- $mid
            res=PASS; awk -v r="$1" 'BEGIN { exit !(r <= 1.10) }' || res=FAIL
            row "$what cached re-open: this tree vs baseline (<= 1.10x)" $res "median of pinned pairs: $3 us / $2 us = $1x"
        done
    else
        row "cached re-open vs baseline" FAIL "baseline did not build (see $LOGS/bench-baseline-build.log)"
    fi
fi

echo "-- cold open: what ipcbyval adds to the driver's import"
"$BUILD/test/bench/bench_pidfd" >"$LOGS/bench-pidfd.log" 2>&1
cat "$LOGS/bench-pidfd.log"
pf() { awk -v k="$1" '$1 == k { print $2 }' "$LOGS/bench-pidfd.log"; }
res=$(pf resolve_us) raw=$(pf pidfd_raw_us) known=$(pf known_us) kraw=$(pf getfd_raw_us)
for r in "exporter known: getfd + fd check|$known|raw pidfd_getfd+close $kraw" \
    "first contact: + pidfd_open, identity|$res|raw pidfd_open+getfd+closes $raw"; do
    IFS='|' read -r what v detail <<<"$r"
    if [ -n "$v" ]; then
        met=$(awk -v x="$v" 'BEGIN { print (x <= 2) ? "PASS" : "FAIL" }')
        row "cold-open overhead, $what (<= 2 us)" "$met" "$v us ($detail us)"
    else
        row "cold-open overhead, $what (<= 2 us)" FAIL "bench_pidfd failed: $(tail -1 "$LOGS/bench-pidfd.log")"
    fi
done

echo "-- a first VMM open (3 chunks), split by IPCBYVAL_STATS"
IPCBYVAL_STATS=1 timeout 60 "$RUN" "$BUILD/test/cudadrv/cu_pair" --mem vmm-multi --route cudart \
    --iters 3 >"$LOGS/bench-split.log" 2>&1
grep -E 'stats: (open_misses|miss_)' "$LOGS/bench-split.log"
split=$(awk '/stats: open_misses/ { m += $6 } /stats: miss_fetch_ns/ { f += $6 }
             /stats: miss_import_ns/ { i += $6 } /stats: miss_map_ns/ { p += $6 }
             END { if (m) printf "fd fetch %.1f us, driver import %.1f us, map %.1f us", f / m / 1e3, i / m / 1e3, p / m / 1e3 }' \
    "$LOGS/bench-split.log")
if [ -n "$split" ]; then row "first VMM open, per miss (reported)" INFO "$split"
else row "first VMM open, per miss (reported)" FAIL "no statistics: $(tail -1 "$LOGS/bench-split.log")"; fi

echo "-- import cache hit throughput, 1..16 threads ($(nproc) cores)"
"$BUILD/test/bench/bench_lru" --threads 1,2,4,8,16 >"$LOGS/bench-lru.log" 2>&1
grep -E '^lru_(threads|hit_ns|bytes)' "$LOGS/bench-lru.log"
t1=$(awk '$1 == "lru_threads" && $2 == 1 { print $3 }' "$LOGS/bench-lru.log")
t16=$(awk '$1 == "lru_threads" && $2 == 16 { print $3 }' "$LOGS/bench-lru.log")
ratio "cache hits/s: 16 threads vs 1" 8 "$t16" "$t1" "hits/s"

bgm_all

took=$((SECONDS - t_start))
res=PASS; [ "$took" -lt 480 ] || res=FAIL
row "make bench-gpu wall time (< 480 s)" $res "$took s on $(nproc) vCPUs; sampled: bench_ipc $CPUS, per-vCPU rows $BGM_CPUS"

echo
printf '%s' "$spread"
echo "== bench-gpu summary ($((SECONDS - t_start)) s)"
printf '| %-58s | %-6s | %s\n' "measure" "met?" "numbers"
printf '%s\n' "${rows[@]}"
