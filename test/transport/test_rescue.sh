#!/bin/bash
# SPDX-License-Identifier: MIT
# The pidfd_getfd rescue: other libraries' own pidfd_getfd (PyTorch's
# expandable segments, Intel's driver with opaque handles), refused by the
# kernel (a seccomp filter standing in for Docker's profile or Yama), served
# by the exporter's broker when both processes run ipcbyval; and every case
# where it must stay refused, with the kernel's errno unchanged.
. "$(dirname "$0")/../integration/lib.sh"
DENY="$BUILD/test/transport/deny_getfd"
FS="$BUILD/test/transport/fdshare"
CU="$BUILD/test/cudadrv"
L="$BUILD/test-logs"
need "$LIB" "$DENY"
"$DENY" true || { skip rescue "seccomp filters not available here"; exit 77; }
EPERM='pidfd_getfd\(pid [0-9]+, fd [0-9]+\) failed: Operation not permitted \(errno 1\)'

# fdshare_pair.sh LOG "EXPORTER-ARGS" "IMPORTER-ARGS" -- EXPORTER-PREFIX... -- IMPORTER-PREFIX...
pair() {
    LD_LIBRARY_PATH="$CU" "$ROOT/test/transport/fdshare_pair.sh" "$FS" "$@" >/dev/null
}

ok() { # NAME LOG PAIR-ARGS...: the importer got the exporter's memory
    local name=$1 log=$2
    shift 2
    if pair "$log" "$@" && grep -q '^OK same object' "$log"; then
        pass "$name"
    else
        fail "$name" "expected the exporter's memory: $(grep -v '^$' "$log" | tail -2 | tr '\n' ' ')"
    fi
}

refused() { # NAME LOG WHY PAIR-ARGS...: the importer saw the kernel's EPERM,
    # and ipcbyval's debug line says why it could not help (WHY, a regex;
    # empty where no ipcbyval runs in the importer)
    local name=$1 log=$2 why=$3
    shift 3
    if IPCBYVAL_LOG=debug pair "$log" "$@"; then
        fail "$name" "expected EPERM, got an fd"
    elif ! grep -qE "$EPERM" "$log"; then
        fail "$name" "expected EPERM: $(grep -v '^$' "$log" | tail -2 | tr '\n' ' ')"
    elif [ -n "$why" ] && ! grep -qE "$why" "$log"; then
        fail "$name" "EPERM, but not because '$why': $(grep 'rescue' "$log" | tail -1)"
    else
        pass "$name"
    fi
}

if [ -x "$FS" ] && nm -D --defined-only "$LIB" | grep -qw cuMemExportToShareableHandle; then
    refused "PyTorch's pattern under the denial, without ipcbyval: EPERM (what users report)" \
        "$L/rs-native.log" "" "" "" -- env -- "$DENY"
    IPCBYVAL_LOG=info ok "with ipcbyval in both: syscall(SYS_pidfd_getfd) rescued, same memory" \
        "$L/rs-syscall.log" "" "" -- "$RUN" -- "$DENY" "$RUN"
    grep -q 'was refused (EPERM: refused by Yama ptrace_scope or a seccomp profile): the fd was fetched' \
        "$L/rs-syscall.log" && pass "the first rescue is logged, naming the denial" ||
        fail "rescue logged" "$(grep ipcbyval "$L/rs-syscall.log" | tail -2 | tr '\n' ' ')"
    if [ "$(ldd --version | head -1 | grep -oE '[0-9]+\.[0-9]+$' | awk -F. '{print ($1 > 2 || $2 >= 36)}')" = 1 ]; then
        ok "glibc's pidfd_getfd() wrapper rescued too" "$L/rs-wrapper.log" "" "--wrapper" \
            -- "$RUN" -- "$DENY" "$RUN"
    else
        skip "pidfd_getfd() wrapper" "glibc before 2.36 has none"
    fi
    DENY_GETFD_ERRNO=ENOSYS IPCBYVAL_LOG=info ok "ENOSYS (gVisor, kernels before 5.6) rescued too" \
        "$L/rs-enosys.log" "" "" -- "$RUN" -- "$DENY" "$RUN"
    grep -q 'was refused (ENOSYS' "$L/rs-enosys.log" && pass "the ENOSYS rescue names its denial" ||
        fail "ENOSYS named" "$(grep ipcbyval "$L/rs-enosys.log" | tail -1)"
    refused "an fd the exporter never exported stays EPERM" "$L/rs-other.log" 'does not serve fd' "" "--ask other" \
        -- "$RUN" -- "$DENY" "$RUN"
    refused "exported fd closed, its number now an eventfd (one shared inode, as /dev/nvidiactl): EPERM" \
        "$L/rs-reuse-ev.log" 'no longer holds the open file' "--reuse eventfd" "" -- "$RUN" -- "$DENY" "$RUN"
    refused "exported fd closed, its number now a memfd never exported: EPERM" \
        "$L/rs-reuse-memfd.log" 'no longer holds the open file' "--reuse memfd" "" -- "$RUN" -- "$DENY" "$RUN"
    refused "exporter without ipcbyval: no broker, the kernel's EPERM" "$L/rs-noexp.log" 'serves no fds over the socket' "" "" \
        -- env -- "$DENY" "$RUN"
    IPCBYVAL_TRANSPORT=pidfd refused "IPCBYVAL_TRANSPORT=pidfd never rescues" "$L/rs-pidfd.log" "" "" "" \
        -- "$RUN" -- "$DENY" "$RUN"
    IPCBYVAL_ENABLE=0 refused "IPCBYVAL_ENABLE=0 never rescues" "$L/rs-disabled.log" "" "" "" \
        -- "$RUN" -- "$DENY" "$RUN"
    if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
        # Another uid reads copies in a folder it can reach.
        t=$(mktemp -d)
        chmod 755 "$t"
        cp "$FS" "$DENY" "$LIB" "$t/"
        cp "$CU/libcuda.so.1" "$t/"
        FS_SAVE=$FS CU_SAVE=$CU
        FS="$t/fdshare" CU="$t"
        refused "a peer of another uid is refused by the broker: EPERM" "$L/rs-uid.log" 'refused the socket fallback: it serves one uid' "" "" \
            -- env LD_PRELOAD="${SAN_PRELOAD:+$SAN_PRELOAD:}$t/$(basename "$LIB")" -- \
            setpriv --reuid=65534 --regid=65534 --clear-groups "$t/deny_getfd" \
            env LD_PRELOAD="${SAN_PRELOAD:+$SAN_PRELOAD:}$t/$(basename "$LIB")"
        FS=$FS_SAVE CU=$CU_SAVE
        rm -rf "$t"
    else
        skip "foreign uid" "needs root and setpriv"
    fi
