# SPDX-License-Identifier: MIT
# gpu-lib.sh - shared by check-gpu.sh and bench-gpu.sh (sourced): result
# rows, running a case, and ratios of medians from bench_ipc tables.
# Run from the repository root. Sets BUILD, OUT (GPU binaries), LOGS, LIB,
# RUN (the launcher) and exports IPCBYVAL_LIB.
BUILD=${BUILD:-build}
OUT=${GPU_OUT:-$BUILD/test/gpu}
LOGS="$BUILD/gpu-logs"
mkdir -p "$LOGS"
LIB="$PWD/$BUILD/libipcbyval.so.1"
RUN="$PWD/scripts/ipcbyval-run"
export IPCBYVAL_LIB="$LIB"
declare -a rows
failed=0
row() { rows+=("$(printf '| %-58s | %-6s | %s' "$1" "$2" "$3")"); [ "$2" = FAIL ] && failed=1; }

# run NAME EXPECT(ok|fail) PATTERN CMD...
run() {
    local name=$1 expect=$2 pat=$3; shift 3
    local log="$LOGS/$(echo "$name" | tr -c 'A-Za-z0-9_.-' '_').log"
    timeout 90 "$@" >"$log" 2>&1
    local rc=$?
    local last; last=$(grep -v '^\[ipcbyval' "$log" | tail -1 | cut -c1-90)
    if [ "$expect" = ok ] && [ $rc -eq 0 ] && grep -q "$pat" "$log"; then row "$name" PASS "$last"
    elif [ "$expect" = fail ] && [ $rc -ne 0 ] && grep -q "$pat" "$log"; then row "$name" PASS "fails as expected: $last"
    else row "$name" FAIL "rc=$rc: $last"; fi
}

# cpu_sample N: at most N of the vCPUs this process may run on, spread over
# them (the first, the last and evenly between), in increasing order.
cpu_sample() {
    awk -v n="$1" -v np="$(nproc)" '
        /^Cpus_allowed_list:/ {
            k = split($2, parts, ",")
            for (i = 1; i <= k; i++) {
                split(parts[i], r, "-")
                hi = (r[2] == "") ? r[1] : r[2]
                for (c = r[1] + 0; c <= hi + 0; c++) cpu[m++] = c
            }
        }
        END {
            if (m == 0) for (c = 0; c < np; c++) cpu[m++] = c
            k = m < n ? m : n
            for (i = 0; i < k; i++) {
                j = (k == 1) ? 0 : int(i * (m - 1) / (k - 1) + 0.5)
                printf "%s%d", (i ? " " : ""), cpu[j]
            }
            print ""
        }' /proc/self/status 2>/dev/null
}

# Median column of the row whose name starts with $2 in bench log $1.
med() { grep -F "| $2" "$1" | head -1 | awk -F'|' '{gsub(/ /,"",$4); print $4}'; }
# ratio NAME TARGET NUM DEN [UNIT]: a row comparing two medians measured in
# this run (UNIT defaults to us).
ratio() {
    local name=$1 target=$2 num=$3 den=$4 unit=${5:-us}
    if [ -z "$num" ] || [ -z "$den" ]; then row "$name" FAIL "bench rows missing (see $LOGS/bench-*.log)"; return; fi
    local r; r=$(awk -v a="$num" -v b="$den" 'BEGIN { if (b > 0) printf "%.0f", a / b; else print 1e9 }')
    local res=PASS; awk -v r="$r" -v t="$target" 'BEGIN { exit !(r >= t) }' || res=FAIL
    row "$name (target >= ${target}x)" $res "$num $unit / $den $unit = ${r}x"
}

# gpu_summary TITLE: the rows so far as a table, then their counts (a
# script run by itself, outside check-gpu.sh's own summary).
gpu_summary() {
    echo
    echo "== summary ($1)"
    printf '| %-58s | %-6s | %s\n' "check" "result" "detail"
    printf '%s\n' "${rows[@]}"
    echo "$(printf '%s\n' "${rows[@]}" | grep -c '| PASS ') passed," \
        "$(printf '%s\n' "${rows[@]}" | grep -c '| FAIL ') failed," \
        "$(printf '%s\n' "${rows[@]}" | grep -c '| SKIP ') skipped"
}
