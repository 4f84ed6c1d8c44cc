#!/bin/bash
# SPDX-License-Identifier: MIT
# The rendezvous directory (IPCBYVAL_RENDEZVOUS_DIR, handles/rendezvous.h):
# exporter and importer each in their own pid + network + mount
# namespaces (two pods, one container per rank), sharing only a temporary
# directory. Without the directory this is 0 opens of 20 (pidfd_open cannot
# name the exporter, its abstract socket is in another network namespace).
#   rounds: 20 verified on the Level Zero test driver (classic and opaque
#     layouts, memory and event pools), on the CUDA double (VMM); a double
#     close refused and harmless; allocation ids that repeat never give
#     stale data; the importer's stats count every open served through the
#     directory (open_rendezvous), the exporter's every fd (rendezvous_served)
#   as in one namespace: one sequence of opens, closes, a double close and
#     context destructions on both sides (rdv_seq.c) gives the same return
#     codes across namespaces as in one (Level Zero classic and CUDA VMM
#     against ipcbyval in one namespace, the opaque layout against the
#     driver alone)
#   lifetimes: the exporter's frees release an idle importer's mappings;
#     its exit releases them (both on the drivers' shared ledger)
#   trust: a socket planted by another uid, or held by another process of
#     ours, is refused; a stale socket of a killed exporter is ignored and
#     swept; a world-writable directory is refused with a message; another
#     uid is refused unless IPCBYVAL_RENDEZVOUS_GID names its group
. "$(dirname "$0")/../integration/lib.sh"
T="$BUILD/test/transport" CU="$BUILD/test/cudadrv"
need "$LIB" "$ZEDRV" "$T/rdv_ze"
L="$BUILD/test-logs"
if [ "$(id -u)" != 0 ] || ! unshare --pid --net --mount --fork --mount-proc true 2>/dev/null; then
    skip rendezvous "needs root and unshare --pid --net --mount (separate namespaces per side)"
    exit 77
fi
# --kill-child: a killed unshare takes its child (the namespace's init)
# with it; signals other than SIGKILL do not reach that init.
NS=(unshare --pid --net --mount --fork --mount-proc --kill-child)
unshare --fork --kill-child true 2>/dev/null ||
    { skip rendezvous "unshare has no --kill-child (util-linux 2.32+)"; exit 77; }
# Under /tmp, whatever TMPDIR says: another uid must reach it.
top=$(mktemp -d /tmp/ipcbyval-rdv.XXXXXX)
trap 'rm -rf "$top"' EXIT
chmod 755 "$top"
n=0

# newdir: a fresh shared directory (mode 700, ours) with the two FIFOs.
newdir() {
    n=$((n + 1))
    D="$top/d$n"
    mkdir -m 700 "$D" && mkfifo "$D/c.h" "$D/c.a"
}

# side LOG PROG ARGS...: one side in its own namespaces, with the preload
# (SAME_NS=1: in ours; PRE=env: without the preload).
side() {
    local log=$1; shift
    local ns=("${NS[@]}")
    [ -n "${SAME_NS:-}" ] && ns=()
    timeout -s KILL 60 "${ns[@]}" "${PRE:-$RUN}" "$@" >"$log" 2>&1
}

