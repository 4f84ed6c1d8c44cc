#!/bin/bash
# SPDX-License-Identifier: MIT
# --log=debug explains each open: one line per open (hit, or miss served
# via pidfd or via socket, the exporter's pid, bytes, time) and close, one
# per export and withdrawal, in words rather than ipcbyval's function
# names; an unwritable IPCBYVAL_LOG_FILE is said once, then stderr.
. "$(dirname "$0")/lib.sh"
need "$LIB" "$ZEDRV" "$APPS/ze_pair"
L="$BUILD/test-logs"
DENY="$BUILD/test/transport/deny_getfd"
# Above the USM pools' sizes: a mapping is the allocation, not its pool.
A=(--allocs 2 --size 4194304 --iters 3)
why() { grep -v '^$' "$1" | tail -4 | tr '\n' '|' | cut -c1-500; }

# routes NAME LOG ROUTE: two misses served by ROUTE, hits after them, a
# close per open, two exports and two withdrawals; the exporter's pid in
# the open lines is the one whose lines say "export".
routes() {
    local name=$1 log=$2 route=$3 exporter misses hits closes opens
    exporter=$(sed -nE 's/^\[ipcbyval ([0-9]+) [^]]*\] debug: export: .* by value \(fd [0-9]+\)$/\1/p' "$log" | sort -u)
    misses=$(grep -cE "\] debug: open: miss via $route: exporter pid $exporter, 4194304 bytes at 0x[0-9a-f]+, [0-9.]+ us$" "$log")
    hits=$(grep -cE "\] debug: open: hit: exporter pid $exporter, 4194304 bytes at 0x[0-9a-f]+, [0-9.]+ us$" "$log")
    opens=$(grep -c '\] debug: open: ' "$log")
    closes=$(grep -cE '\] debug: close: 0x[0-9a-f]+: closed .*, [0-9.]+ us$' "$log")
    if grep -q 'OK' "$log" && [ -n "$exporter" ] && [ "$misses" -eq 2 ] && [ "$hits" -eq 4 ] &&
        [ "$opens" -eq 6 ] && [ "$closes" -eq 6 ] &&
        [ "$(grep -c '\] debug: export withdrawn: ' "$log")" -eq 2 ]; then
        pass "$name: 2 misses via $route, 4 hits, 6 closes, exports and withdrawals of pid $exporter"
    else
        fail "$name" "exporter '$exporter' misses $misses hits $hits opens $opens closes $closes: $(why "$log")"
    fi
}

log="$L/logs-pidfd.log"
timeout 60 "$RUN" --log=debug "$APPS/ze_pair" "${A[@]}" >"$log" 2>&1
routes "pidfd_getfd" "$log" pidfd
# The release watcher starts at the first close that leaves a mapping
# cached (issue 23: not at the first open): one line, in the importer,
# after its first open's line and before the line of the first close (a
# call logs when it ends).
imp=$(sed -nE 's/^\[ipcbyval ([0-9]+) [^]]*\] debug: open: miss .*/\1/p' "$log" | sort -u)
order=$(grep -E "^\[ipcbyval $imp [^]]*\] debug: (open|close|release watcher started): " "$log" |
    sed -E 's/.*debug: (open|close|release watcher started).*/\1/' | uniq | head -3 | tr '\n' ,)
n=$(grep -cE '\] debug: release watcher started: a closed mapping of pid [0-9]+ waits on its exporter.s frees$' "$log")
[ -n "$imp" ] && [ "$n" -eq 1 ] && [ "$order" = "open,release watcher started,close," ] &&
    pass "the release watcher starts at the importer's first close, not its first open" ||
    fail "release watcher start" "importer '$imp', $n start lines, order: $order"
