#!/bin/bash
# SPDX-License-Identifier: MIT
# Hostile peers of an exporter's broker (test/transport/hostile: an
# exporter on handles/ alone; the attackers speak the broker's protocol
# themselves):
#   registry page: an application that dup2()s another file onto the
#     registry's fd number; a peer asking for the page must not get it
#   group member sent nothing: with IPCBYVAL_RENDEZVOUS_GID, a member that
#     holds no handle reads the registry page and asks for every export
#     it lists, by number (the rescue) and by handle: it must get none (a
#     member with a handle still opens; by handle is an open defect)
#   idle peer in another pid namespace: it holds idle connections without
#     end; a real importer, also outside the exporter's pid namespace,
#     must still open
#   squatter: another uid listening at the exporter's abstract name; the
#     importer must still reach the exporter through the directory
# Root-only cases skip with the reason.
. "$(dirname "$0")/../integration/lib.sh"
H="$BUILD/test/transport/hostile"
need "$H"
L="$BUILD/test-logs"
top=$(mktemp -d)
chmod 755 "$top"
pids=()
trap 'for p in "${pids[@]+"${pids[@]}"}"; do kill "$p" 2>/dev/null; done; rm -rf "$top"' EXIT
n=0
root=0
[ "$(id -u)" = 0 ] && root=1

# info_val INFO KEY: KEY's value in the exporter's INFO file.
info_val() { sed -n "s/^$2 //p" "$1" | head -1; }
# wait_info INFO: until the exporter wrote INFO (10 s at most).
wait_info() {
    for _ in $(seq 500); do [ -s "$1" ] && return 0; sleep 0.02; done
    return 1
}

# --- the registry page is served only as the sealed page it is ---------------
n=$((n + 1)); I="$top/i$n"
echo "TOPSECRET: not for peers" >"$top/secret"
chmod 600 "$top/secret"
timeout 40 "$H" export "$I" --dup2 "$top/secret" >"$L/hostile-page-exp.log" 2>&1 &
ep=$!
if wait_info "$I"; then
    timeout 20 "$H" page "$(info_val "$I" abstract)" >"$L/hostile-page.log" 2>&1
    touch "$I.done"
    wait $ep
    if grep -q 'LEAKED' "$L/hostile-page.log"; then
        fail "registry page after the application's dup2 onto its number" \
            "a peer got the other file: $(tr '\n' ' ' <"$L/hostile-page.log")"
    elif grep -q '^page: status -116' "$L/hostile-page.log" && ! grep -q '^page: got' "$L/hostile-page.log"; then
        pass "registry page after the application's dup2 onto its number: refused (ESTALE), the other file never sent"
    else
        fail "registry page after dup2" "$(tr '\n' ' ' <"$L/hostile-page.log")"
    fi
else
    fail "registry page after dup2" "no exporter: $(cat "$L/hostile-page-exp.log")"
    wait $ep
fi
# The same request without the dup2 gets the page (the refusal above is
# not a refusal of every page request).
n=$((n + 1)); I="$top/i$n"
timeout 40 "$H" export "$I" >"$L/hostile-page2-exp.log" 2>&1 &
ep=$!
wait_info "$I" && timeout 20 "$H" page "$(info_val "$I" abstract)" >"$L/hostile-page2.log" 2>&1
touch "$I.done"
wait $ep
grep -q '^page: got /memfd:ipcbyval-registry' "$L/hostile-page2.log" &&
    pass "registry page untouched: served as the sealed page" ||
    fail "registry page untouched" "$(tr '\n' ' ' <"$L/hostile-page2.log")"

NS_OK=0
[ $root = 1 ] && unshare --pid --net --mount --fork --mount-proc --kill-child true 2>/dev/null && NS_OK=1
NS=(unshare --pid --net --mount --fork --mount-proc --kill-child)

