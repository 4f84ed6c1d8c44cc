#!/bin/sh
# SPDX-License-Identifier: MIT
# deps.sh - install the Debian packages ipcbyval needs to build, test and
# run the demo. As root: apt-get installs what is missing. Otherwise: print
# the exact command and fail.
#   scripts/deps.sh            everything make check and make demo need
#   scripts/deps.sh bench      plus gnuplot (the README plot)
#   scripts/deps.sh fuzz       plus clang's libFuzzer runtime
set -eu

PKGS="gcc make libc6-dev pkg-config libze1 libze-dev openmpi-bin libopenmpi-dev \
mpich libmpich-dev libcmocka-dev uthash-dev mandoc util-linux procps"
for extra in "$@"; do
    case "$extra" in
    bench) PKGS="$PKGS gnuplot-nox" ;;
    fuzz) PKGS="$PKGS clang libclang-rt-14-dev" ;;
    valgrind) PKGS="$PKGS valgrind" ;;
    *) echo "deps.sh: unknown group '$extra' (bench, fuzz, valgrind)" >&2; exit 2 ;;
    esac
done

missing=""
for p in $PKGS; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done
[ -z "$missing" ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
    echo "ipcbyval: missing Debian packages:$missing" >&2
    echo "install them with: sudo apt-get install -y$missing" >&2
    exit 1
fi
echo "ipcbyval: installing:$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing >/dev/null
