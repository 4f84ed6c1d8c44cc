#!/bin/bash
# SPDX-License-Identifier: MIT
# CUDA wrappers on the CPU, against the CUDA driver test double
# (test/cudadrv): every route (symbol, cuGetProcAddress, the libcudart
# bootstrap) reaches the wrappers; VMM handles fail natively and work by
# value, including multi-chunk reservations and across devices; legacy
# handles keep working and re-opens hit the cache. Not a GPU run: that is
# make check-gpu.
. "$(dirname "$0")/lib.sh"
CU="$BUILD/test/cudadrv"
need "$LIB" "$CU/libcuda.so.1" "$CU/cu_pair" "$CU/cu_chunks" "$CU/cu_pool"
nm -D --defined-only "$LIB" | grep -qw cuIpcGetMemHandle ||
    { skip cuda "library built without the CUDA headers"; exit 77; }
export LD_LIBRARY_PATH="$CU${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
L="$BUILD/test-logs"
P="$CU/cu_pair"

for route in symbol procaddr cudart; do
    for mem in vmm vmm-multi; do
        expect_fail "$mem/$route: native cuIpcGetMemHandle fails" "$L/cu-$mem-$route-native.log" \
            'cuIpcGetMemHandle failed: CUDA_ERROR_INVALID_VALUE' "$P" --mem "$mem" --route "$route"
        expect_ok "$mem/$route: by value under ipcbyval" "$L/cu-$mem-$route.log" \
            "$RUN" "$P" --mem "$mem" --route "$route" --iters 3 --reopen
    done
    expect_ok "legacy/$route: unchanged under ipcbyval" "$L/cu-legacy-$route.log" \
        "$RUN" "$P" --mem legacy --route "$route" --iters 3 --reopen
done
expect_ok "vmm-multi across devices 0 -> 1" "$L/cu-xdev.log" \
    "$RUN" "$P" --mem vmm-multi --route cudart --dev-exp 0 --dev-imp 1
expect_ok "old API version (cuIpcOpenMemHandle v1 via cuGetProcAddress 10020)" "$L/cu-v1.log" \
    "$RUN" "$P" --mem vmm --route procaddr --cuda-version 10020

# Manifests at their limits: 1024 chunks import (the first manifest
# version's limit) and 4100 (past it: a pool of expandable segments); a
# manifest shorter than its chunk count is refused for that reason,
# before any chunk is asked for.
C="$CU/cu_chunks"
expect_ok "VMM reservation of 1024 chunks opens by value" \
    "$L/cu-chunks-1024.log" "$RUN" "$C" --chunks 1024
expect_ok "VMM reservation of 4100 chunks (past 1024) opens by value" \
    "$L/cu-chunks-4100.log" "$RUN" "$C" --chunks 4100
log="$L/cu-chunks-forged.log"
# The forger exported nothing through ipcbyval: its manifest is refused
# before it is duplicated (not in a registry); the reader's own checks are
# test_manifest's and the fuzzer's.
if "$RUN" "$C" --forge short >"$log" 2>&1 &&
    grep -q 'is not proven exported\|manifest from pid [0-9]* is 64 bytes long, but its header lists 150 chunks (4832 bytes)' "$log"; then
    pass "forged manifest (64 bytes claiming 150 chunks) refused, said exactly"
else
    fail "forged manifest" "$(grep -v '^$' "$log" | tail -2 | tr '\n' ' ')"
fi

# Pools as PyTorch's expandable segments keep them (cu_pool): an export
# outlives the pool's growth and its re-opens hit the cache; tensors
# exported between growths share one mirror; unmapping pages gives their
# memory back while the rest of the pool stays exported; a pool emptied and
# grown again serves its new bytes; a pool past 1024
# pages exports and opens, from its first page to its last. Every case's
# opens land in one reservation of the importer, however many there are.
CP="$CU/cu_pool"
# The double's ledger shared by both processes: what the importer holds of
# the exporter's freed memory is seen (shrink, prune, reuse).
export CUDADRV_LEDGER="$L/cu-pool.ledger"
rm -f "$CUDADRV_LEDGER"
expect_fail "pool: natively a VMM pool cannot be exported" "$L/cu-pool-native.log" \
    'cuIpcGetMemHandle.*CUDA_ERROR_INVALID_VALUE' "$CP" --case grow
pool_case() { # CASE NAME PATTERN...: it prints its OK line and every PATTERN
    local c=$1 name=$2 log="$L/cu-pool-$1.log" p ok=1
    shift 2
    IPCBYVAL_STATS=1 timeout 120 "$RUN" "$CP" --case "$c" >"$log" 2>&1 || ok=0
    for p in "^OK cu_pool $c: " "$@"; do grep -qE "$p" "$log" || ok=0; done
    [ $ok = 1 ] && pass "$name" ||
        fail "$name" "$(grep -E '^(OK|FAILED)|vmm import cache|open_(hits|misses)|ipcbyval.*(warn|error)' "$log" |
            head -4 | tr '\n' ' ')"
}
one='; 1 reservation\(s\)$'
pool_case grow "pool: an export outlives the pool's growth; 49 of 50 re-opens hit the cache" \
    "$one" 'cuda vmm import cache: hits 49 misses 1 '