# pair NAME OKSIDE PROG ARGS...: the exporter in the background, the
# importer in front, same ARGS; OKSIDE (exp|imp) must print OK.
pair() {
    local name=$1 okside=$2 prog=$3; shift 3
    local tag; tag=$(echo "$name" | tr -c 'a-zA-Z0-9\n' '-' | cut -c1-40)
    newdir
    IPCBYVAL_RENDEZVOUS_DIR=$D IPCBYVAL_STATS=1 side "$L/rdv-$tag-exp.log" "$prog" export "$D" "$@" &
    local ep=$!
    IPCBYVAL_RENDEZVOUS_DIR=$D IPCBYVAL_STATS=1 side "$L/rdv-$tag-imp.log" "$prog" import "$D" "$@"
    wait $ep
    local log="$L/rdv-$tag-$okside.log"
    if grep -q '^OK rdv' "$log"; then
        pass "$name ($(grep -h '^OK rdv' "$log" | sed 's/^OK rdv [a-z]*: //'))"
        LAST_IMP="$L/rdv-$tag-imp.log" LAST_EXP="$L/rdv-$tag-exp.log"
    else
        fail "$name" "$(grep -hv '^\[ipcbyval.*stats' "$L/rdv-$tag-imp.log" "$L/rdv-$tag-exp.log" |
            grep -E 'FAILED|error|warn|failed' | head -3 | tr '\n' ' ')"
        LAST_IMP=""
    fi
}

# stat LOG NAME: the value of counter NAME in LOG's exit summary.
stat() { sed -n "s/.*stats: $2 *\([0-9]*\) .*/\1/p" "$1" | head -1; }
# opens_counted WHAT N: the last pair's importer counted N opens through
# the directory (exactly), its exporter served N fds there at least.
opens_counted() {
    [ -n "$LAST_IMP" ] || return
    local opens served
    opens=$(stat "$LAST_IMP" open_rendezvous) served=$(stat "$LAST_EXP" rendezvous_served)
    [ "${opens:-0}" -eq "$2" ] && [ "${served:-0}" -ge "$2" ] &&
        pass "$1: the stats count every open served through the directory (importer open_rendezvous $opens, exporter rendezvous_served $served)" ||
        fail "$1: stats" "open_rendezvous ${opens:-none}, rendezvous_served ${served:-none} ($2 opens)"
}

pair "Level Zero: 20 rounds across pid+net+mount namespaces" imp "$T/rdv_ze" --rounds 20
[ -n "$LAST_IMP" ] && { grep -qE 'stats: via_rendezvous +1 ' "$LAST_IMP" &&
    pass "the importer's stats count the exporter reached via the rendezvous directory" ||
    fail "stats via_rendezvous" "$(grep via_ "$LAST_IMP" | tr '\n' ' ')"; }
opens_counted "Level Zero" 20
pair "Level Zero event pools: 20 rounds across namespaces" imp "$T/rdv_ze" --case pools --rounds 20
opens_counted "Level Zero event pools" 20
# The opaque layout (compute-runtime 25.35 on): the driver's own pidfd
# import cannot name an exporter in another pid namespace (0 of 20
# without the record in its reserved bytes, ze_opaque.c).
export ZEDRV_IPC_LAYOUT=opaque
pair "Level Zero opaque layout: 20 rounds across namespaces" imp "$T/rdv_ze" --rounds 20
opens_counted "Level Zero opaque layout" 20
pair "Level Zero opaque event pools: 20 rounds across namespaces" imp "$T/rdv_ze" --case pools --rounds 20
opens_counted "Level Zero opaque event pools" 20
pair "Level Zero opaque layout: double close is refused and changes nothing (10 rounds)" imp \
    "$T/rdv_ze" --rounds 10 --double-close
ZEDRV_TOTAL_MEM=64M ZEDRV_LEDGER="$top/ze-opaque.ledger" pair \
    "Level Zero opaque layout: frees release an idle importer's mappings (10 x 16 MiB of 64 MiB)" \
    exp "$T/rdv_ze" --case free --rounds 10 --size 16777216
SAME_NS=1 pair "Level Zero opaque layout in one namespace with the directory set: the driver's own import (5 rounds)" \
    imp "$T/rdv_ze" --rounds 5
[ -n "$LAST_IMP" ] && { [ "$(stat "$LAST_IMP" open_passthrough)" = 5 ] &&
    pass "... each of its opens went to the driver as the driver wrote the handle" ||
    fail "opaque in one namespace" "open_passthrough $(stat "$LAST_IMP" open_passthrough), not 5"; }
