#!/bin/bash
# SPDX-License-Identifier: MIT
# Lifetimes the import cache must not change (cache/imports.h): the same
# program natively and under ipcbyval must behave the same. Level Zero on
# the test driver (ze_life), CUDA on the driver double (cu_life):
#   churn with an idle importer: the exporter's freed memory comes back
#     (release delay and memory held printed), on a 64 MiB device
#   allocation ids that repeat: never the freed allocation's data
#   double close: the driver's error, and the next open works
#   context destroy + create (same handle value), primary context reset
#   more mappings open at once than the cache holds
#   the exporter's context ends (cuCtxDestroy, primary reset, last
#     release) under an importer's open and closed mappings: the same
#     close and re-open results and imports held natively and under ipcbyval
#   event pools: the exporter's destroy and exit release an idle importer's
#     closed import, re-open, context destroy, double close
#   a USM pool (small allocations share one fd): each handle opens its own
#     bytes, re-opens are cache hits, and a free of one allocation leaves
#     the others' handles working, the freed one's as natively
. "$(dirname "$0")/lib.sh"
ZL="$APPS/ze_life" ZP="$APPS/ze_pool_life" CL="$BUILD/test/cudadrv/cu_life"
need "$LIB" "$ZEDRV" "$ZL"
L="$BUILD/test-logs"

# both NAME LOG NATIVE_ARGS -- BYVAL_ARGS: both runs must print OK.
both() {
    local name=$1 log=$2; shift 2
    local -a nat=() byv=()
    while [ "$1" != -- ]; do nat+=("$1"); shift; done
    shift
    byv=("$@")
    if ! timeout 120 "${nat[@]}" >"$log.native" 2>&1 || ! grep -q '^OK' "$log.native"; then
        fail "$name" "natively: $(grep -v '^$' "$log.native" | tail -2 | tr '\n' ' ')"
    elif ! timeout 120 "$RUN" "${byv[@]}" >"$log" 2>&1 || ! grep -q '^OK' "$log"; then
        fail "$name" "under ipcbyval: $(grep -v '^\[ipcbyval' "$log" | tail -2 | tr '\n' ' ')"
    else
        local what
        what=$(grep -h 'release_ms\|held_max\|second close\|context has\|stale\|imported pools after' "$log" |
            sed 's/^[a-z_]*: //' | tr '\n' ';' | cut -c1-110)
        pass "$name${what:+ ($what)}"
    fi
}

export ZEDRV_TOTAL_MEM=64M ZEDRV_LEDGER="$L/ze-life.ledger"
rm -f "$ZEDRV_LEDGER"
both "Level Zero churn 40 x 16 MiB of 64 MiB, idle importer" "$L/ze-life-churn.log" \
    "$ZL" --case churn --rounds 40 --size 16777216 --scm-rights -- \
    "$ZL" --case churn --rounds 40 --size 16777216
rm -f "$ZEDRV_LEDGER"
unset ZEDRV_TOTAL_MEM ZEDRV_LEDGER
ZEDRV_ALLOC_ID=address both "Level Zero allocation ids that repeat: 300 rounds, never stale" \
    "$L/ze-life-ids.log" "$ZL" --case ids --rounds 300 --scm-rights -- "$ZL" --case ids --rounds 300
both "Level Zero double close: INVALID_ARGUMENT, the next open works" "$L/ze-life-dc.log" \
    "$ZL" --case double-close --rounds 2 --scm-rights -- "$ZL" --case double-close --rounds 2
both "Level Zero context destroyed and created (same handle value)" "$L/ze-life-ctx.log" \
    "$ZL" --case context --rounds 2 --scm-rights -- "$ZL" --case context --rounds 2
grep -q 'context has the old handle value' "$L/ze-life-ctx.log" ||
    fail "Level Zero context reuse" "the test driver did not reuse the handle value: nothing was tested"

log="$L/ze-life-pool.log"
both "Level Zero USM pool: three allocations of one pool, one freed" "$log" \
    "$ZL" --case pool --size 4096 --scm-rights -- env IPCBYVAL_STATS=1 "$ZL" --case pool --size 4096
nat=$(grep -h '^ze_life: pool:' "$log.native") byv=$(grep -h '^ze_life: pool:' "$log")
[ -n "$nat" ] && [ "$nat" = "$byv" ] &&
    pass "Level Zero USM pool: every open's result and data as natively" ||
    fail "Level Zero USM pool: as natively" "$(diff <(echo "$nat") <(echo "$byv") | grep '^[<>]' | head -4 | tr '\n' ' ')"
grep -q '^ze_life: pool phase 3: new context, live 2: open ZE_RESULT_SUCCESS, data right' "$log" &&
    pass "Level Zero USM pool: a second free (after an unshared one's) leaves the last handle working" ||
    fail "Level Zero USM pool: second free" "$(grep -h 'phase 3: new context, live' "$log")"