# --- a group member that was sent nothing gets nothing -----------------------
if [ $NS_OK = 1 ] && command -v setpriv >/dev/null && getent group nogroup >/dev/null; then
    G=$(getent group nogroup | cut -d: -f3)
    AS_MEMBER=(setpriv --reuid 65534 --regid "$G" --clear-groups)
    if "${AS_MEMBER[@]}" test -x "$H"; then
        n=$((n + 1)); I="$top/i$n" D="$top/d$n"
        mkdir -m 2770 "$D" && chgrp "$G" "$D"
        timeout 40 "${NS[@]}" "$H" export "$I" --dir "$D" --gid "$G" --n 4 \
            >"$L/hostile-grab-exp.log" 2>&1 &
        ep=$!
        if wait_info "$I"; then
            timeout 20 "${NS[@]}" "${AS_MEMBER[@]}" "$H" grab "$(info_val "$I" dirsock)" \
                >"$L/hostile-grab.log" 2>&1
            timeout 20 "${NS[@]}" "${AS_MEMBER[@]}" "$H" import "$I" --idx 2 --dir "$D" --gid "$G" \
                >"$L/hostile-grab-imp.log" 2>&1
            # Group G among 301 supplementary groups, after the first 256
            # (the kernel sorts them): SO_PEERGROUPS read without a cap.
            timeout 20 "${NS[@]}" setpriv --reuid 65534 --regid 65533 \
                --groups "$(seq -s, 1000 1299),$G" "$H" import "$I" --idx 1 --dir "$D" --gid "$G" \
                >"$L/hostile-groups-imp.log" 2>&1
            touch "$I.done"
            wait $ep
            grep -q '^OK' "$L/hostile-groups-imp.log" &&
                pass "a group member with 301 groups (the group after the 256th) is served" ||
                fail "member of 301 groups" "$(tr '\n' ' ' <"$L/hostile-groups-imp.log")"
            # By number (the rescue of a refused pidfd_getfd): a member of
            # another uid could never have made that pidfd_getfd.
            if grep -qE '^rescue: 0 of [1-9][0-9]* exports fetched' "$L/hostile-grab.log"; then
                pass "a group member fetches no export by number ($(sed -n 's/^rescue: //p' "$L/hostile-grab.log"))"
            else
                fail "group member by number" "$(tr '\n' ' ' <"$L/hostile-grab.log")"
            fi
            # By handle: the page lists every export's fd and inode; without
            # the tag a handle carries, each request is refused for the tag
            # (EACCES), not for anything else.
            m=$(sed -n 's/^grab: 0 of \([1-9][0-9]*\) exports fetched (\([0-9]*\) of \([0-9]*\) requests refused for the tag)$/\2 \3/p' "$L/hostile-grab.log")
            if [ -n "$m" ] && [ "${m% *}" = "${m#* }" ]; then
                pass "a group member sent nothing fetches none of the exports, each request refused for its tag ($(sed -n 's/^grab: //p' "$L/hostile-grab.log"))"
            else
                fail "group member sent nothing" "$(tr '\n' ' ' <"$L/hostile-grab.log")"
            fi
            grep -q '^OK' "$L/hostile-grab-imp.log" &&
                pass "a group member with a handle opens it through the directory" ||
                fail "group member with a handle" "$(tr '\n' ' ' <"$L/hostile-grab-imp.log")"
        else
            fail "group member" "no exporter: $(cat "$L/hostile-grab-exp.log")"
            wait $ep
        fi
    else
        skip "group member sent nothing" "uid 65534 cannot run $H from this checkout"
    fi
else
    skip "group member sent nothing" "needs root, unshare --pid --net --mount, setpriv and the nogroup group"
fi

