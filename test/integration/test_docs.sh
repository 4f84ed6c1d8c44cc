#!/bin/bash
# SPDX-License-Identifier: MIT
# Man pages lint clean and agree with the code: every variable of the
# config table is documented in ipcbyval(7) and the README, every option of
# --help in ipcbyval-run(1) and back; make help names every target the
# README, the man pages and the Makefile offer; the pages' header is
# ipcbyval's, at the Makefile's version.
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
man_opts=$(sed -nE 's/^\.It Fl \\(-[a-z][a-z-]+).*/-\1/p' "$ROOT/man/ipcbyval-run.1" | sort -u)
missing=""
for o in $man_opts; do grep -qx -- "$o" <<<"$opts" || missing="$missing $o"; done
[ -n "$man_opts" ] && [ -z "$missing" ] && pass "every option of ipcbyval-run(1) in --help" ||
    fail "options in --help" "${missing:-none found in the man page}"
grep -q -- '--log=LEVEL' <(sed -n '/^Options:/,/^$/p' <("$RUN" --help)) &&
    grep -q '^\.Op Fl \\-log Ns = Ns Ar level$' "$ROOT/man/ipcbyval-run.1" &&
    pass "--log=LEVEL in --help and the synopsis" || fail "--log=LEVEL" "missing"

# The header man-db shows: ipcbyval's name and version, not "BSD".
version=$(sed -nE 's/^VERSION *:= *//p' "$ROOT/Makefile")
bad=""
for page in "$ROOT/man/ipcbyval.7" "$ROOT/man/ipcbyval-run.1"; do
    grep -qx "\.Os ipcbyval $version" "$page" && grep -qx '\.ds doc-volume-operating-system ipcbyval' "$page" ||
        bad="$bad ${page##*/}"
done
[ -z "$bad" ] && pass "pages say ipcbyval $version in header and footer" || fail ".Os / header" "$bad"
if command -v groff >/dev/null; then
    head1=$(env -u LD_PRELOAD groff -mandoc -Tascii "$ROOT/man/ipcbyval.7" 2>/dev/null | head -1)
    grep -q 'ipcbyval Miscellaneous Information Manual' <<<"$head1" && ! grep -q BSD <<<"$head1" &&
        pass "groff (man-db) header: $(xargs <<<"$head1")" || fail "groff header" "$head1"
fi

# make help: every target it names exists; every target the README names
# (`make X`, or a code line "make X"), and every .PHONY target of the
# Makefile but its internal steps, is in it.
help=$(make -s -C "$ROOT" --no-print-directory help 2>/dev/null)
listed=$(sed -nE 's/^  make ([a-z][a-z-]*) .*/\1/p' <<<"$help" | sort -u)
missing=""
for t in $listed; do
    grep -qE "^$t:" "$ROOT/Makefile" "$ROOT"/*/module.mk "$ROOT"/test/*/module.mk || missing="$missing no-rule:$t"
done
internal="all lib tests check-all demo-run help"
phony=$(sed -n '/^\.PHONY:/,/[^\\]$/p' "$ROOT/Makefile" | sed 's/^\.PHONY://; s/\\//g' | xargs -n1)
readme=$( (grep -oE '`make [a-z][a-z-]*' "$ROOT/README.md" | sed 's/^`make //'
    sed -n '/^```/,/^```/p' "$ROOT/README.md" | grep -oE '^make [a-z][a-z-]*' | sed 's/^make //') | sort -u)
for t in $phony $readme; do
    grep -qw -- "$t" <<<"$internal" && continue
    grep -qx -- "$t" <<<"$listed" || missing="$missing not-in-help:$t"
done
[ -n "$listed" ] && [ -z "$missing" ] && pass "make help names every target ($(xargs <<<"$listed"))" ||
    fail "make help" "$missing"

# Repository: the license at the root, the same MIT text the package
# ships; no libFuzzer artifact tracked, and make fuzz writes them under
# build/ (ignored by git), never into the folder it was run from.
lic=$(sed -n '/^ Permission is hereby granted/,$p' "$ROOT/scripts/debian/copyright" | sed 's/^ //; s/^\.$//')
[ -f "$ROOT/LICENSE" ] && grep -q '^MIT License$' "$ROOT/LICENSE" &&
    [ "$(tail -n +5 "$ROOT/LICENSE")" = "$lic" ] &&
    pass "LICENSE at the root: the MIT text of debian/copyright" || fail "LICENSE" "missing or different"
if git -C "$ROOT" rev-parse --git-dir >/dev/null 2>&1; then
    tracked=$(git -C "$ROOT" ls-files | grep -E '(^|/)(crash|leak|timeout|oom)-[0-9a-f]+$' | xargs)
    [ -z "$tracked" ] && pass "no libFuzzer artifact tracked" || fail "fuzz artifacts tracked" "$tracked"
fi
fz=$(make -n -s -C "$ROOT" --no-print-directory fuzz FUZZ_SECONDS=1 2>/dev/null | grep -E 'build-fuzz/fuzz_[a-z_]+ -max_total_time')
n=$(grep -o 'build-fuzz/fuzz_[a-z_]* ' <<<"$fz" | wc -l)
m=$(grep -oE -- '-artifact_prefix=build/[^ ]+/fuzz_[a-z_]+-' <<<"$fz" | wc -l)
[ "$n" -ge 3 ] && [ "$m" -eq "$n" ] && grep -qx 'build/' "$ROOT/.gitignore" &&
    pass "make fuzz: every target's artifacts under build/ ($m targets), ignored by git" ||
    fail "make fuzz artifacts" "$n targets, $m with -artifact_prefix under build/"
# The --doctor transcript in the README and ipcbyval-run(1): the lines the
# doctor prints today, by label.
labels() { sed -nE 's/^  ([a-z_]+( [a-z]+)?) {2,}.*/\1/p; s/^(verdict):.*/\1/p'; }
now=$(ZE_ENABLE_ALT_DRIVERS= "$RUN" --doctor 2>/dev/null | labels | xargs)
readme=$(sed -n '/^\$ ipcbyval-run --doctor$/,/^```$/p' "$ROOT/README.md" | labels | xargs)
page=$(sed -n '/^ipcbyval doctor: /,/^\.Ed$/p' "$ROOT/man/ipcbyval-run.1" | labels | xargs)
[ -n "$now" ] && [ "$readme" = "$now" ] && [ "$page" = "$now" ] &&
    pass "--doctor transcripts in the README and ipcbyval-run(1) have today's lines" ||
    fail "--doctor transcripts" "now: $now | README: $readme | man: $page"
finish
