#!/bin/bash
# SPDX-License-Identifier: MIT
# ipcbyval-run --doctor: one line per thing that decides what ipcbyval does
# here, a verdict, exit 0 when handles work by value (any transport) and
# non-zero with the fix otherwise. Cases: this machine as it is; under a
# seccomp filter that denies pidfd_getfd (the socket fallback still works);
# IPCBYVAL_TRANSPORT=pidfd there (no way left: the fix is named);
# IPCBYVAL_ENABLE=0; the GPU libraries found or not.
. "$(dirname "$0")/lib.sh"
need "$LIB"
L="$BUILD/test-logs"
DENY="$BUILD/test/transport/deny_getfd"

# doctor NAME LOG [ENV...] -- [WRAPPER...]: run the doctor, exit status in $rc.
doctor() {
    local log=$1; shift
    local envs=()
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do envs+=("$1"); shift; done
    shift
    env "${envs[@]+"${envs[@]}"}" timeout 60 "$@" "$RUN" --doctor >"$log" 2>&1
    rc=$?
}
has() { grep -qE -- "$2" "$1"; }
why() { tr '\n' '|' <"$1" | cut -c1-600; }

log="$L/doctor-plain.log"
doctor "$log" --
lines=0
for l in kernel ptrace pidfd_getfd namespaces socket rendezvous libcuda 'level zero' ipcbyval transport; do
    has "$log" "^  $l " && lines=$((lines + 1))
done
if [ $rc -eq 0 ] && [ $lines -eq 10 ] && has "$log" '^verdict: by-value works here' &&
    has "$log" "Linux $(uname -r)" && has "$log" 'sibling \(rank to rank\) allowed'; then
    pass "plain: 10 lines and a verdict, exit 0 ($(grep '^verdict' "$log" | cut -c1-80))"
else
    fail "plain" "rc $rc, $lines lines: $(why "$log")"
fi
has "$log" '^  ipcbyval .*config: defaults' && has "$log" "^  rendezvous +IPCBYVAL_RENDEZVOUS_DIR not set" &&
    pass "plain: version, config and rendezvous reported" || fail "plain: config" "$(why "$log")"

if [ -x "$DENY" ]; then
    log="$L/doctor-deny.log"
    doctor "$log" -- "$DENY"
    if [ $rc -eq 0 ] && has "$log" '^  ptrace .*seccomp filter \(mode 2\)' &&
        has "$log" 'sibling \(rank to rank\) EPERM: denied by the seccomp filter' &&
        has "$log" '^  transport .*socket fallback' && has "$log" '^verdict: by-value works here, through the socket fallback' &&
        has "$log" '^  for pidfd +run the container with --cap-add SYS_PTRACE'; then
        pass "deny_getfd: names the seccomp denial and the socket fallback, exit 0"
    else
        fail "deny_getfd" "rc $rc: $(why "$log")"
    fi
    log="$L/doctor-deny-pidfd.log"
    doctor "$log" IPCBYVAL_TRANSPORT=pidfd -- "$DENY"
    [ $rc -ne 0 ] && has "$log" '^verdict: by-value will NOT work here: IPCBYVAL_TRANSPORT=pidfd' &&
        has "$log" '^fix: IPCBYVAL_TRANSPORT=auto' && has "$log" '^  ipcbyval .*config: IPCBYVAL_TRANSPORT=pidfd \(' &&
        pass "deny_getfd with IPCBYVAL_TRANSPORT=pidfd: exit $rc, the fix named" ||
        fail "deny_getfd, pidfd only" "rc $rc: $(why "$log")"
    log="$L/doctor-enosys.log"
    doctor "$log" DENY_GETFD_ERRNO=ENOSYS -- "$DENY"
    [ $rc -eq 0 ] && has "$log" 'no pidfd_open/pidfd_getfd \(ENOSYS\)' &&
        pass "pidfd_getfd missing (ENOSYS): said so, the socket serves" || fail "ENOSYS" "rc $rc: $(why "$log")"
else
    skip "deny_getfd" "$DENY not built"
fi

log="$L/doctor-disabled.log"
doctor "$log" IPCBYVAL_ENABLE=0 --
[ $rc -ne 0 ] && has "$log" '^verdict: by-value will NOT work here: ipcbyval is off \(IPCBYVAL_ENABLE=0\)' &&
    has "$log" '^fix: unset IPCBYVAL_ENABLE' && pass "IPCBYVAL_ENABLE=0: exit $rc, the fix named" ||
    fail "IPCBYVAL_ENABLE=0" "rc $rc: $(why "$log")"

# The GPU libraries: the CUDA double and the Level Zero test driver found...
log="$L/doctor-gpu.log"
doctor "$log" LD_LIBRARY_PATH="$BUILD/test/cudadrv" --
if [ ! -e "$BUILD/test/cudadrv/libcuda.so.1" ]; then
    skip "GPU libraries found" "the CUDA double is not built (no CUDA headers)"
