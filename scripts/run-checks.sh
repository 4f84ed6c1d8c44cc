#!/bin/bash
# SPDX-License-Identifier: MIT
# run-checks.sh UNIT_TEST... -- INTEGRATION_SCRIPT...
# Runs cmocka unit tests and integration scripts, one table row per suite
# as it ends (with its time), then the log folder and the closing line
# "N passed, N failed, N skipped".
# Integration scripts print "PASS: name", "FAIL: name: why" or
# "SKIP: name: why" per case and exit 0, 1 or 77.
set -u
BUILD=${BUILD:-build}
export BUILD
units=()
integs=()
seen_sep=0
for a in "$@"; do
    if [ "$a" = "--" ]; then seen_sep=1; continue; fi
    if [ $seen_sep = 0 ]; then units+=("$a"); else integs+=("$a"); fi
done

logdir="$BUILD/test-logs"
mkdir -p "$logdir"
pass=0 fail=0 skip=0
failed_names=()
t_start=$(date +%s%N)

count() { grep -cE "$1" "$2" 2>/dev/null || true; }
# Seconds since $1 (date +%s%N), one decimal.
since() { awk -v a="$1" -v b="$(date +%s%N)" 'BEGIN { printf "%.1f", (b - a) / 1e9 }'; }
# One line per suite as it finishes: nobody waits a minute in silence.
row() { printf '%-34s %6s %6s %7s %7s s\n' "$@"; }

echo "ipcbyval tests${SAN:+ (SAN=$SAN)}: one line per suite as it ends"
row "suite" "passed" "failed" "skipped" "time" | sed 's/ s$/  /'
printf '%s\n' "------------------------------------------------------------------"

for t in "${units[@]}"; do
    name=$(basename "$t")
    log="$logdir/unit-$name.log" # integration tests may share the name
    t0=$(date +%s%N)
    "$t" >"$log" 2>&1
    rc=$?
    # cmocka summary lines: "[  PASSED  ] 7 test(s)." / "[  FAILED  ] 1 test(s)..."
    p=$(sed -nE 's/^\[  PASSED  \] ([0-9]+) test.*/\1/p' "$log" | awk '{s+=$1} END {print s+0}')
    f=$(sed -nE 's/^\[  FAILED  \] ([0-9]+) test.*/\1/p' "$log" | awk '{s+=$1} END {print s+0}')
    s=$(sed -nE 's/^\[  SKIPPED \] ([0-9]+) test.*/\1/p' "$log" | awk '{s+=$1} END {print s+0}')
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi # crashed before its summary
    pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + s))
    row "unit/$name" "$p" "$f" "$s" "$(since "$t0")"
    if [ "$f" -ne 0 ]; then failed_names+=("unit/$name ($log)"); sed 's/^/    /' "$log" | grep -E "FAIL|ERROR|error|Assert" | head -20; fi
done

for t in "${integs[@]}"; do
    name=$(basename "$t" .sh)
    log="$logdir/$name.log"
    t0=$(date +%s%N)
    bash "$t" >"$log" 2>&1
    rc=$?
    p=$(count '^PASS: ' "$log"); f=$(count '^FAIL: ' "$log"); s=$(count '^SKIP: ' "$log")
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 77 ] && [ "$f" -eq 0 ]; then f=1; echo "FAIL: $name: exit $rc" >>"$log"; fi
    pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + s))
    row "integration/$name" "$p" "$f" "$s" "$(since "$t0")"
    grep -E '^(FAIL|SKIP): ' "$log" | sed 's/^/    /'
    [ "$f" -ne 0 ] && failed_names+=("integration/$name ($log)")
done

printf '%s\n' "------------------------------------------------------------------"
# Each failure's cause again, last: a CI page or a terminal often shows
# only the tail.
for n in "${failed_names[@]+"${failed_names[@]}"}"; do
    echo "failed: $n"
    log=${n##*(}; log=${log%)}
    grep -E '^FAIL: |\[  FAILED  \]|error: |Assert|Sanitizer|SUMMARY|exit [0-9]+$' "$log" 2>/dev/null |
        head -15 | sed 's/^/    /'
done
echo "logs: $logdir/ (one per suite); total $(since "$t_start") s"
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
