#!/bin/bash
# SPDX-License-Identifier: MIT
# What another local user, or a stray environment, can make the launcher
# and the library do with local files and helper-only variables:
#   stats folders: a folder another uid made (the launcher's default name
#     inside a launch line, IPCBYVAL_STATS_DIR, the library's own file)
#     with symlinks to a root 0600 file: the job never writes through them,
#     and either prints its table or refuses the folder with a message
#   helper-only variables: IPCBYVAL_PRINT_CONFIG and IPCBYVAL_DOCTOR in an
#     ordinary preloaded program change nothing (its main runs, one
#     warning once it calls a GPU API); ipcbyval-run's own helper still
#     obeys them
. "$(dirname "$0")/lib.sh"
need "$LIB" "$ZEDRV" "$APPS/ze_pair"
L="$BUILD/test-logs"
A=(--allocs 2 --size 65536 --iters 1)
PRE="${SAN_PRELOAD:+$SAN_PRELOAD:}$LIB"
HOST=$(hostname)
HOST=${HOST%%.*}

top=$(mktemp -d /tmp/ipcbyval-trust.XXXXXX) # another uid must reach it
trap 'rm -rf "$top"' EXIT
chmod 755 "$top"

# ---- stats folders planted by another uid ------------------------------
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
    as_other() { setpriv --reuid 65534 --regid 65534 --clear-groups "$@"; }
    # victim NAME: a root 0600 file with a known content.
    victim() {
        local v="$top/victim-$1"
        printf 'secret of %s\n' "$1" >"$v"
        chmod 600 "$v"
        echo "$v"
    }
    intact() { [ "$(cat "$1" 2>/dev/null)" = "secret of $2" ]; }
    # A job's rank 0 inside a launch line, as Open MPI starts it (one rank).
    rank0() {
        env -u SLURM_JOB_ID -u SLURM_STEP_ID -u PMIX_NAMESPACE -u PMI_JOBID -u PMI_RANK -u PMIX_RANK \
            OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=1 OMPI_COMM_WORLD_LOCAL_RANK=0 \
            OMPI_COMM_WORLD_LOCAL_SIZE=1 OMPI_MCA_ess_base_jobid=4242 "$@"
    }

    # 1. The default folder of a launch line: every name the launcher could
    # derive for this job made by uid 65534 first, with the marks as
    # symlinks to root files.
    tmp="$top/tmp1"
    mkdir -m 1777 "$tmp"
    vd=$(victim "done") vs=$(victim started) vo=$(victim other)
    as_other sh -c 'd=$1/ipcbyval-stats-0-ompi-4242; mkdir -m 755 "$d" &&
        ln -s "$2" "$d/.done-0" && ln -s "$3" "$d/.started-0"' sh "$tmp" "$vd" "$vs"
    log="$L/trust-stats-default.log"
    TMPDIR=$tmp rank0 timeout 120 "$RUN" --stats "$APPS/ze_pair" "${A[@]}" >"$log" 2>&1
    rc=$?
    if intact "$vd" "done" && intact "$vs" started && [ $rc -eq 0 ] &&
        grep -q '^ipcbyval statistics: 2 processes' "$log"; then
        pass "--stats in a launch line: a folder planted at the old guessable name is not used, the table printed"
    else
        fail "--stats, planted default folder" "rc $rc, victims: $(cat "$vd" "$vs" | tr '\n' '|'); $(head -3 "$log" | tr '\n' '|')"
    fi
    # The same with the launcher's per-user folder itself taken first.
    tmp="$top/tmp2"
    mkdir -m 1777 "$tmp"
    as_other sh -c 'd=$1/ipcbyval-0; mkdir -m 777 "$d" && ln -s "$2" "$d/stats-ompi-4242" &&
        ln -s "$2" "$d/.done-0"' sh "$tmp" "$vo"
    log="$L/trust-stats-base.log"
    TMPDIR=$tmp rank0 timeout 120 "$RUN" --stats "$APPS/ze_pair" "${A[@]}" >"$log" 2>&1
    rc=$?
    if intact "$vo" other && [ $rc -eq 0 ] && grep -q 'OK' "$log" &&
        grep -qE "^ipcbyval-run: --stats: $tmp/ipcbyval-0 is owned by uid 65534, not by us \(uid 0\): not used" "$log"; then
        pass "--stats: the per-user folder taken by another uid is refused with a message, the program runs"
    else
        fail "--stats, planted per-user folder" "rc $rc, victim: $(cat "$vo"); $(grep -v '^\[' "$log" | head -3 | tr '\n' '|')"
    fi

    # 2. IPCBYVAL_STATS_DIR naming a folder of another uid, with the marks
    # planted: refused (inside a launch line and around one).
    for where in inside around; do
        d="$top/other-$where"
        v=$(victim "$where")
        mkdir -m 755 "$d" && chown 65534:65534 "$d"
        as_other ln -s "$v" "$d/.done-0"
        as_other ln -s "$v" "$d/.started-0"
        log="$L/trust-stats-dir-$where.log"
        if [ $where = inside ]; then
            IPCBYVAL_STATS_DIR=$d rank0 timeout 120 "$RUN" --stats "$APPS/ze_pair" "${A[@]}" >"$log" 2>&1
        else
            IPCBYVAL_STATS_DIR=$d timeout 120 "$RUN" --stats "$APPS/ze_pair" "${A[@]}" >"$log" 2>&1
        fi
        rc=$?
        n=$(find "$d" -name '*.stats' | wc -l)
        if intact "$v" "$where" && [ $rc -eq 0 ] && [ "$n" = 0 ] &&
            grep -q "^ipcbyval-run: --stats: IPCBYVAL_STATS_DIR $d is owned by uid 65534, not by us (uid 0): not used" "$log"; then
            pass "IPCBYVAL_STATS_DIR of another uid ($where a launch line): refused with a message, nothing written there"
        else
            fail "IPCBYVAL_STATS_DIR of another uid ($where)" "rc $rc, $n files, victim: $(cat "$v"); $(grep -v '^\[' "$log" | head -3 | tr '\n' '|')"
        fi
    done
    # A world-writable one, ours: refused as well.
    d="$top/ww"
    mkdir -m 777 "$d"
    log="$L/trust-stats-ww.log"
    IPCBYVAL_STATS_DIR=$d timeout 120 "$RUN" --stats "$APPS/ze_pair" "${A[@]}" >"$log" 2>&1
    rc=$?
    [ $rc -eq 0 ] && [ -z "$(ls -A "$d")" ] &&
        grep -q "^ipcbyval-run: --stats: IPCBYVAL_STATS_DIR $d is writable by others (mode 777): not used" "$log" &&
        pass "IPCBYVAL_STATS_DIR writable by others: refused with a message" ||
        fail "IPCBYVAL_STATS_DIR world-writable" "rc $rc, $(ls -A "$d" | tr '\n' ' '); $(grep -v '^\[' "$log" | head -2 | tr '\n' '|')"

    # 3. The library alone (no launcher): its temporary file planted as a
    # symlink, in a folder of another uid and in one of ours.
    for owner in other ours; do
        d="$top/lib-$owner"
        v=$(victim "lib-$owner")
        mkdir -m 755 "$d"
        [ $owner = other ] && chown 65534:65534 "$d"
        log="$L/trust-stats-lib-$owner.log"
        # The exec'ed program keeps the shell's pid: its name is known.
        timeout 120 bash -c 'tmp="$1/.$2.$$.tmp"
            if [ "$3" = other ]; then setpriv --reuid 65534 --regid 65534 --clear-groups ln -s "$4" "$tmp"
            else ln -s "$4" "$tmp"; fi
            shift 4; exec "$@"' sh "$d" "$HOST" "$owner" "$v" \
            env IPCBYVAL_STATS_DIR="$d" LD_PRELOAD="$PRE" "$APPS/ze_pair" "${A[@]}" >"$log" 2>&1
        rc=$?
        n=$(find "$d" -maxdepth 1 -type f -name '*.stats' | wc -l)
        if [ $owner = other ]; then
            intact "$v" "lib-$owner" && [ $rc -eq 0 ] && [ "$n" = 0 ] &&
                grep -q "IPCBYVAL_STATS_DIR $d is owned by uid 65534, not by us (uid 0): not used" "$log" &&
                pass "the library: a stats folder of another uid is refused with a warning, its planted file untouched" ||
                fail "library, folder of another uid" "rc $rc, $n files, victim: $(cat "$v"); $(grep warn "$log" | head -2 | tr '\n' '|')"
        else
            intact "$v" "lib-$owner" && [ $rc -eq 0 ] && [ "$n" = 2 ] && ! grep -q warn "$log" &&
                pass "the library: a symlink at its temporary file's name is not followed, both files written" ||
                fail "library, symlinked temporary file" "rc $rc, $n files, victim: $(cat "$v"); $(grep warn "$log" | head -2 | tr '\n' '|')"
        fi
    done
