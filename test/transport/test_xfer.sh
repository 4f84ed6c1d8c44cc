#!/bin/bash
# SPDX-License-Identifier: MIT
# The transport without the GPU shim (test/transport/xfer: a memfd offered
# by one process, fetched by another): pidfd_getfd denied by a seccomp
# filter (Yama / container profile), exporter and importer in different
# pid and network namespaces, an importer of another uid.
. "$(dirname "$0")/../integration/lib.sh"
X="$BUILD/test/transport/xfer"
DENY="$BUILD/test/transport/deny_getfd"
need "$X" "$DENY"
L="$BUILD/test-logs"
T=$(mktemp -d)
chmod 1777 "$T" # the importer of another uid writes its .done file here
trap 'rm -rf "$T"' EXIT
n=0

# xcase NAME EXPORTER-PREFIX IMPORTER-PREFIX IMPORT-ARGS WANT [EXPORTER-WANT]
# Prefixes are words run before xfer (env, unshare ...); WANT and
# EXPORTER-WANT are extended regexps on the importer's and exporter's output.
xcase() {
    local name=$1 epre=$2 ipre=$3 iargs=$4 want=$5 ewant=${6:-}
    n=$((n + 1))
    local h="$T/h$n" log="$L/xfer-$n.log"
    # shellcheck disable=SC2086
    timeout 40 $epre "$X" export "$h" 30 >"$log.exp" 2>&1 &
    local ep=$!
    # shellcheck disable=SC2086
    timeout 30 $ipre "$X" import "$h" $iargs >"$log" 2>&1
    touch "$h.done"
    wait $ep
    if grep -qE "$want" "$log" && { [ -z "$ewant" ] || grep -qE "$ewant" "$log.exp"; }; then
        pass "$name"
    else
        fail "$name" "$(cat "$log" "$log.exp" | tr '\n' ' ')"
    fi
}

if "$DENY" true; then
    xcase "pidfd_getfd denied, auto: socket fallback, once for 5 fetches" "" "$DENY" \
        "--mode auto --again 5" '^OK via=socket .*fetches=5 fallbacks=1$' '^served 5 refused 0$'
    xcase "pidfd_getfd denied, pidfd only: permission denied with the hint" "" "$DENY" \
        "--mode pidfd" '^FAILED \(permission denied\): pidfd_getfd.*hint' '^served 0 '
    xcase "pidfd_getfd denied, socket only" "" "$DENY" "--mode socket" '^OK via=socket '
    both='FAILED \(permission denied\): pidfd_getfd.*; socket fallback: exporter pid [0-9]+ '
    both+='serves no fds over the socket fallback.*IPCBYVAL_TRANSPORT=auto\|socket'
    xcase "pidfd_getfd denied, exporter serves nothing: both reasons" "env XFER_SERVE=0" "$DENY" \
        "--mode auto" "$both"
else
    skip "pidfd_getfd denial" "seccomp filters not available here"
fi

if [ "$(id -u)" = 0 ] && unshare --pid --net --fork true 2>/dev/null; then
    # Exporter below us: its pid is translated, then proven on the pidfd.
    xcase "exporter in a child pid namespace, pidfd only: pid translated" \
        "unshare --pid --fork" "" "--mode pidfd" '^OK via=pidfd-translated local_pid=[1-9]'
    xcase "exporter in a child pid + network namespace, pidfd only: translated" \
        "unshare --pid --net --fork" "" "--mode pidfd" '^OK via=pidfd-translated '
    xcase "exporter in a child pid + network namespace, auto: translated, no socket needed" \
        "unshare --pid --net --fork" "" "--mode auto" '^OK via=pidfd-translated ' '^served 0 '
    xcase "exporter in its own network namespace, socket only: unreachable, said clearly" \
        "unshare --pid --net --fork" "" "--mode socket" \
        '^FAILED \(exporter gone\): .*serves no fds over the socket fallback'
    xcase "exporter below us, pidfd_getfd denied: auto falls back to the socket" \
        "unshare --pid --fork" "$DENY" "--mode auto" '^OK via=socket ' '^served 1 '
    # Siblings: neither sees the other's pids.
    xcase "sibling pid namespaces, shared network (a Kubernetes pod): auto uses the socket" \
        "unshare --pid --fork" "unshare --pid --fork" "--mode auto" '^OK via=socket '
    xcase "sibling pid namespaces, pidfd only: foreign pid namespace" \
        "unshare --pid --fork" "unshare --pid --fork --mount-proc" "--mode pidfd" \
        '^FAILED \(foreign pid namespace\): exporter pid 1 lives in pid namespace pid:\[[0-9]+\], which is not below ours'
    xcase "sibling pid and network namespaces: foreign pid namespace, both reasons" \
        "unshare --pid --net --fork" "unshare --pid --net --fork" "--mode auto" \
        '^FAILED \(foreign pid namespace\): .*another pid namespace.*; socket fallback: .*serves no fds'
else
    skip "pid namespaces" "needs root and unshare --pid --net"
fi

if [ "$(id -u)" = 0 ]; then
    xcase "importer of another uid, socket only: refused and counted" "" "" \
        "--mode socket --uid 65534" \
        '^FAILED \(permission denied\): exporter pid [0-9]+ refused the socket fallback: it serves one uid' \
        '^served 0 refused 1$'
    xcase "importer of another uid, auto: pidfd_getfd and the socket both refuse" "" "" \
        "--mode auto --uid 65534" \
        '^FAILED \(permission denied\): (pidfd_getfd|read /proc/[0-9]+/fd/[0-9]+).*; socket fallback: .*refused the socket fallback' \
        '^served 0 refused 1$'
else
    skip "foreign uid" "needs root"
fi
finish