unset ZEDRV_IPC_LAYOUT
pair "Level Zero: double close is refused and changes nothing (10 rounds)" imp "$T/rdv_ze" \
    --rounds 10 --double-close
ZEDRV_ALLOC_ID=address pair "Level Zero: allocation ids that repeat (by address), never stale (20 rounds)" \
    imp "$T/rdv_ze" --rounds 20
export ZEDRV_TOTAL_MEM=64M
ZEDRV_LEDGER="$top/ze.ledger" pair "Level Zero: frees release an idle importer's mappings (10 x 16 MiB of 64 MiB)" \
    exp "$T/rdv_ze" --case free --rounds 10 --size 16777216
ZEDRV_LEDGER="$top/ze-exit.ledger" pair "Level Zero: the exporter's exit releases an idle importer's mapping" \
    imp "$T/rdv_ze" --case exit --size 16777216
unset ZEDRV_TOTAL_MEM

# seq_agree NAME REF PROG ARGS...: the seq case (rdv_seq.c) in one
# namespace (REF ipcbyval: under the preload; native: without it), then
# across namespaces under ipcbyval: the return codes must be the same.
seq_agree() {
    local name=$1 ref=$2 prog=$3; shift 3
    local tag a b; tag=$(echo "$name" | tr -c 'a-zA-Z0-9\n' '-' | cut -c1-40)
    local pre=$RUN; [ "$ref" = native ] && pre=env
    newdir
    IPCBYVAL_RENDEZVOUS_DIR=$D SAME_NS=1 PRE=$pre side "$L/rdv-$tag-one-exp.log" "$prog" export "$D" --case seq "$@" &
    IPCBYVAL_RENDEZVOUS_DIR=$D SAME_NS=1 PRE=$pre side "$L/rdv-$tag-one-imp.log" "$prog" import "$D" --case seq "$@"
    wait $!
    rm -f "$D/c.h" "$D/c.a" && mkfifo "$D/c.h" "$D/c.a"
    IPCBYVAL_RENDEZVOUS_DIR=$D side "$L/rdv-$tag-exp.log" "$prog" export "$D" --case seq "$@" &
    IPCBYVAL_RENDEZVOUS_DIR=$D side "$L/rdv-$tag-imp.log" "$prog" import "$D" --case seq "$@"
    wait $!
    a=$(grep -h '^SEQ' "$L/rdv-$tag-one-imp.log") b=$(grep -h '^SEQ' "$L/rdv-$tag-imp.log")
    [ -n "$a" ] && [ "$a" = "$b" ] && pass "$name (${b#SEQ })" ||
        fail "$name" "in one namespace (${ref}): ${a:-none}; across: ${b:-none}"
}
seq_agree "Level Zero: double close, context destroy (same handle value) and the exporter's destroy as in one namespace" \
    ipcbyval "$T/rdv_ze"
ZEDRV_IPC_LAYOUT=opaque seq_agree "Level Zero opaque layout: the same sequence as the driver alone in one namespace" \
    native "$T/rdv_ze"

