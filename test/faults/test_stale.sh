#!/bin/bash
# SPDX-License-Identifier: MIT
# A same-uid bystander against an exporter's broker once an export ended
# (issue 22, defect 3): after zeContextDestroy (a driver that closes the
# context's exported fds with it), zeMemFree and zeEventPoolDestroy, the
# old number, now the exporter's own socket, is refused whatever inode is
# asked for, and nothing of the export stays registered, offered or
# listed (the exporter's exit statistics).
. "$(dirname "$0")/../integration/lib.sh"
F="$BUILD/test/faults/fault_stale"
need "$LIB" "$ZEDRV" "$F"
L="$BUILD/test-logs"

for path in ctxdestroy free pooldestroy; do
    log="$L/stale-$path.log"
    ZEDRV_CONTEXT_DESTROY=all IPCBYVAL_STATS=1 timeout 60 "$RUN" "$F" "$path" >"$log" 2>&1
    rc=$?
    grep -E '^(PASS|FAIL|SKIP): ' "$log" | sed "s/^\(PASS\|FAIL\|SKIP\): /\1: $path: /"
    [ $rc -eq 0 ] || grep -q '^FAIL: ' "$log" ||
        fail "$path" "exit $rc: $(grep -v '^\[ipcbyval' "$log" | tail -3 | tr '\n' ' ')"
    pid=$(sed -nE 's/^exporter pid ([0-9]+).*/\1/p' "$log")
    for g in export_entries export_offers export_rescuable; do
        n=$(sed -nE "s/^\[ipcbyval $pid [^]]*\] stats: $g +([0-9]+).*/\1/p" "$log")
        [ "$n" = 0 ] && pass "$path: the ended export holds no $g" ||
            fail "$path: $g" "the exporter still holds '${n:-no such statistic}'"
    done
done
finish