else
    skip "stats folders of another uid" "needs root and setpriv"
fi

# ---- helper-only variables -----------------------------------------------
# An ordinary program with the variables set: its main runs as without them.
for var in IPCBYVAL_PRINT_CONFIG=check IPCBYVAL_PRINT_CONFIG=1 IPCBYVAL_DOCTOR=1; do
    out=$(env "$var" LD_PRELOAD="$PRE" sh -c 'echo "main ran"; exit 3' 2>&1)
    rc=$?
    [ $rc -eq 3 ] && [ "$out" = "main ran" ] &&
        pass "$var in an ordinary preloaded program: its main runs (exit 3), no output of ours" ||
        fail "$var in an ordinary program" "rc $rc: $(head -3 <<<"$out" | tr '\n' '|')"
done
# One that calls a GPU API runs and is told once why the variable is ignored.
log="$L/trust-helper-gpu.log"
IPCBYVAL_DOCTOR=1 IPCBYVAL_PRINT_CONFIG=check LD_PRELOAD="$PRE" timeout 120 "$APPS/ze_pair" "${A[@]}" >"$log" 2>&1
rc=$?
n=$(grep -c "IPCBYVAL_DOCTOR and IPCBYVAL_PRINT_CONFIG are for ipcbyval-run's own helper: ignored" "$log")
[ $rc -eq 0 ] && grep -q OK "$log" && [ "$n" = 2 ] && ! grep -q '^ipcbyval doctor' "$log" &&
    pass "a GPU program with both variables runs; each of its 2 processes warns once" ||
    fail "GPU program with helper variables" "rc $rc, $n warnings: $(grep -v '^OK' "$log" | head -3 | tr '\n' '|')"
# A token of another process (as an exported variable leaves it), or of
# this pid with another start time (a reused pid), is no token.
out=$(IPCBYVAL_HELPER="$$:1" IPCBYVAL_DOCTOR=1 LD_PRELOAD="$PRE" sh -c 'echo "main ran"' 2>&1)
out2=$(sh -c 'export IPCBYVAL_HELPER="$$:1" IPCBYVAL_DOCTOR=1 LD_PRELOAD="$1"; exec sh -c "echo main ran"' \
    sh "$PRE" 2>&1)
[ "$out" = "main ran" ] && [ "$out2" = "main ran" ] &&
    pass "a helper token of another process, or of this pid started at another time, is ignored" ||
    fail "stray helper token" "$(head -3 <<<"$out$out2" | tr '\n' '|')"
# The launcher's own helper still obeys them.
"$RUN" --print-config | grep -q '^IPCBYVAL_CACHE_SIZE=1024$' &&
    "$RUN" --doctor 2>&1 | grep -q '^verdict: ' &&
    ! "$RUN" --log=bogus true 2>/dev/null && "$RUN" --log=warn true &&
    pass "ipcbyval-run --print-config, --doctor and --log checks still work" ||
    fail "launcher helper" "print-config, doctor or the --log check broke"
finish