if [ -x "$T/rdv_cu" ] && nm -D --defined-only "$LIB" | grep -qw cuIpcGetMemHandle; then
    # The double's default export (one shared inode, as /dev/nvidiactl) is
    # reached through the exporter's /proc, hidden in another pid and
    # mount namespace; its per-allocation memfds cross them as the real
    # driver's fds do (test/cudadrv/drv_vmm.c).
    export CUDADRV_VMM_EXPORT=memfd
    export LD_LIBRARY_PATH="$CU${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    pair "CUDA VMM (double): 20 rounds across namespaces" imp "$T/rdv_cu" --mem vmm --rounds 20
    [ -n "$LAST_IMP" ] && { o=$(stat "$LAST_IMP" open_rendezvous)
        [ "${o:-0}" -ge 20 ] && pass "CUDA VMM: the stats count the opens served through the directory (open_rendezvous $o)" ||
            fail "CUDA VMM: stats" "open_rendezvous ${o:-none} (20 opens at least)"; }
    seq_agree "CUDA VMM: double close, context reset (same handle value) and the exporter's reset as in one namespace" \
        ipcbyval "$T/rdv_cu" --mem vmm
    pair "CUDA VMM: double close is refused and changes nothing (10 rounds)" imp "$T/rdv_cu" \
        --mem vmm --rounds 10 --double-close
    export CUDADRV_TOTAL_MEM=64M
    CUDADRV_LEDGER="$top/cu.ledger" pair "CUDA VMM: frees release an idle importer's mappings" \
        exp "$T/rdv_cu" --mem vmm --case free --rounds 10 --size 16777216
    CUDADRV_LEDGER="$top/cu-exit.ledger" pair "CUDA VMM: the exporter's exit releases an idle importer's mapping" \
        imp "$T/rdv_cu" --mem vmm --case exit --size 16777216
    unset CUDADRV_TOTAL_MEM
else
    skip "CUDA across namespaces" "no CUDA double"
fi

# wait_sock: the exporter's socket in $D (its first export made it).
wait_sock() {
    for _ in $(seq 500); do
        S=$(ls "$D"/ipcbyval-*.sock 2>/dev/null | head -1)
        [ -n "$S" ] && return 0
        sleep 0.02
    done
    return 1
}

# hostile NAME PATTERN SETUP: one round; the exporter holds its handle
# until SETUP (run once its socket exists) is done; the importer's open
# must fail with PATTERN in its log.
hostile() {
    local name=$1 pat=$2 setup=$3
    local tag; tag=$(echo "$name" | tr -c 'a-zA-Z0-9\n' '-' | cut -c1-40)
    newdir
    IPCBYVAL_RENDEZVOUS_DIR=$D side "$L/rdv-$tag-exp.log" "$T/rdv_ze" export "$D" --rounds 1 \
        --hold "$top/go$n" &
    local ep=$!
    IPCBYVAL_RENDEZVOUS_DIR=$D side "$L/rdv-$tag-imp.log" "$T/rdv_ze" import "$D" --rounds 1 &
    local ip=$!
    if ! wait_sock; then
        fail "$name" "the exporter made no socket in the directory"
    else
        $setup
        touch "$top/go$n"
    fi
    wait $ip
    wait $ep
    if grep -q '^OK rdv' "$L/rdv-$tag-imp.log"; then
        fail "$name" "the importer opened the handle"
    elif grep -qE "$pat" "$L/rdv-$tag-imp.log"; then
        pass "$name"
    else
        fail "$name" "no '$pat': $(grep -E 'error|FAILED' "$L/rdv-$tag-imp.log" | head -2 | tr '\n' ' ')"
    fi
}

# The exporter's socket moved aside and an impostor listening in its place.
plant_as() {
    mv "$S" "$S.real"
    "$T/rdv_ze" plant "$S" "$1" 3 >"$top/plant$n.log" 2>&1 &
    for _ in $(seq 100); do grep -q planted "$top/plant$n.log" && break; sleep 0.02; done
}
plant_other() { plant_as 65534; }
plant_ours() { plant_as "$(id -u)"; }
hostile "a socket planted by another uid at the exporter's name is refused, never connected to" \
    'planted by someone else' plant_other
wait
grep -q 'plant: 0 connections' "$top/plant$n.log" ||
    fail "the planted socket saw no connection" "$(cat "$top/plant$n.log")"
hostile "a socket of our uid held by another process is refused (SO_PEERPIDFD's pidfs inode)" \
    'held by another process \(pidfs inode' plant_ours
wait

# A killed exporter: its socket stays, nobody listens. The importer, told
# of the handle before the kill, must fail at once, not wait or trust it;
# the next exporter of this uid sweeps the stale socket.
newdir
# unshare itself in the background, so that $! is the process to kill.
IPCBYVAL_RENDEZVOUS_DIR=$D "${NS[@]}" "$RUN" "$T/rdv_ze" export "$D" --rounds 1 \
    >"$L/rdv-stale-exp.log" 2>&1 &
