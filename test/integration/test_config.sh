#!/bin/bash
# SPDX-License-Identifier: MIT
# The configuration table, the launcher's options, and "does nothing in a
# process that never calls a GPU API".
. "$(dirname "$0")/lib.sh"
need "$LIB"

out=$("$RUN" --print-config)
n=$(grep -c '^IPCBYVAL_' <<<"$out")
[ "$n" -ge 10 ] && grep -q '^IPCBYVAL_CACHE_SIZE=1024$' <<<"$out" &&
    pass "print-config lists $n variables with defaults" || fail "print-config" "$out"

out=$(IPCBYVAL_CACHE_SIZE=77 IPCBYVAL_STATS=yes "$RUN" --print-config)
grep -q '^IPCBYVAL_CACHE_SIZE=77$' <<<"$out" && grep -q '^IPCBYVAL_STATS=1$' <<<"$out" &&
    pass "values and booleans parsed" || fail "values parsed" "$out"

err=$(IPCBYVAL_CACHE_SIZE=-5 IPCBYVAL_STATS=maybe "$RUN" --print-config 2>&1 >/dev/null)
grep -q "invalid value IPCBYVAL_CACHE_SIZE='-5'" <<<"$err" &&
    grep -q "invalid value IPCBYVAL_STATS='maybe'" <<<"$err" &&
    IPCBYVAL_CACHE_SIZE=-5 "$RUN" --print-config 2>/dev/null | grep -q '^IPCBYVAL_CACHE_SIZE=1024$' &&
    pass "invalid values reported, default kept" || fail "invalid values" "$err"

grep -q "IPCBYVAL_STATS='maybe' (expected y/yes/on/true/1 or n/no/off/false/0)" <<<"$err" &&
    pass "boolean error lists every accepted word" || fail "boolean words" "$err"

err=$(IPCBYVAL_CACHE_SIZ=5 "$RUN" --print-config 2>&1 >/dev/null)
grep -q "unknown variable IPCBYVAL_CACHE_SIZ (did you mean IPCBYVAL_CACHE_SIZE?)" <<<"$err" &&
    pass "unknown variable gets the closest name" || fail "unknown variable" "$err"
# Messages for users: "[ipcbyval PID RANK] warn: message", no function name.
grep -qE '^\[ipcbyval [0-9]+ [^]]+\] warn: unknown variable' <<<"$err" &&
    pass "warnings name no internal function" || fail "warning format" "$err"
err=$(IPCBYVAL_FOO=1 IPCBYVAL_TRANSPROT=pidfd "$RUN" --print-config 2>&1 >/dev/null)
grep -q "unknown variable IPCBYVAL_FOO (ipcbyval-run --print-config lists them)" <<<"$err" &&
    grep -q "IPCBYVAL_TRANSPROT (did you mean IPCBYVAL_TRANSPORT?)" <<<"$err" &&
    pass "a name is suggested only when it is close" || fail "suggestions" "$err"

# Loaded into a process that never calls a GPU API: no output even with
# debug logging and a bad variable, no extra fds, no threads.
base_fds=$(ls /proc/self/fd | wc -l)
out=$(IPCBYVAL_LOG=debug IPCBYVAL_BOGUS=1 LD_PRELOAD="${LD_PRELOAD:+$LD_PRELOAD:}$LIB" \
    sh -c 'echo hi; ls /proc/self/fd | wc -l; grep Threads /proc/self/status' 2>&1)
exp=$(sh -c 'echo hi; ls /proc/self/fd | wc -l; grep Threads /proc/self/status' 2>&1)
[ "$out" = "$exp" ] && pass "inert in a non-GPU process (output, fds, threads unchanged)" ||
    fail "inert in a non-GPU process" "got [$out] expected [$exp] (base $base_fds)"

