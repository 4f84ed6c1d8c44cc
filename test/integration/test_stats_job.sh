#!/bin/bash
# SPDX-License-Identifier: MIT
# ipcbyval-run --stats prints ONE table for a whole job (a column per rank,
# then the totals) under Open MPI and MPICH, inside the launch line or
# around it; --report merges any field the files name; the exit status and
# signals pass through; the cache memory statistic agrees with the README.
. "$(dirname "$0")/lib.sh"
need "$LIB" "$ZEDRV" "$APPS/ze_pair"
L="$BUILD/test-logs"
A=(--allocs 4 --size 65536 --iters 3)

# row LOG NAME: the numbers of a counter's row ("exports 4 4 8 ...").
row() { awk -v n="$2" '$1 == n { $1 = ""; print; exit }' "$1" | grep -oE '^( +[0-9]+)+' | xargs; }
tables() { grep -c '^ipcbyval statistics: ' "$1"; }

# one_table NAME LOG RANKS: exactly one table, a column per rank, totals
# that add up (exports: 4 per rank), no per-process blocks.
one_table() {
    local name=$1 log=$2 n=$3 want i
    want=""
    for ((i = 0; i < n; i++)); do want="$want 4"; done
    want="${want# } $((4 * n))"
    if [ "$(tables "$log")" = 1 ] && grep -q "^counter .*rank $((n - 1))  *total" "$log" &&
        [ "$(row "$log" exports)" = "$want" ] && ! grep -q '\] stats: ' "$log"; then
        pass "$name: one table, $n rank columns, exports $want"
    else
        fail "$name" "tables $(tables "$log"), exports row '$(row "$log" exports)' (want '$want')"
    fi
}

if [ -n "$MPIRUN_OMPI" ] && [ -x "$APPS/ze_mpi_exchange_ompi" ]; then
    APP="$APPS/ze_mpi_exchange_ompi"
    log="$L/stats-ompi2.log"
    tmp=$(mktemp -d)
    TMPDIR=$tmp timeout 120 "${OMPI[@]}" -np 2 "$RUN" --stats "$APP" "${A[@]}" >"$log" 2>&1
    one_table "Open MPI, 2 ranks, --stats inside the launch line" "$log" 2
    left=$(find "$tmp" -maxdepth 1 -name 'ipcbyval-*')
    [ -z "$left" ] && pass "the temporary folder (and the per-user folder around it) is removed" ||
        fail "temporary folder" "left: $left"
    rm -rf "$tmp"
    # A folder of one's own is kept, and named.
    dir=$(mktemp -d)
    IPCBYVAL_STATS_DIR=$dir timeout 120 "${OMPI[@]}" -np 2 -x IPCBYVAL_STATS_DIR "$RUN" --stats "$APP" "${A[@]}" \
        >"$L/stats-ompi-dir.log" 2>&1
    n=$(find "$dir" -name '*.stats' | wc -l)
    [ "$n" -eq 2 ] && grep -q "files in $dir\$" "$L/stats-ompi-dir.log" &&
        pass "IPCBYVAL_STATS_DIR: the two files are kept, the table names the folder" ||
        fail "IPCBYVAL_STATS_DIR" "$n files; $(head -1 "$L/stats-ompi-dir.log")"
    "$RUN" --report "$dir" >"$L/stats-report-ompi.log" 2>&1
    one_table "ipcbyval-run --report DIR afterwards" "$L/stats-report-ompi.log" 2
    rm -rf "$dir"
    log="$L/stats-ompi4.log"
    timeout 120 "${OMPI[@]}" -np 4 "$RUN" --stats "$APP" "${A[@]}" >"$log" 2>&1
    one_table "Open MPI, 4 ranks" "$log" 4
    log="$L/stats-ompi-outer.log"
    timeout 120 "$RUN" --stats "${OMPI[@]}" -np 2 -x LD_PRELOAD -x IPCBYVAL_STATS_DIR "$APP" "${A[@]}" >"$log" 2>&1
    one_table "Open MPI, ipcbyval-run --stats around mpirun" "$log" 2
    # Ranks that never call a GPU API leave no file; nobody waits for them.
    log="$L/stats-ompi-true.log"
    t0=$(date +%s)
    timeout 120 "${OMPI[@]}" -np 2 "$RUN" --stats /bin/true >"$log" 2>&1
    rc=$?
    if [ $rc -eq 0 ] && [ $(($(date +%s) - t0)) -lt 20 ] && grep -q 'no statistics in' "$log"; then
        pass "no GPU calls: says so at once, exit 0"
    else
        fail "no GPU calls" "rc $rc after $(($(date +%s) - t0)) s: $(tail -2 "$log" | tr '\n' ' ')"
    fi