ep=$!
IPCBYVAL_RENDEZVOUS_DIR=$D side "$L/rdv-stale-imp.log" "$T/rdv_ze" import "$D" --rounds 1 \
    --hold "$top/go-stale" &
ip=$!
if wait_sock; then
    sleep 0.2 # the handle is with the importer (it holds before opening)
    kill -KILL $ep 2>/dev/null
    wait $ep 2>/dev/null
    # --kill-child kills the exporter once unshare is gone, and with it its
    # namespace: wait until nobody listens, else it may still answer.
    "$T/rdv_ze" stale "$S" || fail "stale socket" "the killed exporter still listens after 5 s"
    stale=$S
    [ -S "$stale" ] || fail "stale socket" "the killed exporter's socket is gone: nothing tested"
    t0=$(date +%s%N)
    touch "$top/go-stale"
    wait $ip
    ms=$((($(date +%s%N) - t0) / 1000000))
    grep -q 'is stale (nobody listens' "$L/rdv-stale-imp.log" && [ "$ms" -lt 5000 ] &&
        pass "a stale socket of a killed exporter is ignored (open refused in $ms ms)" ||
        fail "stale socket ignored" "$ms ms: $(grep -E 'error|FAILED' "$L/rdv-stale-imp.log" | head -2 | tr '\n' ' ')"
    rm -f "$D/c.h" "$D/c.a" && mkfifo "$D/c.h" "$D/c.a"
    IPCBYVAL_RENDEZVOUS_DIR=$D side "$L/rdv-stale2-exp.log" "$T/rdv_ze" export "$D" --rounds 2 &
    ep=$!
    IPCBYVAL_RENDEZVOUS_DIR=$D side "$L/rdv-stale2-imp.log" "$T/rdv_ze" import "$D" --rounds 2
    wait $ep
    grep -q '^OK rdv' "$L/rdv-stale2-imp.log" && [ ! -e "$stale" ] &&
        pass "the next exporter sweeps the stale socket and serves" ||
        fail "stale socket swept" "$(ls "$D"; grep -E 'error|FAILED' "$L/rdv-stale2-imp.log" | head -2)"
else
    fail "stale socket" "the exporter made no socket in the directory"
    wait
fi

newdir
chmod 1777 "$D"
IPCBYVAL_RENDEZVOUS_DIR=$D side "$L/rdv-ww-exp.log" "$T/rdv_ze" export "$D" --rounds 1 &
ep=$!
IPCBYVAL_RENDEZVOUS_DIR=$D side "$L/rdv-ww-imp.log" "$T/rdv_ze" import "$D" --rounds 1
wait $ep
grep -q 'is world-writable (mode 1777)' "$L/rdv-ww-imp.log" &&
    grep -q 'is world-writable' "$L/rdv-ww-exp.log" && ! grep -q '^OK' "$L/rdv-ww-imp.log" &&
    ! ls "$D"/ipcbyval-* >/dev/null 2>&1 &&
    pass "a world-writable directory is refused with a message (both sides), nothing made there" ||
    fail "world-writable directory" "$(grep -h 'warn' "$L"/rdv-ww-*.log | head -2 | tr '\n' ' ')"

# Another uid: refused by default; served when the group is opted in.
# It runs copies in $top/bin: the checkout may be out of its reach.
if ! command -v setpriv >/dev/null || ! getent group nogroup >/dev/null; then
    skip "another uid" "needs setpriv and the nogroup group"
elif ! why=$(copy_for_uid 65534 "$top/bin" "$T/rdv_ze" $([ -x "$T/rdv_cu" ] && echo "$T/rdv_cu" "$CU/libcuda.so.1")); then
    skip "another uid" "$why"
