#!/bin/bash
# SPDX-License-Identifier: MIT
# Every way a program reaches the Level Zero IPC calls is intercepted: each
# route fails natively (the fd in the handle is the exporter's) and passes
# under ipcbyval. Handles ipcbyval must not touch still work.
. "$(dirname "$0")/lib.sh"
need "$LIB" "$ZEDRV" "$APPS/ze_pair" "$APPS/ze_pair_dl"
L="$BUILD/test-logs"
NATIVE_ERR='zeMemOpenIpcHandle failed|zexMemOpenIpcHandles failed|ERROR_INVALID_ARGUMENT'
A=(--allocs 3 --iters 2)

for route in symbol dlsym ddi zex; do
    expect_fail "route $route: native open fails" "$L/route-$route-native.log" "$NATIVE_ERR" \
        "$APPS/ze_pair" --route "$route" "${A[@]}"
    expect_ok "route $route: by value under ipcbyval" "$L/route-$route.log" \
        "$RUN" "$APPS/ze_pair" --route "$route" "${A[@]}"
done
# Event pools (their handles carry the fd in bytes 0-3 too) on every route
# that has them: the symbols, dlsym of the loader, the EventPool table.
POOL_ERR='zeEventPoolOpenIpcHandle failed'
E=(--allocs 0 --events --iters 3)
for route in symbol dlsym ddi; do
    expect_fail "event pools, route $route: native open fails" "$L/pool-$route-native.log" \
        "$POOL_ERR" "$APPS/ze_pair" --route "$route" "${E[@]}"
    expect_ok "event pools, route $route: by value under ipcbyval" "$L/pool-$route.log" \
        "$RUN" "$APPS/ze_pair" --route "$route" "${E[@]}"
done
expect_ok "event pools, DDI route, loader dlopen'ed RTLD_LOCAL only" "$L/pool-ddi-dl.log" \
    "$RUN" "$APPS/ze_pair_dl" --route ddi "${E[@]}"
expect_ok "event pools: SCM_RIGHTS program (bytes 0-3 replaced) still works" "$L/pool-scm.log" \
    "$RUN" "$APPS/ze_pair" --scm-rights "${E[@]}"
expect_ok "event pools: open of own handle in the exporting process" "$L/pool-same.log" \
    "$RUN" "$APPS/ze_pair" --same-process "${E[@]}"
IPCBYVAL_STATS=1 expect_ok "event pools: opaque layout passes through untouched" \
    "$L/pool-opaque.log" env ZEDRV_IPC_LAYOUT=opaque "$RUN" "$APPS/ze_pair" "${E[@]}"
if grep -qE 'stats: pool_exports +0 ' "$L/pool-opaque.log" &&
    grep -qE 'stats: export_passthrough +3 ' "$L/pool-opaque.log"; then
    pass "event pools, opaque layout: no record written, 3 exports passed through"
else
    fail "event pools, opaque layout accounting" "$(grep -E 'stats: (pool_)?export' "$L/pool-opaque.log" | tr '\n' ' ')"
fi
# Loader reached only by dlopen(RTLD_LOCAL): RTLD_NEXT cannot see it.
for route in dlsym ddi zex; do
    expect_ok "route $route, loader dlopen'ed RTLD_LOCAL only" "$L/route-$route-dl.log" \
        "$RUN" "$APPS/ze_pair_dl" --route "$route" "${A[@]}"
done

# Handles ipcbyval must leave alone.
expect_ok "SCM_RIGHTS program (bytes 0-3 replaced) still works" "$L/scm.log" \
    "$RUN" "$APPS/ze_pair" --scm-rights "${A[@]}"
expect_ok "open of own handle in the exporting process" "$L/same.log" \
    "$RUN" "$APPS/ze_pair" --same-process "${A[@]}"
IPCBYVAL_STATS=1 expect_ok "opaque layout passes through untouched" "$L/opaque.log" \
    env ZEDRV_IPC_LAYOUT=opaque "$RUN" "$APPS/ze_pair" "${A[@]}"
if grep -qE 'stats: exports +0 ' "$L/opaque.log" && grep -qE 'stats: export_passthrough +[1-9]' "$L/opaque.log"; then
    pass "opaque layout: no record written, counted as pass-through"
else
    fail "opaque layout accounting" "$(grep 'stats: export' "$L/opaque.log" | tr '\n' ' ')"
fi
# A call is counted once whatever route it took: by symbol it passes our
# symbol wrapper, the loader and our table wrapper (3 allocations x 2
# iterations = 6 opens, all passed through).
for route in symbol dlsym ddi; do
    log="$L/opaque-count-$route.log"
    IPCBYVAL_STATS=1 ZEDRV_IPC_LAYOUT=opaque timeout 120 "$RUN" "$APPS/ze_pair" --route "$route" "${A[@]}" >"$log" 2>&1
    n=$(sed -nE 's/.*stats: open_passthrough +([0-9]+) .*/\1/p' "$log" | awk '{ s += $1 } END { print s + 0 }')
    e=$(sed -nE 's/.*stats: export_passthrough +([0-9]+) .*/\1/p' "$log" | awk '{ s += $1 } END { print s + 0 }')
    if grep -q OK "$log" && [ "$n" -eq 6 ] && [ "$e" -eq 6 ]; then
        pass "route $route: 6 pass-through opens and exports counted once each"
    else
        fail "route $route: pass-through counts" "open_passthrough $n, export_passthrough $e (expected 6, 6)"
    fi
done
IPCBYVAL_ENABLE=0 expect_fail "IPCBYVAL_ENABLE=0 is a pure pass-through" "$L/disabled.log" \
    "$NATIVE_ERR" "$RUN" "$APPS/ze_pair" "${A[@]}"
finish
