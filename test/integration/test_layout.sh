#!/bin/bash
# SPDX-License-Identifier: MIT
# The library's layout rules (README "Layout"): every library file is
# formatted by the repository's .clang-format; handles/ and cache/ never
# include a shim/ header; no file includes another folder's *_internal.h.
. "$(dirname "$0")/lib.sh"
cd "$ROOT"
files=$(ls shim/*.[ch] handles/*.[ch] cache/*.[ch])
if command -v clang-format >/dev/null; then
    bad=$(for f in $files; do clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || echo "$f"; done)
    [ -z "$bad" ] && pass "clang-format: $(wc -w <<<"$files") library files formatted" ||
        fail "clang-format" "not formatted (run clang-format -i): $(echo $bad)"
else
    skip "clang-format" "clang-format not installed (make deps installs it)"
fi
up=$(grep -n '#include "shim/' handles/*.[ch] cache/*.[ch])
[ -z "$up" ] && pass "handles/ and cache/ include no shim/ header" || fail "core includes shim" "$up"
cross=$(for f in $files; do
    grep -o '#include "[a-z]*/[a-z_]*_internal\.h"' "$f" | sed 's/#include "//; s/"//' |
        while read -r h; do [ "${h%%/*}" = "${f%%/*}" ] || echo "$f: $h"; done
done)
[ -z "$cross" ] && pass "no file includes another folder's *_internal.h" || fail "internal headers" "$cross"
finish
