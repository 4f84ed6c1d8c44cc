#!/bin/bash
# SPDX-License-Identifier: MIT
# The library exports exactly the symbols of shim/symbols.h (but the zex
# extensions, reached only through zeDriverGetExtensionFunctionAddress),
# plus dlsym and the pidfd_getfd rescue's syscall and pidfd_getfd
# (shim/syscall.c); and no call of ipcbyval's own goes through that
# exported syscall() (handles/sys.h).
. "$(dirname "$0")/lib.sh"
need "$LIB"
listed=$(sed -n 's/^ *X(\([A-Za-z0-9_]*\)[,)].*/\1/p' "$ROOT/shim/symbols.h" | grep -v '^zex' | sort -u)
exported=$(nm -D --defined-only "$LIB" | awk '{print $3}' | sed 's/@.*//' |
    grep -vxE 'dlsym|syscall|pidfd_getfd' | sort -u)
if [ -n "$(nm -D --defined-only "$LIB" | awk '$3 ~ /^cu/')" ]; then :; else
    listed=$(grep -v '^cu' <<<"$listed")
fi
d=$(diff <(echo "$listed") <(echo "$exported"))
[ -z "$d" ] && pass "exports == shim/symbols.h ($(wc -l <<<"$listed") symbols)" || fail "exports" "$d"
nm -D --defined-only "$LIB" | grep -qw dlsym && pass "dlsym interposed" || fail "dlsym" "not exported"
for s in syscall pidfd_getfd; do
    nm -D --defined-only "$LIB" | grep -qw "$s" && pass "$s interposed (the pidfd_getfd rescue)" ||
        fail "$s" "not exported"
done
if command -v objdump >/dev/null; then
    n=$(objdump -d "$LIB" | grep -cE 'call.*<syscall(@plt)?>')
    [ "$n" = 0 ] && pass "no internal call goes through the exported syscall()" ||
        fail "internal syscall() calls" "$n calls to syscall() in $LIB (use handles/sys.h)"
else
    skip "internal syscall() calls" "objdump not installed"
fi
finish