elif has "$log" "^  libcuda +$BUILD/test/cudadrv/libcuda.so.1; CUDA driver API [0-9]+\.[0-9]" &&
    has "$log" "^  level zero +.*libze_loader.so.1.*; drivers: $ZEDRV \(ZE_ENABLE_ALT_DRIVERS\)" &&
    ! has "$log" '^  note '; then
    pass "GPU libraries found: libcuda with its driver version, the loader and its driver"
else
    fail "GPU libraries found" "$(why "$log")"
fi
# ... and none: the loader hidden in a mount namespace of our own.
loader=$(readlink -f "$(ldconfig -p | sed -nE 's/.*libze_loader.so.1 .*=> //p' | head -1)" 2>/dev/null)
log="$L/doctor-nogpu.log"
if [ -n "$loader" ] && unshare -m true 2>/dev/null; then
    env -u ZE_ENABLE_ALT_DRIVERS -u LD_LIBRARY_PATH timeout 60 unshare -m sh -c \
        'mount --bind /dev/null "$1" && exec "$2" --doctor' sh "$loader" "$RUN" >"$log" 2>&1
    rc=$?
    [ $rc -eq 0 ] && has "$log" '^  libcuda +libcuda.so.1 not found' &&
        has "$log" '^  level zero +libze_loader.so.1 not found' && has "$log" '^  note +no GPU library found' &&
        pass "no GPU library: both named as not found, a note, exit 0" || fail "no GPU library" "rc $rc: $(why "$log")"
else
    skip "no GPU library" "no libze_loader.so.1 to hide, or unshare -m not allowed (needs root)"
fi

# In a pid namespace of its own (a container's): said so, still works.
log="$L/doctor-pidns.log"
if unshare -pf true 2>/dev/null; then
    timeout 60 unshare -pf --mount-proc "$RUN" --doctor >"$log" 2>&1
    rc=$?
    [ $rc -eq 0 ] && has "$log" '^  namespaces +pid:\[[0-9]+\] \(nested: a container.s\)' &&
        pass "own pid namespace: named nested, exit 0" || fail "pid namespace" "rc $rc: $(why "$log")"
    # The initial pid namespace's inode is fixed by the kernel (PROC_PID_INIT_INO).
    [ "$(stat -L -c %i /proc/self/ns/pid)" = 4026531836 ] && want="the host's" || want="nested: a container's"
    has "$L/doctor-plain.log" "^  namespaces +pid:\[[0-9]+\] \($want\)" &&
        pass "plain: the pid namespace named as it is ($want)" || fail "plain pid namespace" "$(grep namespaces "$L/doctor-plain.log")"
else
    skip "pid namespace" "unshare -p not allowed (needs root)"
fi

# IPCBYVAL_RENDEZVOUS_DIR: the library's own check decides, and the
# doctor reports its verdict: a folder of ours is used; a world-writable
# one and a symlink to a good one are refused, never called working.
log="$L/doctor-rendezvous.log"
rdir=$(mktemp -d)
doctor "$log" IPCBYVAL_RENDEZVOUS_DIR="$rdir" --
[ $rc -eq 0 ] && has "$log" "^  rendezvous +IPCBYVAL_RENDEZVOUS_DIR=$rdir: used \(the library's check passed\)" &&
    has "$log" '^verdict: by-value works here' &&
    pass "IPCBYVAL_RENDEZVOUS_DIR of ours: used, exit 0" || fail "rendezvous" "rc $rc: $(why "$log")"
# refused NAME DIR PATTERN: the doctor names the library's refusal.
refused() {
    log="$L/doctor-rendezvous-$1.log"
    doctor "$log" IPCBYVAL_RENDEZVOUS_DIR="$2" --
    if [ $rc -ne 0 ] && has "$log" "^  rendezvous +IPCBYVAL_RENDEZVOUS_DIR=$2: refused by the library: .*$3" &&
        ! grep -E 'works|writable folder' "$log" | grep -qv -e '^  kernel ' -e '^  socket ' &&
        has "$log" '^verdict: by-value will NOT work across namespaces: the library refuses IPCBYVAL_RENDEZVOUS_DIR' &&
        has "$log" '^fix: '; then
        pass "IPCBYVAL_RENDEZVOUS_DIR $1: refused as the library refuses it, not called working (exit $rc)"
    else
        fail "IPCBYVAL_RENDEZVOUS_DIR $1" "rc $rc: $(why "$log")"
    fi
}
chmod 1777 "$rdir"
refused world-writable "$rdir" 'is world-writable \(mode 1777\)'
chmod 700 "$rdir"
ln -s "$rdir" "$rdir.link"
refused symlink "$rdir.link" 'a symlink or not a directory'
rm -f "$rdir.link"
rmdir "$rdir"
finish
