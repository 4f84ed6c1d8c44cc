#!/bin/bash
# SPDX-License-Identifier: MIT
# A same-uid bystander against an exporter's broker once an export ended
# (issue 22, defect 3): after zeContextDestroy (a driver that closes the
# context's exported fds with it), zeMemFree, eviction from the export
# cache (the driver's put), zeEventPoolDestroy, zeContextDestroy of an
# exported event pool's context (the pool left alive), and for
# CUDA VMM cuMemUnmap and cuMemRelease (the driver double), the old
# number, now the exporter's own socket, is refused whatever inode is
# asked for, and nothing of the export stays registered, offered or
# listed (the exporter's exit statistics).
. "$(dirname "$0")/../integration/lib.sh"
F="$BUILD/test/faults/fault_stale"
FC="$BUILD/test/faults/fault_stale_cu"
need "$LIB" "$ZEDRV" "$F"
L="$BUILD/test-logs"

stale() { # PATH PROGRAM...: run it, relay its verdicts, read its exporter's statistics
    local path=$1 log="$L/stale-$1.log"
    shift
    IPCBYVAL_STATS=1 timeout 60 "$RUN" "$@" "$path" >"$log" 2>&1
    local rc=$?
    grep -E '^(PASS|FAIL|SKIP): ' "$log" | sed -E "s/^(PASS|FAIL|SKIP): /\1: $path: /"
    [ $rc -eq 0 ] || grep -q '^FAIL: ' "$log" ||
        fail "$path" "exit $rc: $(grep -v '^\[ipcbyval' "$log" | tail -3 | tr '\n' ' ')"
    local pid n
    pid=$(sed -nE 's/^exporter pid ([0-9]+).*/\1/p' "$log")
    for g in export_entries export_offers export_rescuable; do
        n=$(sed -nE "s/^\[ipcbyval $pid [^]]*\] stats: $g +([0-9]+).*/\1/p" "$log")
        [ "$n" = 0 ] && pass "$path: the ended export holds no $g" ||
            fail "$path: $g" "the exporter still holds '${n:-no such statistic}'"
    done
}

for path in ctxdestroy free pooldestroy poolctx; do
    ZEDRV_CONTEXT_DESTROY=all stale "$path" "$F"
done
# Eviction gives the driver its handle back with zeMemPutIpcHandle, which
# Debian's loader (spec 1.4) lacks: the 1.15 loader (test/zeldr) has it.
ZELDR="$BUILD/test/zeldr"
[ -e "$ZELDR/libze_loader.so.1" ] && export LD_LIBRARY_PATH="$ZELDR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# Two allocations of one USM pool share its fd's inode, which stays
# offered while either is exported: the driver's pools off here.
EnableDeviceUsmAllocationPool=0 IPCBYVAL_EXPORT_CACHE_SIZE=1 stale evict "$F"
if [ -x "$FC" ] && [ -e "$BUILD/test/cudadrv/libcuda.so.1" ]; then
    for path in unmap release; do
        LD_LIBRARY_PATH="$BUILD/test/cudadrv${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" stale "$path" "$FC"
    done
else
    skip "CUDA VMM export ends" "no CUDA headers at build time (fault_stale_cu not built)"
fi
finish
