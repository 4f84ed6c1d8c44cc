# SPDX-License-Identifier: MIT
# lib.sh - shared by the integration scripts (sourced).
# Each case prints "PASS: name", "FAIL: name: why" or "SKIP: name: why".
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${BUILD:-build}
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
LIB="$BUILD/libipcbyval.so.1"
RUN="$ROOT/scripts/ipcbyval-run"
ZEDRV="$BUILD/test/zedrv/libze_intel_gpu_byvaltest.so"
mkdir -p "$BUILD/test-logs"
APPS="$BUILD/test/mpi"
export ZE_ENABLE_ALT_DRIVERS="$ZEDRV"
export IPCBYVAL_LIB="$LIB"
# Sanitizer builds: the ASan runtime must come first in LD_PRELOAD. TSan
# needs no preload (the instrumented library pulls it in), and bash itself
# crashes with libtsan preloaded, so it is left out.
SAN_PRELOAD=""
case "${SAN:-}" in
asan) SAN_PRELOAD=$(${CC:-cc} -print-file-name=libasan.so) ;;
esac
case "${SAN:-}" in
tsan)
    # A forked child sees its parent's threads as never joined: a TSan
    # artefact of fork, not a leak of ours.
    # A child forked from a threaded process may start threads of its own
    # (the registry watcher, the socket broker): TSan kills it unless told
    # not to (die_after_fork=0), though glibc supports it.
    export TSAN_OPTIONS="halt_on_error=1:exitcode=99:report_signal_unsafe=0:report_thread_leaks=0:die_after_fork=0"
    # MPICH's UCX installs memory hooks (libucm) that crash inside TSan's
    # interceptors on a thread TSan has not set up yet; unrelated to us.
    export UCX_MEM_EVENTS=no ;;
esac
if [ -n "$SAN_PRELOAD" ]; then
    export LD_PRELOAD="$SAN_PRELOAD"
    export ASAN_OPTIONS="detect_leaks=0:abort_on_error=0:exitcode=99"
fi

_failed=0
pass() { echo "PASS: $1"; }
fail() { echo "FAIL: $1: $2"; _failed=1; }
skip() { echo "SKIP: $1: $2"; }
finish() { exit $_failed; }

# Open MPI and MPICH launchers; empty when not installed.
MPIRUN_OMPI=$(command -v mpirun.openmpi || true)
MPIEXEC_MPICH=$(command -v mpiexec.mpich || true)
# Launch lines as arrays (timeout cannot run shell functions):
#   "${OMPI[@]}" -np 2 prog   /   "${MPICH[@]}" -n 2 prog
OMPI=("$MPIRUN_OMPI" --allow-run-as-root --oversubscribe
    --mca btl self,vader --mca btl_vader_single_copy_mechanism none
    -x ZE_ENABLE_ALT_DRIVERS -x IPCBYVAL_LIB)
MPICH=("$MPIEXEC_MPICH")

# expect_ok NAME LOG CMD...: CMD must exit 0 and print an OK line.
expect_ok() {
    local name=$1 log=$2; shift 2
    if timeout 120 "$@" >"$log" 2>&1 && grep -q "OK" "$log"; then
        pass "$name"
    else
        fail "$name" "expected success: $(grep -v '^$' "$log" | tail -3 | tr '\n' ' ')"
    fi
}

# expect_fail NAME LOG PATTERN CMD...: CMD must fail and print PATTERN.
expect_fail() {
    local name=$1 log=$2 pat=$3; shift 3
    if timeout 120 "$@" >"$log" 2>&1; then
        fail "$name" "expected failure, got success"
    elif grep -qE "$pat" "$log"; then
        pass "$name"
    else
        fail "$name" "failed without '$pat': $(tail -3 "$log" | tr '\n' ' ')"
    fi
}

# xfail NAME LOG NOTE PATTERN CMD...: a case that fails today because
# ipcbyval itself misbehaves (NOTE names the behaviour and the issue; the
# failure's output matches PATTERN). While it fails that way it is reported
# as skipped ("expected failure"); a failure of another kind FAILS, and so
# does a pass ("unexpectedly passed"), so that whoever fixed it removes the
# mark.
xfail() {
    local name=$1 log=$2 note=$3 pat=$4; shift 4
    if timeout 120 "$@" >"$log" 2>&1 && grep -q "OK" "$log"; then
        fail "$name" "unexpectedly passed (XPASS): remove its xfail mark ($note)"
    elif grep -qE "$pat" "$log"; then
        skip "$name" "expected failure (XFAIL): $note"
    else
        fail "$name" "failed, but not as expected ('$pat'): $(grep -v '^$' "$log" | tail -2 | tr '\n' ' ')"
    fi
}

# copy_for_uid UID DIR FILE...: copies of the library, the launcher, the
# Level Zero test driver and FILEs in DIR (made mode 755; the caller
# removes it), for a process of uid UID to run: the checkout may sit
# where that uid cannot enter (a clone in /root, a mktemp -d). The copies
# keep their names; run them with IPCBYVAL_LIB and ZE_ENABLE_ALT_DRIVERS
# pointing into DIR. Fails, with the reason on stdout, when UID cannot
# run the launcher's copy there either.
copy_for_uid() {
    local uid=$1 dir=$2 out; shift 2
    mkdir -p "$dir" && chmod 755 "$dir" && cp "$LIB" "$RUN" "$ZEDRV" "$@" "$dir/" ||
        { echo "cannot copy what uid $uid runs to $dir"; return 1; }
    out=$(setpriv --reuid "$uid" --regid "$uid" --clear-groups "$dir/${RUN##*/}" --version 2>&1) ||
        { echo "uid $uid cannot run $dir/${RUN##*/}: $out"; return 1; }
}

need() {
    for f in "$@"; do
        [ -e "$f" ] || { skip "$(basename "$0" .sh)" "$f not built"; exit 77; }
    done
}