pool_case interleave "pool: tensors exported between growths share one mirror; every re-open hits" \
    "$one" 'stats: open_hits +150 '
pool_case shrink "pool: unmapped pages' memory comes back, the rest of the pool stays exported"
pool_case prune "pool: pages unmapped under an open mirror come back when no open needs them" "$one"
pool_case reuse "pool: emptied and grown again over the same addresses, the new bytes are read"
pool_case big "pool: 4100 pages (past 1024) export and open, first page to last" \
    "$one" 'cuda vmm import cache: hits 100 misses 1 '
rm -f "$CUDADRV_LEDGER"
unset CUDADRV_LEDGER

# Cache behaviour, read from the exit statistics.
log="$L/cu-legacy-cache.log"
IPCBYVAL_STATS=1 "$RUN" "$P" --mem legacy --route cudart --iters 40 >"$log" 2>&1
grep -q 'cuda legacy import cache: hits 39 misses 1 ' "$log" &&
    pass "legacy re-open after close hits the cache (39/40)" ||
    fail "legacy cache" "$(grep 'legacy import cache' "$log")"
# A miss's time, split for IPCBYVAL_STATS: fds fetched, driver import, map.
log="$L/cu-vmm-split.log"
IPCBYVAL_STATS=1 "$RUN" "$P" --mem vmm-multi --route cudart --iters 2 >"$log" 2>&1
n=$(grep -cE 'stats: miss_(fetch|import|map)_ns +[1-9][0-9]* ' "$log")
[ "$n" -eq 3 ] && pass "a VMM miss's time split into fetch, import and map (statistics)" ||
    fail "miss split" "$(grep -E 'stats: miss_' "$log" | tr '\n' ' ')"
log="$L/cu-legacy-nocache.log"
IPCBYVAL_STATS=1 IPCBYVAL_CUDA_LEGACY_CACHE=0 "$RUN" "$P" --mem legacy --route cudart --iters 5 >"$log" 2>&1
grep -qE 'stats: open_passthrough +5 ' "$log" && ! grep -q 'legacy import cache: hits [1-9]' "$log" &&
    pass "IPCBYVAL_CUDA_LEGACY_CACHE=0 passes legacy opens through" ||
    fail "legacy cache off" "$(grep -E 'open_passthrough|legacy import' "$log" | tr '\n' ' ')"
log="$L/cu-vmm-cache.log"
IPCBYVAL_STATS=1 "$RUN" "$P" --mem vmm-multi --route cudart --iters 40 >"$log" 2>&1
grep -q 'cuda vmm import cache: hits 39 misses 1 ' "$log" &&
    pass "VMM: 39/40 re-opens from the import cache" ||
    fail "vmm cache" "$(grep -E 'vmm import cache' "$log" | tr '\n' ' ')"
IPCBYVAL_CUDA=0 expect_fail "IPCBYVAL_CUDA=0 passes CUDA through" "$L/cu-off.log" \
    'CUDA_ERROR_INVALID_VALUE' "$RUN" "$P" --mem vmm --route cudart

# Memory churn on a 64 MiB device (the double's ledger, test/devmem): the
# exporter allocates 24 MiB per round (VMM: 4 MiB), the importer opens,
# checks and closes, the exporter frees. Natively every round fits.
export CUDADRV_TOTAL_MEM=64M CUDADRV_LEDGER="$L/cu-churn.ledger"
rm -f "$CUDADRV_LEDGER"
expect_ok "legacy churn, 10 x 24 MiB of 64: natively every round fits" \
    "$L/cu-churn-native.log" "$P" --mem legacy --route cudart --churn 10 --size 24
# Under ipcbyval the importer's closed mappings of a freed allocation are
# released at the exporter's free (its registry and the watcher thread),
# so every round fits too (it ran out of memory in round 3 when the cache
# kept them).
rm -f "$CUDADRV_LEDGER"
expect_ok "legacy churn under ipcbyval: the exporter's freed memory comes back" \
    "$L/cu-churn.log" "$RUN" "$P" --mem legacy --route cudart --churn 10 --size 24
rm -f "$CUDADRV_LEDGER"
expect_ok "VMM churn under ipcbyval: the exporter's freed memory comes back" \
    "$L/cu-churn-vmm.log" "$RUN" "$P" --mem vmm --route cudart --churn 40
rm -f "$CUDADRV_LEDGER"
finish
