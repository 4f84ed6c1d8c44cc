#!/bin/bash
# SPDX-License-Identifier: MIT
# A 10,000-iteration reopen loop over 16 allocations: >= 99.8% import-cache
# hits and at most 16 + a constant fds more in the importer; the exit
# statistics report it.
. "$(dirname "$0")/lib.sh"
need "$LIB" "$ZEDRV"
L="$BUILD/test-logs"
[ -n "$MPIRUN_OMPI" ] && [ -x "$APPS/ze_mpi_exchange_ompi" ] ||
    { skip "reopen loop" "Open MPI or ze_mpi_exchange_ompi missing"; exit 77; }
log="$L/reopen.log"
if ! IPCBYVAL_STATS=1 timeout 300 "${OMPI[@]}" -np 2 -x IPCBYVAL_STATS "$RUN" \
    "$APPS/ze_mpi_exchange_ompi" --reopen --allocs 16 --iters 10000 >"$log" 2>&1; then
    fail "reopen loop" "$(tail -3 "$log" | tr '\n' ' ')"
    finish
fi
pass "reopen loop: 10000 opens of 16 allocations verified"

line=$(grep 'ze import cache:' "$log" | grep -v 'hits 0 ' | head -1)
hits=$(sed -nE 's/.* hits ([0-9]+) misses ([0-9]+) .*/\1/p' <<<"$line")
misses=$(sed -nE 's/.* hits ([0-9]+) misses ([0-9]+) .*/\2/p' <<<"$line")
if [ -n "$hits" ] && [ $((hits + misses)) -eq 10000 ] && [ $((hits * 1000)) -ge $((998 * 10000)) ]; then
    pass "import cache hit rate $hits/10000 >= 99.8% (misses $misses)"
else
    fail "import cache hit rate" "line: $line"
fi

before=$(sed -nE 's/.*open fds before ([0-9]+) after ([0-9]+).*/\1/p' "$log")
after=$(sed -nE 's/.*open fds before ([0-9]+) after ([0-9]+).*/\2/p' "$log")
# 16 imported objects plus one pidfd per exporter: the constant is 2.
if [ -n "$after" ] && [ "$after" -le $((before + 16 + 2)) ]; then
    pass "importer fds: $before before, $after after (bound $((before + 18)))"
else
    fail "importer fds" "before '$before' after '$after'"
fi
# Only an exporter's first miss opens a pidfd: later misses borrow it.
kept=$(sed -nE 's/.*stats: open_kept_pidfd +([0-9]+) .*/\1/p' "$log" | awk '{ s += $1 } END { print s + 0 }')
if [ -n "$misses" ] && [ "$misses" -ge 2 ] && [ "$kept" -eq $((misses - 1)) ]; then
    pass "cold opens after the first borrowed the kept pidfd ($kept of $misses misses)"
else
    fail "kept pidfd" "open_kept_pidfd '$kept', misses '$misses'"
fi
grep -qE 'stats: open_errors +0 ' "$log" && pass "no open errors reported" ||
    fail "open errors" "$(grep open_errors "$log" | tr '\n' ' ')"
finish
