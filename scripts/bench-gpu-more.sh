#!/bin/bash
# SPDX-License-Identifier: MIT
# bench-gpu-more.sh - the rows of make bench-gpu that issue 23 asks for:
#   1. the cached re-open as a real program runs it: two exec'd processes
#      (test/gpu/gpu_cycle), static cudart (--api rt) and the driver API
#      (--api drv), legacy and VMM, batches of 10,000 open+close cycles,
#      the importer pinned to each sampled vCPU in turn (BGM_CPUS: at most
#      BGM_NCPUS, 8, spread over the host, first and last included),
#      BGM_ROUNDS rounds (3) interleaving the driver's own cycle and
#      ipcbyval's, the median of the rounds per vCPU, min/median/max over
#      the vCPUs;
#   2. the first open of a VMM reservation of 1, 8, 64 and 512 chunks of
#      2 MiB (test/gpu/vmm_cold): ipcbyval's, split (fetch, import, map),
#      beside the driver-only sum for the same chunks and PyTorch's own
#      import of an expandable segment of the same size; and a second
#      exporter's first open in the warm importer (what first contact
#      costs once per process vs once per exporter);
#   3. a 32 MiB tensor at the end of a PyTorch pool of 1, 16 and 64 GiB
#      (BGM_POOLS; a pool the GPU has no memory for is a SKIP row that
#      says so): ipcbyval's first open and cached re-open beside PyTorch's
#      own import and re-import of the same tensor, and the first open of
#      the largest pool against the 1 GiB one
#      (test/gpu/frameworks/torch_pool_bench.py);
#   4. a profile of the driver-API cached cycle: perf stat + record where
#      perf is installed; else "perf: not installed" and test/bench/pmuprof
#      (the PMU's instruction, cycle and locked-load counts per cycle, and
#      the top symbols); saved under $OUT when the caller set it.
# Sourced by bench-gpu.sh after gpu-lib.sh (bgm_all adds its rows), or
# run alone: BENCH_GPU_DOUBLE=1 scripts/bench-gpu-more.sh runs it against
# the CUDA double of make check (test/cudadrv, no GPU: tests the logic;
# the runtime and PyTorch rows are skipped there).
BGM_RESULTS=${BGM_RESULTS:-${OUT:-}} # the caller's $OUT, before gpu-lib.sh takes the name
# BGM_PERF=name: the perf(1) to use (a name not installed tests the
# fallback where perf is missing, as on the GPU host).

bgm_build() {
    make -s "$BUILD/test/bench/pmuprof" >>"$LOGS/bench-build.log" 2>&1 # optional (bgm_perf)
    make -C test/gpu bench-c OUT="$PWD/$OUT" >>"$LOGS/bench-build.log" 2>&1 ||
        { row "bench-gpu-more: build gpu_cycle, vmm_cold" FAIL "see $LOGS/bench-build.log"; return 1; }
}

bgm_pin() { if command -v taskset >/dev/null; then taskset -c "$1" "${@:2}"; else "${@:2}"; fi; }

# the median line of the lines on stdin, by their first number
bgm_midline() { sort -g | awk '{ l[NR] = $0 } END { if (NR) print l[int((NR + 1) / 2)] }'; }

# min median max of the numbers on stdin
bgm_mmm() { sort -g | awk '{ v[NR] = $1 } END { if (NR) printf "%s %s %s", v[1], v[int((NR + 1) / 2)], v[NR] }'; }

# bgm_cycle_run LOG API MEM BATCH BATCHES PRELOAD(0|1): the exporter (exec'd,
# waits on its stdin), then one pinned importer per vCPU; "cpu median" lines
# into LOG.
bgm_cycle_run() {
    local log=$1 api=$2 mem=$3 batch=$4 batches=$5 pre=$6 h c m
    local -a run=()
    [ "$pre" = 1 ] && run=("$RUN")
    : >"$log"
    coproc BGM_EXP { exec "${run[@]}" "$OUT/gpu_cycle" export --mem "$mem" --api "$api" 2>>"$log.err"; }
    read -r -t 60 _ h <&"${BGM_EXP[0]}" || h=""
    for c in $BGM_CPUS; do
        [ -n "$h" ] || break
        m=$(bgm_pin "$c" timeout 120 "${run[@]}" "$OUT/gpu_cycle" import --handle "$h" --api "$api" \
            --batch "$batch" --batches "$batches" 2>>"$log.err" | awk '$1 == "cycle_us" { print $3 }')
        [ -n "$m" ] && echo "$c $m" >>"$log"
    done
    eval "exec ${BGM_EXP[1]}>&-"
    wait "$BGM_EXP_PID" 2>/dev/null
}

