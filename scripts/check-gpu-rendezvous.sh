# SPDX-License-Identifier: MIT
# check-gpu-rendezvous.sh - sourced by check-gpu.sh (rows, run, RUN, BUILD,
# LOGS from gpu-lib.sh): exporter and importer each in their own pid,
# network and mount namespaces (unshare, as two pods or one container per
# rank), sharing only a temporary directory, on the real driver (issue 24).
#   VMM under ipcbyval with IPCBYVAL_RENDEZVOUS_DIR: 20 rounds verified;
#     without the directory: refused (what the directory fixes)
#   legacy: natively and under ipcbyval, whatever the driver does across
#     these namespaces, ipcbyval must do the same (the row says which)
#   VMM seq: double close, context resets on both sides: the same return
#     codes across namespaces as in one (rdv_seq.c)
#   legacy, what makes it fail (INFO rows, information for the docs): the
#     same pair with separate pid + net + mount namespaces but the host's
#     /proc (no --mount-proc); with --mount-proc and each side's own /dev
#     (a tmpfs with mknod'ed copies of the /dev/nvidia* nodes, as a
#     container runtime makes them); and inside a device cgroup that
#     allows exactly those nodes (systemd-run DeviceAllow=, where systemd
#     runs), each natively and under ipcbyval.
echo "== across namespaces: pid + net + mount each side, one shared directory (rdv_cu)"
RDV="$BUILD/test/transport/rdv_cu"
NSX=(unshare --pid --net --mount --fork --mount-proc --kill-child)
# rdv_gpu NAME MEM PRELOAD(yes|no) DIR(yes|no): "verified N/20" or the error in $rdv_out
rdv_gpu() {
    local name=$1 mem=$2 pre=$3 dir=$4 d
    d=$(mktemp -d) && chmod 700 "$d" && mkfifo "$d/c.h" "$d/c.a"
    local -a pre_run=() env=(env)
    [ "$pre" = yes ] && pre_run=("$RUN")
    [ "$dir" = yes ] && env+=(IPCBYVAL_RENDEZVOUS_DIR="$d")
    local log="$LOGS/rdv-$(echo "$name" | tr -c 'A-Za-z0-9_.-' '_')"
    local -a ns=("${NSX[@]}")
    [ -n "${RDV_NS:-}" ] && read -r -a ns <<<"$RDV_NS"
    timeout -s KILL 90 "${env[@]}" "${ns[@]}" "${pre_run[@]}" "$RDV" export "$d" --mem "$mem" \
        --rounds 20 --size 16777216 >"$log.exp" 2>&1 &
    local ep=$!
    timeout -s KILL 90 "${env[@]}" IPCBYVAL_STATS=1 "${ns[@]}" "${pre_run[@]}" "$RDV" import "$d" \
        --mem "$mem" --rounds 20 --size 16777216 >"$log.imp" 2>&1
    { kill -KILL $ep; wait $ep; } 2>/dev/null
    rm -rf "$d"
    if grep -q '^OK rdv' "$log.imp"; then
        rdv_out="20 of 20 verified"
        return 0
    fi
    rdv_out=$(grep -hE 'FAILED|error|failed' "$log.imp" "$log.exp" | head -2 | tr '\n' ' ' | cut -c1-150)
    return 1
}
if [ "$(id -u)" != 0 ] || ! "${NSX[@]}" true 2>/dev/null; then
    row "rendezvous across namespaces" SKIP "needs root and unshare --pid --net --mount --kill-child"
elif ! make -j"$(nproc)" "$RDV" EXTRA_INC="${EXTRA_INC:-}" >>"$LOGS/build.log" 2>&1; then
    row "rendezvous: build rdv_cu" FAIL "see $LOGS/build.log"
