#!/bin/bash
# SPDX-License-Identifier: MIT
# Pid namespaces: exporter and importer as separate processes in different
# pid (and network) namespaces, 20 handles of 20 buffers, each opened once
# (a miss each: after the first, through the exporter's kept pidfd). Every
# open must translate the exporter's pid into ours BEFORE anything
# consults /proc or the registry (issue 22, defect 2). Exporter shapes:
#   pid1   pid 1 of its namespace: the host's pid 1 must never be
#          consulted in its place
#   pid2   pid 2 of its namespace (a shell is pid 1)
#   decoy  its namespace-local pid is the host pid of an unrelated process
#          holding fds at every low number
# with its own /proc (unshare --mount-proc, as a container runs) or the
# host's, under auto and pidfd; and a sibling namespace, which is refused.
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

# xns NAME MODE SHAPE EXPORTER-UNSHARE-FLAGS [IMPORTER-UNSHARE-FLAGS [expect-fail]]
xns() {
    local name=$1 mode=$2 shape=$3 eflags=$4 iflags=${5:-} extra=${6:-} line
    rm -f "$tmp/h" "$tmp/h.done"
    # shellcheck disable=SC2086
    timeout 60 unshare $eflags --fork sh -c "$(exporter_cmd "$shape" "$tmp/h")" \
        >"$L/xns-$name-exp.log" 2>&1 &
    local ep=$!
    # shellcheck disable=SC2086
    XNS_LABEL="$shape, transport=$mode" IPCBYVAL_TRANSPORT=$mode timeout 60 \
        ${iflags:+unshare $iflags --fork} "$RUN" "$F" xns-import "$tmp/h" $extra \
        >"$L/xns-$name.log" 2>&1
    wait $ep
    line=$(grep -E '^(PASS|FAIL): ' "$L/xns-$name.log" | head -1)
    case $line in
    PASS:*) pass "[$name] ${line#PASS: }" ;;
    FAIL:*) fail "[$name] ${line#FAIL: }" "$(grep -m1 error "$L/xns-$name.log")" ;;
    *) fail "$name" "$(tail -3 "$L/xns-$name.log" | tr '\n' ' ')" ;;
    esac
    if [ "$shape" = decoy ] && ! grep -q "^xns-export: pid $decoy\$" "$L/xns-$name-exp.log"; then
        fail "[$name] the exporter held the decoy's number" "$(head -2 "$L/xns-$name-exp.log")"
    fi
}

for mode in auto pidfd; do
    xns "pid2-$mode" "$mode" pid2 "-p --mount-proc"
    xns "pid1-$mode" "$mode" pid1 "-p --mount-proc"
done
xns "pid1-hostproc-pidfd" pidfd pid1 "-p"
xns "pid1-net-pidfd" pidfd pid1 "-p -n"
xns sibling auto pid1 "-p -n" "-p -n" expect-fail
grep -q 'not below ours' "$L/xns-sibling.log" && grep -q 'serves no fds over the socket' "$L/xns-sibling.log" &&
    pass "sibling namespace: message names the namespace and the unreachable socket" ||
    fail "sibling message" "$(grep error "$L/xns-sibling.log" | head -2 | tr '\n' ' ')"

# The decoy: an unrelated process whose host pid the exporter will hold
# in its own namespace, with fds open at every number an export may use.
bash -c 'for i in $(seq 3 200); do eval "exec $i</dev/null"; done; exec sleep 120' &
decoy=$!
sleep 0.2
if [ "$decoy" -gt 2 ] && [ -d "/proc/$decoy/fd" ]; then
    for mode in auto pidfd; do
        xns "decoy-$mode" "$mode" decoy "-p --mount-proc"
    done
else
    skip "decoy" "could not start the decoy process"
fi
finish