# "cpu value" lines on stdin, several per vCPU (one a round): the median
# per vCPU, in vCPU order (no vCPU dropped).
bgm_permed() {
    sort -k1,1n -k2,2g | awk '{ if (!($1 in n)) o[++k] = $1; v[$1, ++n[$1]] = $2 }
        END { for (i = 1; i <= k; i++) print o[i], v[o[i], int((n[o[i]] + 1) / 2)] }'
}

# The cached cycle against the driver's own cycle, per sampled vCPU. A shared
# host's noise hits one run on one vCPU (2x outliers on single vCPUs, on
# either side, on the GPU host): so BGM_ROUNDS rounds (3), each the
# driver's cycle then ipcbyval's legacy then VMM on every vCPU, and the
# median of the rounds per vCPU and side; min/median/max over the vCPUs.
bgm_cycles() {
    local api mem f r nb=5000 nbs=1 apis="rt drv" ratios per rounds=${BGM_ROUNDS:-3} t0=$SECONDS
    [ -n "${BENCH_GPU_DOUBLE:-}" ] && { nb=200 apis=drv; }
    [ -n "${BENCH_GPU_DOUBLE:-}" ] && row "static cudart cached re-open (exec'd pair)" INFO \
        "SKIP: the CUDA double cannot start the runtime: GPU host only"
    echo "-- cached re-open, two exec'd processes, importer on vCPUs $BGM_CPUS;" \
        "$rounds rounds (driver, legacy, VMM), median of the rounds per vCPU"
    for api in $apis; do
        for f in native legacy vmm; do : >"$LOGS/bgm-$api-$f.rounds"; done
        for r in $(seq "$rounds"); do
            # The driver's own cycle (legacy: natively VMM memory has no
            # IPC handle), 5,000 cycles a batch on the GPU: ~0.25 s a vCPU.
            bgm_cycle_run "$LOGS/bgm-$api-native.run" "$api" legacy "$nb" "$nbs" 0
            cat "$LOGS/bgm-$api-native.run" >>"$LOGS/bgm-$api-native.rounds"
            for mem in legacy vmm; do
                bgm_cycle_run "$LOGS/bgm-$api-$mem.run" "$api" "$mem" 10000 5 1
                cat "$LOGS/bgm-$api-$mem.run" >>"$LOGS/bgm-$api-$mem.rounds"
            done
        done
        for f in native legacy vmm; do
            bgm_permed <"$LOGS/bgm-$api-$f.rounds" >"$LOGS/bgm-$api-$f.log"
        done
        for mem in legacy vmm; do
            # per vCPU: driver cycle / cached cycle
            ratios=$(awk 'NR == FNR { n[$1] = $2; next } ($1 in n) && $2 > 0 { printf "%.1f\n", n[$1] / $2 }' \
                "$LOGS/bgm-$api-native.log" "$LOGS/bgm-$api-$mem.log" | bgm_mmm)
            per=$(awk '{ print $2 }' "$LOGS/bgm-$api-$mem.log" | bgm_mmm)
            local name="$([ $api = rt ] && echo "static cudart" || echo "driver API") $mem cached re-open, worst vCPU (>= 300x)"
            if [ -z "$ratios" ] || [ -z "$per" ]; then
                row "$name" FAIL "no cycles (see $LOGS/bgm-$api-*.run.err)"
                continue
            fi
            set -- $ratios
            local res=PASS; awk -v r="$1" 'BEGIN { exit !(r >= 300) }' || res=FAIL
            local nat; nat=$(awk '{ print $2 }' "$LOGS/bgm-$api-native.log" | bgm_mmm)
            row "$name" $res "median of $rounds rounds per vCPU; min/med/max over $(wc -l <"$LOGS/bgm-$api-$mem.log") vCPUs: $(echo $per | tr ' ' /) us, driver $(echo $nat | tr ' ' /) us, ratio $1/$2/$3x"
            echo "$api $mem per vCPU (cpu us, median of $rounds rounds): $(tr '\n' ' ' <"$LOGS/bgm-$api-$mem.log")"
            echo "$api $mem every round (cpu us): $(awk '{ printf "%s:%s ", $1, $2 }' "$LOGS/bgm-$api-$mem.rounds")"
        done
        echo "$api driver per vCPU (cpu us, median of $rounds rounds): $(tr '\n' ' ' <"$LOGS/bgm-$api-native.log")"
        echo "$api driver every round (cpu us): $(awk '{ printf "%s:%s ", $1, $2 }' "$LOGS/bgm-$api-native.rounds")"
    done
    echo "-- cached re-open rows took $((SECONDS - t0)) s"
}

