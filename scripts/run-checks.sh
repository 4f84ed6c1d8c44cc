#!/bin/bash
# SPDX-License-Identifier: MIT
# run-checks.sh UNIT_TEST... -- INTEGRATION_SCRIPT...
# Runs cmocka unit tests and integration scripts, then prints one table and
# the closing line "N passed, N failed, N skipped".
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
rows=()
failed_names=()

count() { grep -cE "$1" "$2" 2>/dev/null || true; }

for t in "${units[@]}"; do
    name=$(basename "$t")
    log="$logdir/unit-$name.log" # integration tests may share the name
    "$t" >"$log" 2>&1
    rc=$?
    # cmocka summary lines: "[  PASSED  ] 7 test(s)." / "[  FAILED  ] 1 test(s)..."
    p=$(sed -nE 's/^\[  PASSED  \] ([0-9]+) test.*/\1/p' "$log" | awk '{s+=$1} END {print s+0}')
    f=$(sed -nE 's/^\[  FAILED  \] ([0-9]+) test.*/\1/p' "$log" | awk '{s+=$1} END {print s+0}')
    s=$(sed -nE 's/^\[  SKIPPED \] ([0-9]+) test.*/\1/p' "$log" | awk '{s+=$1} END {print s+0}')
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi # crashed before its summary
    pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + s))
    rows+=("$(printf '%-34s %6s %6s %7s' "unit/$name" "$p" "$f" "$s")")
    if [ "$f" -ne 0 ]; then failed_names+=("unit/$name ($log)"); sed 's/^/    /' "$log" | grep -E "FAIL|ERROR|error|Assert" | head -20; fi
done

for t in "${integs[@]}"; do
    name=$(basename "$t" .sh)
    log="$logdir/$name.log"
    bash "$t" >"$log" 2>&1
    rc=$?
    p=$(count '^PASS: ' "$log"); f=$(count '^FAIL: ' "$log"); s=$(count '^SKIP: ' "$log")
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 77 ] && [ "$f" -eq 0 ]; then f=1; echo "FAIL: $name: exit $rc" >>"$log"; fi
    pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + s))
    rows+=("$(printf '%-34s %6s %6s %7s' "integration/$name" "$p" "$f" "$s")")
    grep -E '^(FAIL|SKIP): ' "$log" | sed 's/^/    /'
    [ "$f" -ne 0 ] && failed_names+=("integration/$name ($log)")
done

echo
echo "ipcbyval test summary${SAN:+ (SAN=$SAN)}"
printf '%-34s %6s %6s %7s\n' "suite" "passed" "failed" "skipped"
printf '%s\n' "----------------------------------------------------------"
printf '%s\n' "${rows[@]}"
printf '%s\n' "----------------------------------------------------------"
for n in "${failed_names[@]+"${failed_names[@]}"}"; do echo "failed: $n"; done
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