# --- an idle peer outside the exporter's pid namespace blocks nobody ---------
if [ $root = 1 ] && unshare --pid --fork --kill-child true 2>/dev/null; then
    n=$((n + 1)); I="$top/i$n"
    # The exporter in its own pid namespace: the attacker and the importer
    # (ours) are invisible there, SO_PEERCRED says pid 0 for both.
    timeout 40 unshare --pid --fork --kill-child "$H" export "$I" >"$L/hostile-idle-exp.log" 2>&1 &
    ep=$!
    if wait_info "$I"; then
        timeout 20 "$H" idle "$(info_val "$I" abstract)" 32 8 >"$L/hostile-idle.log" 2>&1 &
        ap=$!
        pids+=("$ap")
        sleep 0.5 # the attacker holds its connections
        timeout 20 "$H" import "$I" --mode socket >"$L/hostile-idle-imp.log" 2>&1
        kill $ap 2>/dev/null
        wait $ap 2>/dev/null
        touch "$I.done"
        wait $ep
        grep -q '^OK' "$L/hostile-idle-imp.log" &&
            pass "an importer outside the exporter's pid namespace opens while another such peer holds idle connections" ||
            fail "idle peer in another pid namespace" "$(tr '\n' ' ' <"$L/hostile-idle-imp.log")"
    else
        fail "idle peer" "no exporter: $(cat "$L/hostile-idle-exp.log")"
        wait $ep
    fi
else
    skip "idle peer in another pid namespace" "needs root and unshare --pid"
fi

# --- a squatter at the abstract name does not switch the directory off -------
if [ $NS_OK = 1 ]; then
    n=$((n + 1)); I="$top/i$n" D="$top/d$n"
    mkdir -m 700 "$D"
    SQ=() who="our uid"
    if command -v setpriv >/dev/null && setpriv --reuid 65534 --regid 65534 --clear-groups test -x "$H"; then
        SQ=(setpriv --reuid 65534 --regid 65534 --clear-groups) who="uid 65534"
    fi
    timeout 40 "${NS[@]}" "$H" export "$I" --dir "$D" >"$L/hostile-squat-exp.log" 2>&1 &
    ep=$!
    if wait_info "$I"; then
        : >"$L/hostile-squat.log"
        timeout 20 "${SQ[@]}" "$H" squat "$(info_val "$I" abstract)" 15 >"$L/hostile-squat.log" 2>&1 &
        sp=$!
        pids+=("$sp")
        for _ in $(seq 250); do grep -q listening "$L/hostile-squat.log" && break; sleep 0.02; done
        # The importer in its own pid namespace (no pidfd route), in ours
        # for the network: the squatter's abstract name is what it meets.
        timeout 20 unshare --pid --fork --mount-proc --kill-child "$H" import "$I" --dir "$D" \
            >"$L/hostile-squat-imp.log" 2>&1
        kill $sp 2>/dev/null
        wait $sp 2>/dev/null
        touch "$I.done"
        wait $ep
        if ! grep -q listening "$L/hostile-squat.log"; then
            fail "squatter" "it could not listen: $(cat "$L/hostile-squat.log")"
        elif grep -q '^OK' "$L/hostile-squat-imp.log"; then
            pass "a squatter ($who) at the exporter's abstract name: the importer still goes through the directory"
        else
            fail "squatter ($who) at the abstract name" "$(tr '\n' ' ' <"$L/hostile-squat-imp.log")"
        fi
    else
        fail "squatter" "no exporter: $(cat "$L/hostile-squat-exp.log")"
        wait $ep
    fi
else
    skip "squatter at the abstract name" "needs root and unshare --pid --net --mount"