hits=$(sed -nE 's/.*ze import cache: hits ([0-9]+) .*/\1/p' "$log" | sort -n | tail -1)
[ "${hits:-0}" -ge 6 ] && pass "Level Zero USM pool: the 6 re-opens of closed mappings were cache hits ($hits)" ||
    fail "Level Zero USM pool: cache hits" "'${hits:-none}' hits, 6 re-opens"
# With zeMemPutIpcHandle in the loader (a spec-1.15 one), the export's end
# puts its reference back: the free's must not take another one's.
LD_LIBRARY_PATH="$BUILD/test/zeldr${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    expect_ok "Level Zero USM pool, loader with zeMemPutIpcHandle: one freed, the others live on" \
    "$L/ze-life-pool-put.log" "$RUN" "$ZL" --case pool --size 4096

for c in destroy exit reopen context; do
    both "Level Zero event pools: $c" "$L/ze-pool-$c.log" "$ZP" --case "$c" --scm-rights -- \
        "$ZP" --case "$c"
done
# Natively a second close of an event pool is a use after free: ipcbyval only.
expect_ok "Level Zero event pools: double close is INVALID_ARGUMENT, the next open works" \
    "$L/ze-pool-dc.log" "$RUN" "$ZP" --case double-close

if [ -x "$CL" ]; then
    for c in double-close context reset; do
        both "CUDA $c (legacy)" "$L/cu-life-$c.log" "$CL" --case "$c" --mem legacy -- \
            "$CL" --case "$c" --mem legacy
        expect_ok "CUDA $c (VMM, by value only)" "$L/cu-life-$c-vmm.log" \
            "$RUN" "$CL" --case "$c" --mem vmm
    done
    # An open with the reset (inactive) primary context current: the
    # driver's CUDA_ERROR_CONTEXT_IS_DESTROYED, for VMM handles too.
    nat=$(grep -h 'reset context current' "$L/cu-life-reset.log.native")
    for m in legacy vmm; do
        log="$L/cu-life-reset.log"
        [ $m = vmm ] && log="$L/cu-life-reset-vmm.log"
        byv=$(grep -h 'reset context current' "$log")
        [ -n "$nat" ] && [ "$nat" = "$byv" ] && pass "CUDA $m: ${nat#cu_life: }, as natively" ||
            fail "CUDA $m: open with the reset context" "natively '$nat', under ipcbyval '$byv'"
    done
    both "CUDA three legacy handles open at once, cache of 2" "$L/cu-life-three.log" \
        "$CL" --case three --mem legacy -- env IPCBYVAL_CACHE_SIZE=2 "$CL" --case three --mem legacy
    # The cache full of open mappings hands the third out uncached (it
    # failed with CUDA_ERROR_OUT_OF_MEMORY).
    IPCBYVAL_CACHE_SIZE=2 expect_ok "CUDA three VMM handles open at once, cache of 2" \
        "$L/cu-life-three-vmm.log" "$RUN" "$CL" --case three --mem vmm
    # The exporter's context takes its cuMemAlloc memory with it: its
    # export ends first (issue 22), so the importer's cached mapping goes
    # and a re-open fails as natively. VMM memory is no context's (an H100
    # kept it mapped after a reset): its export lives on.
    for c in exporter-destroy exporter-reset exporter-release; do
        log="$L/cu-life-$c.log"
        both "CUDA legacy: $c, both runs" "$log" "$CL" --case "$c" --mem legacy -- \
            env IPCBYVAL_STATS=1 "$CL" --case "$c" --mem legacy
        n=$(sed -nE 's/.*stats: export_entries +([0-9]+).*/\1/p' "$log")
        [ "$n" = 0 ] && pass "CUDA legacy: $c: the exporter holds no registry entry at its exit" ||
            fail "CUDA legacy: $c: registry entries" "the exporter still holds '${n:-no statistic}'"
        nat=$(grep -h '^cu_life: after' "$log.native") byv=$(grep -h '^cu_life: after' "$log")
        [ -n "$nat" ] && [ "$nat" = "$byv" ] && pass "CUDA legacy: $c: as natively (${nat#*ended: })" ||
            fail "CUDA legacy: $c" "natively '${nat#*ended: }', under ipcbyval '${byv#*ended: }'"
        expect_ok "CUDA VMM: $c: the export lives on" "$log.vmm" "$RUN" "$CL" --case "$c" --mem vmm
        grep -q 're-open CUDA_SUCCESS' "$log.vmm" ||
            fail "CUDA VMM: $c" "re-open: $(grep -h '^cu_life: after' "$log.vmm")"
    done
else
    skip "CUDA lifetimes" "cu_life not built (no CUDA headers)"
fi
finish