log="$L/logs-socket.log"
IPCBYVAL_TRANSPORT=socket timeout 60 "$RUN" --log=debug "$APPS/ze_pair" "${A[@]}" >"$log" 2>&1
routes "IPCBYVAL_TRANSPORT=socket" "$log" socket
if [ -x "$DENY" ]; then
    log="$L/logs-fallback.log"
    timeout 60 "$DENY" "$RUN" --log=debug "$APPS/ze_pair" "${A[@]}" >"$log" 2>&1
    routes "pidfd_getfd denied (auto falls back)" "$log" socket
fi

# CUDA on the driver double: VMM opens name their route and exporter,
# legacy ones say the driver opened them.
CU="$BUILD/test/cudadrv"
if [ -x "$CU/cu_pair" ] && nm -D --defined-only "$LIB" | grep -qw cuIpcGetMemHandle; then
    log="$L/logs-cuda.log"
    LD_LIBRARY_PATH="$CU" timeout 60 "$RUN" --log=debug "$CU/cu_pair" --mem vmm-multi --route symbol --iters 3 --reopen >"$log" 2>&1
    exporter=$(sed -nE 's/^\[ipcbyval ([0-9]+) [^]]*\] debug: export: 0x[0-9a-f]+ by value$/\1/p' "$log" | sort -u)
    m=$(grep -caE "\] debug: open: miss via pidfd: exporter pid $exporter, [0-9]+ bytes at 0x[0-9a-f]+, [0-9.]+ us$" "$log")
    h=$(grep -caE "\] debug: open: hit: exporter pid $exporter, " "$log")
    grep -qa '^OK' "$log" && [ -n "$exporter" ] && [ "$m" -eq 1 ] && [ "$h" -eq 3 ] &&
        pass "CUDA VMM: 1 miss via pidfd and 3 hits of exporter $exporter" || fail "CUDA VMM lines" "miss $m hit $h: $(why "$log")"
    log="$L/logs-cuda-legacy.log"
    LD_LIBRARY_PATH="$CU" timeout 60 "$RUN" --log=debug "$CU/cu_pair" --mem legacy --route symbol --iters 3 --reopen >"$log" 2>&1
    grep -qaE '\] debug: open: legacy miss opened by the driver: exporter not named, [0-9]+ bytes at 0x[0-9a-f]+, [0-9.]+ us$' "$log" &&
        [ "$(grep -caE '\] debug: open: legacy hit: exporter not named, ' "$log")" -eq 3 ] &&
        pass "CUDA legacy: opened by the driver, then 3 hits" || fail "CUDA legacy lines" "$(grep -a 'debug: open' "$log" | head -2 | tr '\n' '|')"
else
    skip "CUDA lines" "the library has no CUDA part or the driver double is not built"
fi

# No line names a C function of ipcbyval ("debug: import_miss: ...").
bad=$(cat "$L"/logs-*.log | grep -E '\] [a-z]+: [a-z0-9]+_[a-z0-9_]+: ' | head -3)
[ -z "$bad" ] && pass "no log line is prefixed with a function name" || fail "function names" "$bad"

# IPCBYVAL_LOG_FILE that cannot be opened: one warning per process naming
# the file and the error, then the lines on stderr.
log="$L/logs-badfile.log"
IPCBYVAL_LOG_FILE=/nonexistent-ipcbyval/log.%p timeout 60 "$RUN" --log=debug "$APPS/ze_pair" "${A[@]}" >"$log" 2>&1
procs=$(sed -nE 's/^\[ipcbyval ([0-9]+) .*/\1/p' "$log" | sort -u | wc -l)
warns=$(grep -cE '\] warn: IPCBYVAL_LOG_FILE: cannot open /nonexistent-ipcbyval/log\.[0-9]+: No such file or directory; logging to stderr$' "$log")
if grep -q OK "$log" && [ "$procs" -eq 2 ] && [ "$warns" -eq 2 ] && grep -q '\] debug: open: ' "$log"; then
    pass "unwritable IPCBYVAL_LOG_FILE: one warning per process naming file and error, lines on stderr"
else
    fail "unwritable IPCBYVAL_LOG_FILE" "$procs processes, $warns warnings: $(why "$log")"
fi
finish