fi
# --- names planted in the directory do not hide an event pool's exporter -----
# A short record (event pools) names 32 bits of its exporter's identity:
# names with those bits that come before the exporter's socket in the
# directory's order must not hide it.
if [ $NS_OK = 1 ] && [ -x "$BUILD/test/transport/rdv_ze" ]; then
    n=$((n + 1)); D="$top/d$n"
    mkdir -m 700 "$D" && mkfifo "$D/c.h" "$D/c.a"
    IPCBYVAL_RENDEZVOUS_DIR=$D timeout -s KILL 60 "${NS[@]}" "$RUN" "$BUILD/test/transport/rdv_ze" \
        export "$D" --case pools --rounds 1 --hold "$top/go$n" >"$L/hostile-plant-exp.log" 2>&1 &
    ep=$!
    # The importer opens the FIFOs the exporter waits on; it gets the
    # handle once the names are planted.
    IPCBYVAL_RENDEZVOUS_DIR=$D timeout -s KILL 60 "${NS[@]}" "$RUN" "$BUILD/test/transport/rdv_ze" \
        import "$D" --case pools --rounds 1 >"$L/hostile-plant-imp.log" 2>&1 &
    ip=$!
    S=""
    for _ in $(seq 500); do
        S=$(ls "$D"/ipcbyval-*.sock 2>/dev/null | head -1)
        [ -n "$S" ] && break
        sleep 0.02
    done
    if [ -n "$S" ]; then
        real=$(basename "$S")
        pre=${real%????????.sock} low=${real#"$pre"}
        low=${low%.sock} pre=${pre%????????} # ipcbyval-BOOT- and the low 32 bits
        # Plant until at least 16 come before the real name in readdir order.
        k=0
        while [ $k -lt 4096 ]; do
            for _ in $(seq 64); do
                k=$((k + 1))
                : >"$D/${pre}$(printf '%08x' $k)${low}.sock"
            done
            ahead=$(ls -U "$D" | grep -n -F "$real" | cut -d: -f1)
            [ "${ahead:-0}" -gt 20 ] && break
        done
        touch "$top/go$n"
        wait $ip
        wait $ep
        grep -q '^OK rdv' "$L/hostile-plant-imp.log" &&
            pass "an event pool's exporter found behind $((ahead - 1)) planted names with its 32 bits" ||
            fail "planted names ($((ahead - 1)) ahead)" "$(grep -E 'error|FAILED' "$L/hostile-plant-imp.log" | head -2 | tr '\n' ' ')"
    else
        fail "planted names" "the exporter made no socket in the directory"
        kill $ep $ip 2>/dev/null
        wait
    fi
else
    skip "planted names" "needs root, unshare --pid --net --mount and rdv_ze"
fi
# --- an exporter that cannot listen in the directory says so, once -----------
if [ $NS_OK = 1 ] && [ -x "$BUILD/test/transport/rdv_ze" ]; then
    n=$((n + 1)); D="$top/d$n"
    mkdir -m 700 "$D" && mkfifo "$D/c.h" "$D/c.a"
    (ulimit -n 16; IPCBYVAL_RENDEZVOUS_DIR=$D timeout -s KILL 60 "$RUN" "$BUILD/test/transport/rdv_ze" \
        export "$D" --rounds 2 >"$L/hostile-nofile-exp.log" 2>&1) &
    ep=$!
    IPCBYVAL_RENDEZVOUS_DIR=$D timeout -s KILL 60 "${NS[@]}" "$RUN" "$BUILD/test/transport/rdv_ze" \
        import "$D" --rounds 2 >"$L/hostile-nofile-imp.log" 2>&1
    wait $ep
    said=$(grep -c 'warn: cannot listen in the rendezvous directory .*Too many open files' "$L/hostile-nofile-exp.log")
    if [ "$said" = 1 ] && grep -q 'could not listen there' "$L/hostile-nofile-imp.log"; then
        pass "with ulimit -n 16 the exporter says once, as a warning, why it does not listen in the directory"
    else
        fail "ulimit -n 16" "said $said times; importer: $(grep error "$L/hostile-nofile-imp.log" | head -1)"
    fi
else
    skip "ulimit -n 16" "needs root, unshare --pid --net --mount and rdv_ze"
fi
# --- background threads have room for a driver call ---------------------------
# The watcher runs the driver's close on its stack (the test drivers need
# under 9 KiB there; real drivers more): 256 KiB at least.
sz=$("$H" stack | sed -n 's/^stack: \([0-9]*\) bytes/\1/p')
[ "${sz:-0}" -ge 262144 ] && pass "a background thread's stack is $((sz / 1024)) KiB (256 KiB at least)" ||
    fail "background thread stack" "${sz:-unknown} bytes, under 256 KiB"
finish
