#!/bin/bash
# SPDX-License-Identifier: MIT
# Run fdshare's exporter and importer side by side, each under its own
# command prefix (ipcbyval-run, deny_getfd, env ...):
#   fdshare_pair.sh FDSHARE LOG "EXPORTER-ARGS" "IMPORTER-ARGS" -- EXPORTER-PREFIX... -- IMPORTER-PREFIX...
# The importer's output goes to LOG (and is printed), the exporter's to
# LOG.exp; the exit status is the importer's. Used by test_rescue.sh (CUDA
# double) and scripts/check-gpu.sh (real driver).
set -u
fs=$1 log=$2 eargs=$3 iargs=$4
shift 5
exp=() imp=()
while [ "$1" != -- ]; do exp+=("$1"); shift; done
shift
imp=("$@")
d=$(mktemp -d)
chmod 755 "$d"
# shellcheck disable=SC2086
timeout 90 "${exp[@]}" "$fs" export "$d" $eargs >"$log.exp" 2>&1 &
ep=$!
# shellcheck disable=SC2086
timeout 90 "${imp[@]}" "$fs" import "$d" $iargs >"$log" 2>&1
rc=$?
touch "$d/done"
wait $ep
rm -rf "$d"
cat "$log"
exit $rc