# The IPCBYVAL_STATS split of one vmm_cold run's log: "fetch import map" us.
bgm_split() {
    awk '/stats: open_misses/ { m += $6 } /stats: miss_fetch_ns/ { f += $6 }
         /stats: miss_import_ns/ { i += $6 } /stats: miss_map_ns/ { p += $6 }
         END { if (m) printf "%.0f %.0f %.0f", f / 1e3, i / 1e3, p / 1e3 }' "$1"
}

bgm_cold() {
    local n k o d tor tlog="$LOGS/bgm-torch.log" reps=3
    echo "-- first VMM open of N chunks of 2 MiB (median of $reps runs each)"
    # PyTorch's own import, every size in one run (a fresh consumer each).
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True timeout 120 python3 -u \
        test/gpu/frameworks/torch_vmm_import.py 2 16 128 1024 >"$tlog" 2>&1
    local torch_skip=""
    grep -q '^OK torch_vmm_import' "$tlog" ||
        torch_skip=$(grep -m1 '^SKIP\|^ERROR\|Error' "$tlog" || tail -1 "$tlog")
    for n in 1 8 64 512; do
        : >"$LOGS/bgm-cold-$n.txt"
        for k in $(seq $reps); do
            IPCBYVAL_STATS=1 timeout 120 "$RUN" "$OUT/vmm_cold" --chunks "$n" --mode byval \
                >"$LOGS/bgm-cold-$n-$k.log" 2>&1
            o=$(awk '$1 == "open_us" { print $2 }' "$LOGS/bgm-cold-$n-$k.log")
            d=$(timeout 120 "$OUT/vmm_cold" --chunks "$n" --mode driver 2>>"$LOGS/bgm-cold-$n.err" |
                awk '$1 == "driver_us" { print $5, $2, $3, $4 }')
            [ -n "$o" ] && [ -n "$d" ] && echo "$o $(bgm_split "$LOGS/bgm-cold-$n-$k.log") $d" >>"$LOGS/bgm-cold-$n.txt"
        done
        # the run of median open time: open fetch import map | dsum dimport dmap daccess
        local mid; mid=$(bgm_midline <"$LOGS/bgm-cold-$n.txt")
        local name="first VMM open, $n x 2 MiB (<= 1.1x driver, <= 1.0x torch)"
        if [ -z "$mid" ]; then
            row "$name" FAIL "no result (see $LOGS/bgm-cold-$n-*.log)"
            continue
        fi
        set -- $mid
        local r1 res=PASS detail
        r1=$(awk -v a="$1" -v b="$5" 'BEGIN { printf "%.2f", a / b }')
        awk -v r="$r1" 'BEGIN { exit !(r <= 1.1) }' || res=FAIL
        detail="$1 us (fetch $2, import $3, map $4) vs driver-only $5 us (import $6, map $7, access $8) = ${r1}x"
        tor=$(awk -v m=$((2 * n)) '$1 == "torch_import_us" && $2 == m { print $3 }' "$tlog")
        if [ -n "$tor" ]; then
            local r2; r2=$(awk -v a="$1" -v b="$tor" 'BEGIN { printf "%.2f", a / b }')
            awk -v r="$r2" 'BEGIN { exit !(r <= 1.0) }' || res=FAIL
            detail+="; torch $tor us = ${r2}x"
        else
            detail+="; torch column skipped: ${torch_skip:-no row}"
        fi
        row "$name" $res "$detail"
        # Once per process vs once per exporter: the same first open, then a
        # second exporter's in the now warm importer.
        local w; w=$(for k in $(seq $reps); do
            timeout 120 "$RUN" "$OUT/vmm_cold" --chunks "$n" --mode byval --exporters 2 2>/dev/null |
                awk '$1 == "open_us" { o = $2 } $1 == "open2_us" { t = $2 } END { if (o && t) print t, o }'
        done | bgm_midline)
        [ -n "$w" ] && row "  $n x 2 MiB: first contact in a warm importer" INFO \
            "${w%% *} us (another exporter, same process) vs ${w##* } us (fresh process); driver-only $5 us"
    done
}