else
    skip "CUDA rescue" "no CUDA double or built without the CUDA headers"
fi

# Intel's driver with opaque handles imports with its own pidfd_getfd
# (the test driver does the same with ZEDRV_IPC_LAYOUT=opaque).
need "$ZEDRV" "$APPS/ze_pair"
ZEDRV_DEBUG=1 ZEDRV_IPC_LAYOUT=opaque expect_fail "Level Zero opaque handles under the denial, without ipcbyval" \
    "$L/rs-ze-native.log" 'pidfd_getfd.*Operation not permitted' "$DENY" "$APPS/ze_pair" --allocs 2 --iters 2
ZEDRV_IPC_LAYOUT=opaque IPCBYVAL_STATS=1 expect_ok \
    "Level Zero opaque handles under the denial, with ipcbyval: rescued" \
    "$L/rs-ze.log" "$DENY" "$RUN" "$APPS/ze_pair" --allocs 2 --iters 2
# The sum of one IPCBYVAL_STATS counter over the processes of a log (awk
# without the sanitizer preload: ASan finds faults in mawk itself).
statsum() { env -u LD_PRELOAD awk -v k="$1" '$4 == "stats:" && $5 == k { s += $6 } END { print s + 0 }' "$2"; }
n=$(statsum rescued "$L/rs-ze.log")
[ "$n" -ge 2 ] && pass "the importer counts its rescues ($n)" || fail "rescued counted" "rescued=$n"
n=$(statsum rescue_served "$L/rs-ze.log")
[ "$n" -ge 2 ] && pass "the exporter counts what it served ($n)" || fail "rescue_served counted" "rescue_served=$n"
# Event pools: opaque event-pool handles are fetched the same way; one
# allocation and one pool per iteration, so 2 x 2 rescues.
ZEDRV_IPC_LAYOUT=opaque IPCBYVAL_STATS=1 expect_ok \
    "Level Zero opaque memory and event-pool handles under the denial, with ipcbyval: rescued" \
    "$L/rs-ze-events.log" "$DENY" "$RUN" "$APPS/ze_pair" --events --allocs 1 --iters 2
n=$(statsum rescued "$L/rs-ze-events.log")
[ "$n" -eq 4 ] && pass "event pools rescued too (4 rescues: 2 memory, 2 pools)" ||
    fail "event pools rescued" "rescued=$n, expected 4"
# MPICH's pidfd mode on the classic layout: the fd of the handle (from
# zeMemGetFileDescriptorFromIpcHandleExp) sent by number, fetched with the
# importer's own pidfd_getfd and written into the handle.
if [ -x "$APPS/ze_newapi" ]; then
    expect_ok "MPICH's pidfd pattern (classic handle, its fd by number), no denial" \
        "$L/rs-mpich-nodeny.log" "$APPS/ze_newapi" --case fd-pidfd
    expect_fail "MPICH's pidfd pattern under the denial, without ipcbyval" "$L/rs-mpich-native.log" \
        'pidfd_getfd.*Operation not permitted' "$DENY" "$APPS/ze_newapi" --case fd-pidfd
    expect_ok "MPICH's pidfd pattern under the denial, with ipcbyval: rescued" "$L/rs-mpich.log" \
        "$DENY" "$RUN" "$APPS/ze_newapi" --case fd-pidfd
else
    skip "MPICH's pidfd pattern" "ze_newapi not built"
fi
ZEDRV_DEBUG=1 ZEDRV_IPC_LAYOUT=opaque IPCBYVAL_TRANSPORT=pidfd expect_fail \
    "Level Zero opaque handles, IPCBYVAL_TRANSPORT=pidfd: not rescued" \
    "$L/rs-ze-pidfd.log" 'pidfd_getfd.*Operation not permitted' "$DENY" "$RUN" "$APPS/ze_pair" --allocs 2 --iters 2
finish