else
    if rdv_gpu "vmm with the directory" vmm yes yes; then
        row "rendezvous: VMM, separate pid+net+mount ns, IPCBYVAL_RENDEZVOUS_DIR" PASS "$rdv_out"
    else
        row "rendezvous: VMM, separate pid+net+mount ns, IPCBYVAL_RENDEZVOUS_DIR" FAIL "$rdv_out"
    fi
    if rdv_gpu "vmm without the directory" vmm yes no; then
        row "rendezvous: VMM across namespaces without the directory: refused" FAIL "opened: $rdv_out"
    else
        row "rendezvous: VMM across namespaces without the directory: refused" PASS "$rdv_out"
    fi
    # The seq case (test/transport/rdv_seq.c): double close, context
    # reset on each side, return codes held against one namespace's.
    rdv_seq_gpu() {
        local d log="$LOGS/rdv-seq-$1"; shift
        d=$(mktemp -d) && chmod 700 "$d" && mkfifo "$d/c.h" "$d/c.a"
        timeout -s KILL 90 env IPCBYVAL_RENDEZVOUS_DIR="$d" "$@" "$RUN" "$RDV" export "$d" \
            --mem vmm --case seq >"$log.exp" 2>&1 &
        local ep=$!
        timeout -s KILL 90 env IPCBYVAL_RENDEZVOUS_DIR="$d" "$@" "$RUN" "$RDV" import "$d" \
            --mem vmm --case seq >"$log.imp" 2>&1
        { kill -KILL $ep; wait $ep; } 2>/dev/null
        rm -rf "$d"
        grep -h '^SEQ' "$log.imp" || echo "none: $(grep -hE 'FAILED|error' "$log.imp" | head -1)"
    }
    one=$(rdv_seq_gpu one) across=$(rdv_seq_gpu across "${NSX[@]}")
    [ "$one" = "$across" ] && case "$one" in SEQ*) res=PASS ;; *) res=FAIL ;; esac || res=FAIL
    row "rendezvous: VMM seq (double close, ctx resets) as in one namespace" $res \
        "$(echo "across: ${across#SEQ }; one ns: ${one#SEQ }" | cut -c1-200)"
    rdv_gpu "legacy native" legacy no no
    nat_ok=$?
    [ $nat_ok = 0 ] && nat="native: works ($rdv_out)" || nat="native: fails ($rdv_out)"
    rdv_gpu "legacy under ipcbyval" legacy yes yes
    byv_ok=$?
    [ $byv_ok = 0 ] && byv="ipcbyval: works" || byv="ipcbyval: fails ($rdv_out)"
    [ $nat_ok = $byv_ok ] && res=PASS || res=FAIL
    row "rendezvous: legacy across pid+net+mount ns, ipcbyval as native" $res "$nat; $byv"
    # legacy_info NAME: one INFO row, native and under ipcbyval, with the
    # namespaces RDV_NS names (a command line, words split on blanks).
    legacy_info() {
        local nat byv
        rdv_gpu "legacy native $1" legacy no no && nat="native works" || nat="native fails ($rdv_out)"
        rdv_gpu "legacy ipcbyval $1" legacy yes yes && byv="ipcbyval works" || byv="ipcbyval fails ($rdv_out)"
        row "rendezvous (info): legacy, $1" INFO "$(echo "$nat; $byv" | cut -c1-160)"
    }
    RDV_NS="unshare --pid --net --mount --fork --kill-child" legacy_info "own pid+net+mount ns, host /proc"
    # Each side's own /dev: a tmpfs with copies of the NVIDIA nodes (same
    # major:minor, as runc/containerd make them), /dev/null & co, and the
    # host's /dev/shm bound in; /proc of its own pid namespace.
    devset=$(mktemp -d)
    mkdev="$devset/mkdev.sh"
    {
        echo 'set -e; mkdir -p /run/rdv-shm; mount --bind /dev/shm /run/rdv-shm'
        echo 'mount -t tmpfs -o mode=755 rdv-dev /dev; mkdir /dev/shm; mount --bind /run/rdv-shm /dev/shm'
        for f in /dev/nvidia* /dev/null /dev/zero /dev/urandom /dev/random; do
            [ -c "$f" ] || continue
            case "$f" in /dev/nvidia-caps*) continue ;; esac
            echo "mknod -m 666 $f c $((16#$(stat -c %t "$f"))) $((16#$(stat -c %T "$f")))"
        done
        echo 'exec "$@"'
    } >"$mkdev"
    RDV_NS="unshare --pid --net --mount --fork --mount-proc --kill-child bash $mkdev" \
        legacy_info "own pid+net+mount ns, own /dev with mknod'ed /dev/nvidia* (same major:minor)"
    rm -rf "$devset"
    if command -v systemd-run >/dev/null && systemctl is-system-running >/dev/null 2>&1; then
        allow=""
        for f in /dev/nvidia*; do [ -c "$f" ] && allow="$allow -p DeviceAllow=$f:rw"; done
        RDV_NS="systemd-run --quiet --wait --pipe --collect -p DevicePolicy=strict$allow \
            unshare --pid --net --mount --fork --mount-proc --kill-child" \
            legacy_info "own pid+net+mount ns in a device cgroup allowing only /dev/nvidia*"
    else
        row "rendezvous (info): legacy in a device cgroup" INFO "not run: no running systemd for systemd-run DeviceAllow="
    fi
fi