# A 32 MiB tensor at the end of a PyTorch pool of each size in BGM_POOLS.
bgm_pool() {
    local log="$LOGS/bgm-pool.log" t0=$SECONDS g line skip pools=${BGM_POOLS:-1,16,64}
    local name1 name2 r res first1="" firstn="" gn=""
    if [ -n "${BENCH_GPU_DOUBLE:-}" ]; then
        row "torch pool: first open, re-open beside torch" INFO "SKIP: needs PyTorch on a GPU"
        return
    fi
    echo "-- a 32 MiB tensor at the end of a PyTorch pool of $pools GiB: first open and" \
        "cached re-open, ipcbyval beside PyTorch's own import"
    timeout -k 5 420 env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "$RUN" python3 -u \
        test/gpu/frameworks/torch_pool_bench.py --pools "$pools" >"$log" 2>&1
    grep '^INFO\|^pool\|^ERROR\|^SKIP' "$log"
    if grep -q '^SKIP' "$log"; then
        row "torch pool: first open, re-open beside torch" SKIP "$(grep -m1 '^SKIP' "$log" | cut -c1-100)"
        return
    fi
    for g in ${pools//,/ }; do
        name1="32 MiB, $g GiB pool: first open (<= 1.0x torch)"
        name2="32 MiB, $g GiB pool: cached re-open (>= 100x torch)"
        skip=$(awk -v g="$g" '$1 == "pool_skip" && $2 == g { $1 = $2 = ""; sub(/^ +/, ""); print }' "$log")
        line=$(awk -v g="$g" '$1 == "pool" && $2 == g' "$log")
        if [ -n "$skip" ]; then
            row "$name1" SKIP "$skip"
            row "$name2" SKIP "$skip"
            continue
        fi
        # pool G byval_first_us A byval_reopen_us B torch_first_us C
        # torch_reimport_us D export_us E pages N
        set -- $line
        if [ $# -lt 14 ] || [ "$4" = nan ] || [ "$8" = nan ]; then
            r="no result: $(grep -m1 "^ERROR pool $g" "$log" || tail -1 "$log")"
            row "$name1" FAIL "${r:0:150} (see $log)"
            row "$name2" FAIL "${r:0:150}"
            continue
        fi
        r=$(awk -v a="$4" -v b="$8" 'BEGIN { printf "%.3f", a / b }')
        res=PASS; awk -v r="$r" 'BEGIN { exit !(r <= 1.0) }' || res=FAIL
        row "$name1" $res "ipcbyval $4 us vs torch $8 us = ${r}x (${14} pages of the pool; get ${12} us)"
        r=$(awk -v a="${10}" -v b="$6" 'BEGIN { if (b > 0) printf "%.0f", a / b; else print 0 }')
        res=PASS; awk -v r="$r" 'BEGIN { exit !(r >= 100) }' || res=FAIL
        row "$name2" $res "ipcbyval $6 us vs torch re-import ${10} us = ${r}x"
        [ -z "$first1" ] && first1=$4
        firstn=$4 gn=$g
    done
    if [ -n "$first1" ] && [ -n "$gn" ] && [ "$gn" != "${pools%%,*}" ]; then
        r=$(awk -v a="$firstn" -v b="$first1" 'BEGIN { printf "%.2f", a / b }')
        res=PASS; awk -v r="$r" 'BEGIN { exit !(r <= 2.0) }' || res=FAIL
        row "first open: $gn GiB pool vs ${pools%%,*} GiB (<= 2x)" $res "$firstn us / $first1 us = ${r}x"
    fi
    echo "-- torch pool rows took $((SECONDS - t0)) s"
}

# What pmuprof counted in a run of the cached cycle with ITERS cycles:
# "instructions cycles locked-loads" ("n/a" where it could not count).
bgm_pmu_counts() {
    local iters=$1 log=$2
    bgm_pin 0 "$BUILD/test/bench/pmuprof" -e cycles -D 400 -n 25 -- "$RUN" "$OUT/gpu_cycle" \
        import --handle "$BGM_H" --api drv --batch "$iters" --batches 1 >"$log" 2>&1
    awk '/^pmuprof: counted/ { for (k = 3; k < NF; k++) v[$k] = $(k + 1)
        print v["instructions"], v["cycles"], v["locked-loads"] }' "$log"
}

bgm_perf() {
    local dir=${BGM_RESULTS:-$LOGS} top="" per=""
    mkdir -p "$dir"
    coproc BGM_EXP { exec "$RUN" "$OUT/gpu_cycle" export --mem legacy --api drv 2>/dev/null; }
    read -r -t 60 _ BGM_H <&"${BGM_EXP[0]}" || BGM_H=""
    local imp=("$RUN" "$OUT/gpu_cycle" import --handle "$BGM_H" --api drv --batch 100000 --batches 10)
    if [ -z "$BGM_H" ]; then
        row "profile, driver-API cached cycle" FAIL "no handle from gpu_cycle export"
    elif command -v "${BGM_PERF:-perf}" >/dev/null; then
        echo "-- perf profile of the driver-API cached cycle (legacy), into $dir"
        bgm_pin 0 perf stat -d -o "$dir/perf-stat-cycle.txt" -- "${imp[@]}" >/dev/null 2>&1
        # cycles where the machine has a PMU; the CPU clock where it has none
        bgm_pin 0 perf record -g -o "$dir/perf-cycle.data" -- "${imp[@]}" >/dev/null 2>&1 ||
            bgm_pin 0 perf record -e cpu-clock -g -o "$dir/perf-cycle.data" -- "${imp[@]}" >/dev/null 2>&1
        perf report -i "$dir/perf-cycle.data" --stdio --no-children --sort dso,sym -g none \
            >"$dir/perf-report-cycle.txt" 2>/dev/null
        grep -E 'task-clock|cycles|instructions' "$dir/perf-stat-cycle.txt" 2>/dev/null | head -4
        top=$(grep -E '^ +[0-9.]+%' "$dir/perf-report-cycle.txt" 2>/dev/null | head -4 |
            awk '{ printf "%s%s %s", (NR > 1 ? ", " : ""), $1, $NF }')
    else
        echo "perf: not installed"
        # pmuprof (test/bench): the PMU's own counts, per cycle from two
        # runs of different lengths (start-up cancels out), and a profile.
        if [ -x "$BUILD/test/bench/pmuprof" ]; then
            echo "-- pmuprof profile of the driver-API cached cycle (legacy), into $dir"
            local a b
            a=$(bgm_pmu_counts 1000000 "$dir/pmuprof-cycle-1m.txt")
            b=$(bgm_pmu_counts 5000000 "$dir/pmuprof-cycle.txt")
            per=$(echo "$a $b" | awk '{ n = 4000000; split("instructions cycles locked-loads", w)
                for (k = 1; k <= 3; k++) if ($k != "n/a" && $(k + 3) != "n/a" && $(k + 3) > 0)
                    printf "%s%.1f %s", (o++ ? ", " : ""), ($(k + 3) - $k) / n, w[k] }')
            top=$(grep -E '^ +[0-9.]+%' "$dir/pmuprof-cycle.txt" | head -4 |
                awk '{ printf "%s%s %s", (NR > 1 ? ", " : ""), $1, $2 }')
            sed -n '1,40p' "$dir/pmuprof-cycle.txt"
        fi
    fi
    eval "exec ${BGM_EXP[1]}>&-"
    wait "$BGM_EXP_PID" 2>/dev/null
    local name="profile, driver-API cached cycle"
    if [ -n "$top" ]; then
        row "$name" INFO "${per:+per cycle: $per; }top: $top (full: $dir)"
    elif [ -n "$BGM_H" ]; then
        row "$name" INFO "$(command -v "${BGM_PERF:-perf}" >/dev/null && echo "perf ran, no samples" || echo "perf: not installed, no pmuprof") (see $dir)"
    fi
}

bgm_all() {
    # A sample of the vCPUs: every vCPU 3 rounds on a 32-vCPU host took
    # make bench-gpu past 9 minutes.
    BGM_CPUS=${BGM_CPUS:-$(cpu_sample "${BGM_NCPUS:-8}")}
    echo "-- vCPUs sampled for the per-vCPU rows: $BGM_CPUS (of $(nproc))"
    bgm_build || return
    bgm_cycles
    local t0=$SECONDS
    bgm_cold
    echo "-- first VMM open rows took $((SECONDS - t0)) s"
    bgm_pool
    bgm_perf
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then # run alone
    set -u
    cd "$(dirname "$0")/.."
    . scripts/gpu-lib.sh
    if [ -n "${BENCH_GPU_DOUBLE:-}" ]; then
        make -s lib "$BUILD/test/cudadrv/libcuda.so.1" >"$LOGS/bench-build.log" 2>&1 ||
            { tail -5 "$LOGS/bench-build.log"; exit 1; }
        export LD_LIBRARY_PATH="$PWD/$BUILD/test/cudadrv${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    fi
    t0=$SECONDS
    bgm_all
    echo "== bench-gpu-more summary ($((SECONDS - t0)) s)"
    printf '| %-58s | %-6s | %s\n' "measure" "met?" "numbers"
    printf '%s\n' "${rows[@]}"
fi
