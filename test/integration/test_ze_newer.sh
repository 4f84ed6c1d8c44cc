#!/bin/bash
# SPDX-License-Identifier: MIT
# The IPC entry points newer than loader 1.8.12 (spec 1.4), called as a
# program built against newer headers calls them (ze_newapi): through
# zeDriverGetExtensionFunctionAddress, which that loader forwards to the
# driver, each fails natively where the handle crosses processes and works
# under ipcbyval; the fabric request passes through; as symbols, which
# that loader lacks, ipcbyval answers what it can without the loader and
# returns ZE_RESULT_ERROR_UNSUPPORTED_FEATURE for the rest. Then through a
# spec-1.15 loader (test/zeldr, first in LD_LIBRARY_PATH) that has them as
# symbols and in its tables (Mem 1.15, MemExp, EventPool 1.6): each route
# fails natively and works by value.
. "$(dirname "$0")/lib.sh"
NA="$APPS/ze_newapi"
ZELDR="$BUILD/test/zeldr"
need "$LIB" "$ZEDRV" "$NA" "$ZELDR/libze_loader.so.1"
L="$BUILD/test-logs"

for c in props fd fd-export put; do
    expect_fail "$c, extension route: fails natively" "$L/newer-$c-native.log" \
        'failed: 0x78000004' "$NA" --case "$c"
    expect_ok "$c, extension route: by value under ipcbyval" "$L/newer-$c.log" \
        "$RUN" "$NA" --case "$c"
done
expect_ok "fabric handle type: the driver's answer, natively" "$L/newer-fabric-native.log" \
    "$NA" --case fabric
expect_ok "fabric handle type: passed through under ipcbyval" "$L/newer-fabric.log" \
    "$RUN" "$NA" --case fabric
grep -q 'fabric handle: ZE_RESULT_ERROR_UNSUPPORTED_FEATURE' "$L/newer-fabric.log" ||
    fail "fabric handle type" "not the driver's answer: $(head -2 "$L/newer-fabric.log")"

# Symbols: natively absent (the loader lacks them); under ipcbyval a
# foreign handle's fd comes from ipcbyval itself, the rest needs the loader.
expect_fail "fd, symbol route: absent natively" "$L/newer-fd-sym-native.log" \
    'MISSING zeMemGetFileDescriptorFromIpcHandleExp' "$NA" --case fd --route symbol
expect_ok "fd, symbol route: answered by ipcbyval without the loader" "$L/newer-fd-sym.log" \
    "$RUN" "$NA" --case fd --route symbol
expect_fail "props, symbol route: UNSUPPORTED_FEATURE without the loader's entry point" \
    "$L/newer-props-sym.log" 'zeMemGetIpcHandleWithProperties failed: 0x78000003' \
    "$RUN" "$NA" --case props --route symbol
expect_fail "MemExp table: absent from loader 1.8.12" "$L/newer-ddi-1.8.log" \
    'MISSING zeMemGetFileDescriptorFromIpcHandleExp' "$RUN" "$NA" --case fd --route ddi

for route in symbol ddi; do
    for c in props fd fd-export put; do
        expect_fail "$c, $route route of a 1.15 loader: fails natively" \
            "$L/newer-$c-$route-1.15-native.log" 'failed: 0x78000004' \
            env LD_LIBRARY_PATH="$ZELDR" "$NA" --case "$c" --route "$route"
        expect_ok "$c, $route route of a 1.15 loader: by value under ipcbyval" \
            "$L/newer-$c-$route-1.15.log" \
            env LD_LIBRARY_PATH="$ZELDR" "$RUN" "$NA" --case "$c" --route "$route"
    done
done
expect_ok "memory and event pools by value through a 1.15 loader" "$L/newer-pair-1.15.log" \
    env LD_LIBRARY_PATH="$ZELDR" "$RUN" "$APPS/ze_pair" --events --allocs 2 --iters 2
finish
