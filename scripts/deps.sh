#!/bin/bash
# SPDX-License-Identifier: MIT
# deps.sh - install the Debian packages ipcbyval needs to build, test and
# run the demo. As root: apt-get installs what is missing (and shows what
# it does); nothing is done when everything is there. Otherwise: print the
# exact command and fail.
#   scripts/deps.sh            everything make check and make demo need
#                              (compilers, Level Zero loader, Open MPI,
#                              MPICH, cmocka, mandoc, Slurm and munge, rpm
#                              for make rpm, Lmod and Environment Modules
#                              for the modulefile's tests)
#   scripts/deps.sh bench      plus gnuplot (the README plot)
#   scripts/deps.sh fuzz       plus clang's libFuzzer runtime
#   scripts/deps.sh valgrind   plus valgrind
#   scripts/deps.sh lmod       accepted for older callers (Lmod is in the
#                              default set now)
# Debian's lmod and environment-modules packages conflict (both provide
# `module`): Lmod is installed, and Environment Modules' modulecmd.tcl is
# only unpacked (apt-get download, dpkg-deb -x) into ENVMOD_ROOT, where the
# tests run it with tclsh. A machine that has environment-modules installed
# keeps it: Lmod is not installed there (the Lmod test is then skipped).
# Another apt-get or dpkg holding the package lock is waited for, up to
# IPCBYVAL_APT_WAIT seconds (default 600), with a message.
set -eu

PKGS="gcc make libc6-dev pkg-config libze1 libze-dev openmpi-bin libopenmpi-dev \
mpich libmpich-dev libcmocka-dev clang-format mandoc util-linux procps \
slurm-wlm munge rpm tcl"
ENVMOD_ROOT=${IPCBYVAL_ENVMOD_ROOT:-/var/cache/ipcbyval/environment-modules}
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
installed environment-modules || PKGS="$PKGS lmod"
for extra in "$@"; do
    case "$extra" in
    bench) PKGS="$PKGS gnuplot-nox" ;;
    fuzz) PKGS="$PKGS clang libclang-rt-14-dev" ;;
    valgrind) PKGS="$PKGS valgrind" ;;
    lmod) ;;
    *) echo "deps.sh: unknown group '$extra' (bench, fuzz, valgrind, lmod)" >&2; exit 2 ;;
    esac
done

missing=""
for p in $PKGS; do
    installed "$p" || missing="$missing $p"
done
envmod=0
installed environment-modules || ls "$ENVMOD_ROOT"/usr/lib/*/modulecmd.tcl >/dev/null 2>&1 || envmod=1
[ -z "$missing" ] && [ $envmod = 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
    [ -n "$missing" ] && {
        echo "ipcbyval: missing Debian packages:$missing" >&2
        echo "install them with: sudo apt-get update && sudo apt-get install -y --no-install-recommends$missing" >&2
    }
    [ $envmod = 1 ] && echo "ipcbyval: Environment Modules not unpacked: as root, scripts/deps.sh unpacks" \
        "it into $ENVMOD_ROOT (its test is skipped meanwhile)" >&2
    [ -n "$missing" ] && exit 1
    exit 0
fi

wait_max=${IPCBYVAL_APT_WAIT:-600}
deadline=$(($(date +%s) + wait_max))
log=$(mktemp)
trap 'rm -f "$log"' EXIT

# apt_run CMD...: run apt-get, its output shown as it goes. While another
# apt-get or dpkg holds a lock, say who and try again every 5 s, until the
# deadline. apt waits for the dpkg lock itself (DPkg::Lock::Timeout); the
# lists lock of apt-get update it does not wait for.
apt_run() {
    local rc now holder
    while :; do
        now=$(date +%s)
        set +e
        "$@" -o DPkg::Lock::Timeout=$((deadline > now ? deadline - now : 0)) 2>&1 | tee "$log"
        rc=${PIPESTATUS[0]}
        set -e
        [ "$rc" -eq 0 ] && return 0
        grep -qE 'Could not get lock|Unable to acquire the dpkg frontend lock|Unable to lock' "$log" ||
            return "$rc"
        now=$(date +%s)
        if [ "$now" -ge "$deadline" ]; then
            echo "ipcbyval: the package lock was still held after ${wait_max} s (IPCBYVAL_APT_WAIT); giving up" >&2
            return "$rc"
        fi
        holder=$(sed -nE 's/.*held by (process [0-9]+ \([^)]*\)).*/\1/p' "$log" | head -1)
        echo "ipcbyval: ${holder:-another apt-get or dpkg} holds the package lock;" \
            "waiting for it (up to $((deadline - now)) s more)"
        sleep 5
    done
}

export DEBIAN_FRONTEND=noninteractive
if [ -n "$missing" ]; then
    echo "ipcbyval: installing:$missing"
    apt_run apt-get update
    # shellcheck disable=SC2086
    apt_run apt-get install -y --no-install-recommends $missing
    echo "ipcbyval: installed:$missing"
fi
if [ $envmod = 1 ]; then
    # Unpacked beside Lmod, not installed (the packages conflict).
    # Not fatal: without it only the Environment Modules test is skipped.
    dl=$(mktemp -d)
    chown _apt "$dl" 2>/dev/null || true # apt downloads as its own user
    if (cd "$dl" && { apt_run apt-get download environment-modules ||
        { apt_run apt-get update && apt_run apt-get download environment-modules; }; }) &&
        mkdir -p "$ENVMOD_ROOT" && dpkg-deb -x "$dl"/environment-modules_*.deb "$ENVMOD_ROOT"; then
        echo "ipcbyval: Environment Modules unpacked into $ENVMOD_ROOT (tested with tclsh, not installed)"
    else
        echo "ipcbyval: could not fetch environment-modules: its test is skipped" >&2
    fi
    rm -rf "$dl"
fi
