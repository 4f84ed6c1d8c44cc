#!/bin/bash
# SPDX-License-Identifier: MIT
# Pid namespaces (issue 22, defect 2): an exporter in a child pid
# namespace with its own /proc (unshare -p -f --mount-proc, as a container
# runs), the importer in the parent. Every open must translate the
# exporter's pid into ours BEFORE anything consults /proc or the registry:
# 20 handles of 20 buffers, each opened once (a miss each, through the
# exporter's kept pidfd after the first), under auto and pidfd. Shapes:
#   pid2   the exporter is pid 2 of its namespace (a shell is pid 1)
#   pid1   the exporter is pid 1 of its namespace: the host's pid 1 must
#          never be consulted in its place
#   decoy  the exporter's namespace-local pid is the host pid of an
#          unrelated process holding fds at every low number
. "$(dirname "$0")/../integration/lib.sh"
F="$BUILD/test/faults/fault_main"
L="$BUILD/test-logs"
need "$LIB" "$ZEDRV" "$F"
if [ "$(id -u)" != 0 ] || ! command -v unshare >/dev/null ||
    ! unshare -p -f --mount-proc true 2>/dev/null; then
    skip "pid namespaces" "needs root and unshare -p -f --mount-proc"
    exit 77
fi
tmp=$(mktemp -d)
decoy=
trap 'rm -rf "$tmp"; [ -n "$decoy" ] && kill "$decoy" 2>/dev/null' EXIT
export XNS_ROUNDS=20

# The exporter's command inside its namespace, by shape.
exporter_cmd() { # SHAPE FILE
    local q
    printf -v q '%q %q xns-export %q' "$RUN" "$F" "$2"
    case $1 in
    pid1) echo "exec $q" ;;
    pid2) echo "$q; :" ;;
    decoy) echo "echo $((decoy - 1)) >/proc/sys/kernel/ns_last_pid && $q; :" ;;
    esac
}

xns() { # SHAPE MODE
    local shape=$1 mode=$2 name="xns-$1-$2"
    rm -f "$tmp/h" "$tmp/h.done"
    timeout 60 unshare -p -f --mount-proc sh -c "$(exporter_cmd "$shape" "$tmp/h")" \
        >"$L/$name-exp.log" 2>&1 &
    local ep=$!
    XNS_LABEL="$shape, transport=$mode" IPCBYVAL_TRANSPORT=$mode timeout 60 \
        "$RUN" "$F" xns-import "$tmp/h" >"$L/$name.log" 2>&1
    wait $ep
    local line
    line=$(grep -E '^(PASS|FAIL): ' "$L/$name.log" | head -1)
    case $line in
    PASS:*) pass "[$shape, $mode] ${line#PASS: }" ;;
    FAIL:*) fail "[$shape, $mode] ${line#FAIL: }" "$(grep -m1 error "$L/$name.log")" ;;
    *) fail "$name" "$(tail -3 "$L/$name.log" | tr '\n' ' ')" ;;
    esac
    if [ "$shape" = decoy ] && ! grep -q "^xns-export: pid $decoy\$" "$L/$name-exp.log"; then
        fail "[$shape, $mode] the exporter held the decoy's number" "$(head -2 "$L/$name-exp.log")"
    fi
}

for mode in auto pidfd; do
    xns pid2 "$mode"
    xns pid1 "$mode"
done

# The decoy: an unrelated process whose host pid the exporter will hold
# in its own namespace, with fds open at every number an export may use.
bash -c 'for i in $(seq 3 200); do eval "exec $i</dev/null"; done; exec sleep 120' &
decoy=$!
sleep 0.2
if [ "$decoy" -gt 2 ] && [ -d "/proc/$decoy/fd" ]; then
    for mode in auto pidfd; do
        xns decoy "$mode"
    done
else
    skip "decoy" "could not start the decoy process"
fi
finish