else
    skip "Open MPI job table" "mpirun.openmpi or ze_mpi_exchange_ompi missing"
fi

if [ -n "$MPIEXEC_MPICH" ] && [ -x "$APPS/ze_mpi_exchange_mpich" ]; then
    log="$L/stats-mpich2.log"
    timeout 120 "${MPICH[@]}" -n 2 "$RUN" --stats "$APPS/ze_mpi_exchange_mpich" "${A[@]}" >"$log" 2>&1
    one_table "MPICH, 2 ranks" "$log" 2
else
    skip "MPICH job table" "mpiexec.mpich or ze_mpi_exchange_mpich missing"
fi

# Not MPI: the two processes of ze_pair, one table.
log="$L/stats-pair.log"
timeout 120 "$RUN" --stats "$APPS/ze_pair" "${A[@]}" >"$log" 2>&1
if [ "$(tables "$log")" = 1 ] && grep -q '^ipcbyval statistics: 2 processes' "$log" &&
    [ "$(row "$log" opens | awk '{ print $NF }')" = 12 ]; then
    pass "two processes without MPI: one table, 12 opens in total"
else
    fail "ze_pair table" "$(head -3 "$log" | tr '\n' ' ')"
fi

# Under IPCBYVAL_TRANSPORT=socket misses are labelled by what served them
# (no "pidfd resolution", no open_kept_pidfd), and per-process gauges
# (capacities, high-water marks, bytes held) total as the largest process.
dir=$(mktemp -d)
log="$L/stats-socket.log"
IPCBYVAL_TRANSPORT=socket IPCBYVAL_STATS_DIR="$dir" timeout 120 "$RUN" --stats "$APPS/ze_pair" "${A[@]}" >"$log" 2>&1
kept=$(row "$log" open_kept_socket | awk '{ print $NF }')
if ! grep -q 'pidfd resolution' "$log" && ! grep -qE '^open_kept_pidfd ' "$log" && [ "${kept:-0}" -ge 1 ]; then
    pass "socket transport: misses labelled by what served them (open_kept_socket $kept, no pidfd wording)"
else
    fail "socket transport labels" "$(grep -E 'open_|pidfd' "$log" | tr '\n' '|')"