else
    G=$(getent group nogroup | cut -d: -f3)
    O=$top/bin
    for mode in uid gid; do
        newdir
        # uid: the group may enter and use the FIFOs, not write the directory
        chgrp "$G" "$D" "$D/c.h" "$D/c.a" && chmod 660 "$D/c.h" "$D/c.a"
        chmod $([ $mode = gid ] && echo 2770 || echo 2750) "$D"
        (
            export IPCBYVAL_RENDEZVOUS_DIR=$D
            [ $mode = gid ] && export IPCBYVAL_RENDEZVOUS_GID="$G"
            side "$L/rdv-$mode-exp.log" "$T/rdv_ze" export "$D" --rounds 3 &
            ep=$!
            timeout -s KILL 60 "${NS[@]}" setpriv --reuid 65534 --regid "$G" --clear-groups \
                env IPCBYVAL_LIB="$O/${LIB##*/}" ZE_ENABLE_ALT_DRIVERS="$O/${ZEDRV##*/}" \
                "$O/${RUN##*/}" "$O/rdv_ze" import "$D" --rounds 3 >"$L/rdv-$mode-imp.log" 2>&1
            [ $mode = uid ] && kill -KILL $ep 2>/dev/null # it waits for an answer never sent
            wait $ep
        ) 2>/dev/null
        if [ $mode = uid ]; then
            ! grep -q '^OK' "$L/rdv-$mode-imp.log" && grep -q 'not a socket of our uid' "$L/rdv-$mode-imp.log" &&
                pass "another uid's socket is not used by default (IPCBYVAL_RENDEZVOUS_GID unset)" ||
                fail "another uid refused" "$(grep -E 'error|OK' "$L/rdv-$mode-imp.log" | head -2 | tr '\n' ' ')"
        else
            grep -q '^OK rdv' "$L/rdv-$mode-imp.log" &&
                pass "another uid of group $G is served with IPCBYVAL_RENDEZVOUS_GID=$G" ||
                fail "group opt-in" "$(grep -E 'error|warn|FAILED' "$L/rdv-$mode-imp.log" "$L/rdv-$mode-exp.log" | head -3 | tr '\n' ' ')"
        fi
    done
    # A member holds a handle of a CUDA VMM reservation: its manifest and
    # every chunk the manifest lists come with their tags.
    if [ -x "$O/rdv_cu" ] && nm -D --defined-only "$LIB" | grep -qw cuIpcGetMemHandle; then
        newdir
        chgrp "$G" "$D" "$D/c.h" "$D/c.a" && chmod 660 "$D/c.h" "$D/c.a" && chmod 2770 "$D"
        (
            export IPCBYVAL_RENDEZVOUS_DIR=$D IPCBYVAL_RENDEZVOUS_GID="$G" CUDADRV_VMM_EXPORT=memfd
            LD_LIBRARY_PATH="$CU" side "$L/rdv-gid-cu-exp.log" "$T/rdv_cu" export "$D" --mem vmm --rounds 3 &
            ep=$!
            timeout -s KILL 60 "${NS[@]}" setpriv --reuid 65534 --regid "$G" --clear-groups \
                env IPCBYVAL_LIB="$O/${LIB##*/}" LD_LIBRARY_PATH="$O" \
                "$O/${RUN##*/}" "$O/rdv_cu" import "$D" --mem vmm --rounds 3 >"$L/rdv-gid-cu-imp.log" 2>&1
            wait $ep
        ) 2>/dev/null
        grep -q '^OK rdv' "$L/rdv-gid-cu-imp.log" &&
            pass "another uid of group $G opens CUDA VMM handles it was sent (manifest and chunks tagged)" ||
            fail "group opt-in, CUDA VMM" "$(grep -E 'error|warn|FAILED' "$L/rdv-gid-cu-imp.log" "$L/rdv-gid-cu-exp.log" | head -3 | tr '\n' ' ')"
    else
        skip "another uid, CUDA VMM" "no CUDA double"
    fi
fi
finish