"$RUN" --help | grep -q -- '--print-config' && pass "--help" || fail "--help" "no usage"
"$RUN" --version | grep -q '^ipcbyval-run ' && pass "--version" || fail "--version" "no version"
"$RUN" --bogus >/dev/null 2>&1; [ $? -eq 2 ] && pass "unknown option exits 2" ||
    fail "unknown option" "wrong exit code"
other=$(ls /lib/x86_64-linux-gnu/libm.so.6 /usr/lib/*/libm.so.6 2>/dev/null | head -1)
out=$(LD_PRELOAD="${SAN_PRELOAD:+$SAN_PRELOAD:}$other" "$RUN" sh -c 'echo "$LD_PRELOAD"')
[ "$out" = "${SAN_PRELOAD:+$SAN_PRELOAD:}$LIB:$other" ] && pass "LD_PRELOAD prepended, existing kept" || fail "LD_PRELOAD" "$out"
out=$(IPCBYVAL_LOG=info "$RUN" --stats --log debug --disable \
    sh -c 'echo "${IPCBYVAL_STATS_DIR:+dir} $IPCBYVAL_LOG $IPCBYVAL_ENABLE"' 2>/dev/null)
[ "$out" = "dir debug 0" ] && pass "--stats --log --disable set the variables" || fail "options" "$out"
out=$("$RUN" --log=info sh -c 'echo "$IPCBYVAL_LOG"')
[ "$out" = "info" ] && pass "--log=LEVEL" || fail "--log=LEVEL" "$out"

# Messages: a program that is not there, as a shell says it; a level that
# is not one, refused before anything runs.
out=$("$RUN" --stats nosuchprog 2>&1)
rc=$?
[ $rc -eq 127 ] && [ "$out" = "ipcbyval-run: nosuchprog: command not found" ] &&
    pass "--stats nosuchprog: 'command not found', exit 127" || fail "missing program" "rc $rc: $out"
out=$("$RUN" ./no/such/prog 2>&1)
rc=$?
[ $rc -eq 127 ] && grep -q 'no/such/prog: No such file or directory' <<<"$out" &&
    pass "a missing path: exit 127" || fail "missing path" "rc $rc: $out"
out=$("$RUN" --log=loud sh -c 'echo ran' 2>&1)
rc=$?
[ $rc -eq 2 ] && ! grep -q ran <<<"$out" &&
    grep -q 'ipcbyval-run: --log=loud: not a level (none, error, warn, info, debug or 0-4)' <<<"$out" &&
    pass "--log=loud refused up front (exit 2)" || fail "--log=loud" "rc $rc: $out"
out=$("$RUN" --log Debug sh -c 'echo ran' 2>&1)
[ "$out" = "ran" ] && pass "--log Debug accepted (the library's own parser)" || fail "--log Debug" "$out"

# Every IPCBYVAL_* value checked once for the job: an N-rank job prints
# one warning, not N.
if [ -n "$MPIRUN_OMPI" ] && [ -x "$APPS/ze_mpi_exchange_ompi" ]; then
    log="$BUILD/test-logs/config-once.log"
    IPCBYVAL_CACHE_SIZE=lots IPCBYVAL_TRANSPROT=pidfd timeout 120 "${OMPI[@]}" -np 4 \
        -x IPCBYVAL_CACHE_SIZE -x IPCBYVAL_TRANSPROT "$RUN" "$APPS/ze_mpi_exchange_ompi" --allocs 2 >"$log" 2>&1
    inv=$(grep -c "invalid value IPCBYVAL_CACHE_SIZE='lots'" "$log")
    unk=$(grep -c "unknown variable IPCBYVAL_TRANSPROT (did you mean IPCBYVAL_TRANSPORT?)" "$log")
    grep -q 'rank 0: OK' "$log" && [ "$inv" -eq 1 ] && [ "$unk" -eq 1 ] &&
        pass "4 ranks: each warning printed once" || fail "warnings once" "invalid x$inv, unknown x$unk: $(tail -3 "$log" | tr '\n' '|')"
else
    skip "warnings once" "Open MPI or ze_mpi_exchange_ompi missing"
fi
finish