fi
bad=$(cat "$dir"/*.stats 2>/dev/null | awk -F'\t' '$1 ~ /\.(capacity|high_water|entries|memory_bytes)$|^(cache_bytes_held|export_(entries|offers|rescuable))$/ && $3 != "max" { print $1 }')
n=$(cat "$dir"/*.stats 2>/dev/null | grep -cE '^ze_(import|export)\.capacity'$'\t')
[ "$n" -ge 1 ] && [ -z "$bad" ] && pass "per-process gauges total as max, not a sum ($n capacity rows)" ||
    fail "gauges" "summed: $bad ($n capacity rows)"
rm -rf "$dir"

# The files carry every counter by name: the same names as the exit block.
dir=$(mktemp -d)
IPCBYVAL_STATS=1 IPCBYVAL_STATS_DIR="$dir" timeout 120 "$RUN" "$APPS/ze_pair" "${A[@]}" >"$L/stats-names.log" 2>&1
block=$(sed -nE 's/.*\] stats: ([a-z_]+) +[0-9]+ .*/\1/p' "$L/stats-names.log" | sort -u)
files=$(cat "$dir"/*.stats | awk -F'\t' '!/^[#@]/ && $1 !~ /\./ { print $1 }' | sort -u)
[ -n "$block" ] && [ "$block" = "$files" ] && pass "files carry every counter the exit block prints ($(wc -w <<<"$files"))" ||
    fail "counter names" "block: $(tr '\n' ' ' <<<"$block") files: $(tr '\n' ' ' <<<"$files")"
rm -rf "$dir"

# --report knows no field: new ones, missing ones, sum and max.
dir=$(mktemp -d)
printf '@host\th1\n@pid\t10\n@rank\t0\nopens\t5\tsum\topens\nbytes_held\t100\tsum\tbytes held\npeak_bytes\t70\tmax\tpeak\nopen_errors\t0\tsum\topens refused\n' >"$dir/h1.10.stats"
printf '@host\th2\n@pid\t20\n@rank\t1\nopens\t7\tsum\topens\nbytes_held\t200\tsum\tbytes held\npeak_bytes\t90\tmax\tpeak\nnew_thing\t3\tsum\tonly here\n' >"$dir/h2.20.stats"
out="$L/stats-report.log"
"$RUN" --report "$dir" >"$out" 2>&1
if grep -q '^ipcbyval statistics: 2 processes on 2 hosts (h1, h2)' "$out" && [ "$(row "$out" opens)" = "5 7 12" ] &&
    [ "$(row "$out" bytes_held)" = "100 200 300" ] && [ "$(row "$out" peak_bytes)" = "70 90 90" ] &&
    [ "$(row "$out" new_thing)" = "0 3 3" ] && grep -q '^0 in every process: open_errors$' "$out"; then
    pass "--report: unknown fields shown, summed or maxed as the file says"
else
    fail "--report" "$(tr '\n' '|' <"$out")"
fi
# More ranks than columns: min and max with their ranks, and the total.
for r in 0 1 2 3 4 5 6 7 8 9; do
    printf '@host\th\n@pid\t%d\n@rank\t%d\nopens\t%d\tsum\topens\n' $((100 + r)) $r $((r + 1)) >"$dir/h.$r.stats"
done
rm -f "$dir"/h?.*.stats
"$RUN" --report "$dir" >"$out" 2>&1
grep -qE '^opens +1 +rank 0 +10 +rank 9 +55 ' "$out" && pass "--report of 10 ranks: min, max, where, total" ||
    fail "--report of 10 ranks" "$(tr '\n' '|' <"$out")"
rm -rf "$dir"
"$RUN" --report /nonexistent >/dev/null 2>&1 && fail "--report of nothing" "exit 0" ||
    pass "--report of an empty folder fails"

# The exit status and signals pass through the waiting wrapper.
"$RUN" --stats sh -c 'exit 3' >/dev/null 2>&1
rc=$?
[ $rc -eq 3 ] && pass "--stats keeps the program's exit status" || fail "exit status" "got $rc"
"$RUN" --stats sh -c 'read x; echo "got $x"' <<<"stdin-line" 2>/dev/null | grep -q 'got stdin-line' &&
    pass "--stats keeps standard input" || fail "stdin" "lost"
marker="$L/stats-signal.marker"
rm -f "$marker"
"$RUN" --stats sh -c "trap 'echo term >$marker; exit 7' TERM; sleep 30 & wait" >/dev/null 2>&1 &
wpid=$!
sleep 1
kill -TERM $wpid
t0=$(date +%s)
wait $wpid
rc=$?
if [ $(($(date +%s) - t0)) -lt 10 ] && grep -q term "$marker" 2>/dev/null; then
    pass "SIGTERM to ipcbyval-run reaches the program (exit $rc)"
else
    fail "signal forwarding" "rc $rc, marker $(cat "$marker" 2>/dev/null)"
fi

# Cache memory: the per-entry cost when full agrees with the README.
log="$L/stats-bytes.log"
IPCBYVAL_STATS=1 IPCBYVAL_CACHE_SIZE=100000 timeout 120 "$RUN" "$APPS/ze_pair" "${A[@]}" >"$log" 2>&1
got=$(sed -nE 's/.*ze import cache: .*\(([0-9]+) bytes\/entry when full\).*/\1/p' "$log" | head -1)
readme=$(grep -oE '[0-9]+ bytes per import-cache entry when full' "$ROOT/README.md" | grep -oE '^[0-9]+' | head -1)
if [ -n "$got" ] && [ "$got" = "$readme" ]; then
    pass "import cache at 100k entries: $got bytes/entry when full, as the README says"
else
    fail "bytes/entry" "statistic '$got', README '$readme'"
fi
finish
