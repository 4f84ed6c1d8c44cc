#!/bin/bash
# SPDX-License-Identifier: MIT
# Man pages lint clean and agree with the code: every variable of the
# config table is documented in ipcbyval(7) and the README, every option of
# --help in ipcbyval-run(1).
. "$(dirname "$0")/lib.sh"
need "$LIB"
command -v mandoc >/dev/null || { skip docs "mandoc not installed"; exit 77; }

out=$(mandoc -Tlint -Wwarning "$ROOT/man/ipcbyval.7" "$ROOT/man/ipcbyval-run.1" 2>&1)
[ -z "$out" ] && pass "mandoc -Tlint clean" || fail "mandoc -Tlint" "$out"

vars=$("$RUN" --print-config | sed -n 's/^\(IPCBYVAL_[A-Z_]*\)=.*/\1/p')
missing=""
for v in $vars; do
    grep -q "^\.It Ev $v\$" "$ROOT/man/ipcbyval.7" || missing="$missing man:$v"
    grep -q "| \`$v\` |" "$ROOT/README.md" || missing="$missing readme:$v"
done
documented=$(sed -n 's/^\.It Ev \(IPCBYVAL_[A-Z_]*\)$/\1/p' "$ROOT/man/ipcbyval.7")
for v in $documented; do grep -qx "$v" <<<"$vars" || missing="$missing stale-man:$v"; done
[ -z "$missing" ] && pass "every variable documented, none stale" || fail "variables documented" "$missing"

opts=$("$RUN" --help | sed -n '/^Options:/,/^$/p' | grep -oE -- '--[a-z][a-z-]+' | sort -u)
missing=""
for o in $opts; do
    grep -q -- "Fl \\\\${o#-}" "$ROOT/man/ipcbyval-run.1" || missing="$missing $o"
done
[ -z "$missing" ] && pass "every --help option in ipcbyval-run(1)" || fail "options documented" "$missing"
finish
