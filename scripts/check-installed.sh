#!/bin/bash
# SPDX-License-Identifier: MIT
# check-installed.sh - after the Debian package is installed (.ci/run): its
# files are where Debian puts them, the demo passes with the installed
# ipcbyval-run and library (the test programs come from the build tree),
# the man pages are found, and `module load ipcbyval` works with Lmod.
# Prints PASS/FAIL lines; exits 1 when any check failed.
set -u
cd "$(dirname "$0")/.."
. test/integration/lib.sh
unset IPCBYVAL_LIB
multiarch=$(gcc -print-multiarch 2>/dev/null || dpkg-architecture -qDEB_HOST_MULTIARCH)
want_lib="/usr/lib/$multiarch/libipcbyval.so.1"

if dpkg-query -W -f='${Status}' ipcbyval 2>/dev/null | grep -q "install ok installed"; then
    pass "package ipcbyval $(dpkg-query -W -f='${Version}' ipcbyval) installed"
else
    fail "package" "ipcbyval is not installed (apt-get install ./build/ipcbyval_*.deb)"
    finish
fi
missing=""
for f in "$want_lib" /usr/bin/ipcbyval-run /usr/share/man/man1/ipcbyval-run.1.gz \
    /usr/share/man/man7/ipcbyval.7.gz /usr/share/doc/ipcbyval/copyright \
    /usr/share/modulefiles/ipcbyval/*; do
    dpkg -S "$f" >/dev/null 2>&1 || missing="$missing $f"
done
[ -z "$missing" ] && pass "library in /usr/lib/$multiarch, ipcbyval-run, man pages, docs, modulefile" ||
    fail "package contents" "not from the package:$missing"

got=$(/usr/bin/ipcbyval-run sh -c 'echo "$LD_PRELOAD"' | tr ':' '\n' | grep libipcbyval)
[ "$got" = "$want_lib" ] && pass "the installed ipcbyval-run preloads $got" ||
    fail "installed ipcbyval-run" "preloads '$got', not $want_lib"

log="$BUILD/demo-installed.log"
if PATH="/usr/bin:$PATH" scripts/demo.sh --installed >"$log" 2>&1; then
    pass "make demo's job against the installed files ($(grep -c '^rank .*OK' "$log") ranks verified)"
else
    fail "demo against the installed files" "$(tail -5 "$log" | tr '\n' ' ')"
fi
sed 's/^/    /' "$log"

if command -v man >/dev/null; then
    [ "$(man -w ipcbyval 2>/dev/null)" = /usr/share/man/man7/ipcbyval.7.gz ] &&
        [ "$(man -w ipcbyval-run 2>/dev/null)" = /usr/share/man/man1/ipcbyval-run.1.gz ] &&
        pass "man ipcbyval, man ipcbyval-run" || fail "man pages" "$(man -w ipcbyval ipcbyval-run 2>&1 | xargs)"
fi

# Lmod from Debian: the package links the modulefile into /etc/lmod/modules.
if [ -r /usr/share/lmod/lmod/init/bash ]; then
    # A login shell, as a user gets it: /etc/profile.d/lmod.sh sets MODULEPATH.
    out=$(env -i HOME="$HOME" PATH=/usr/bin:/bin bash -lc '
        module load ipcbyval 2>&1 || exit 1
        module list 2>&1 | grep -o "ipcbyval/[0-9.]*"
        echo "lib=$IPCBYVAL_LIB"
        echo "run=$(command -v ipcbyval-run)"
        module unload ipcbyval
        echo "after=${IPCBYVAL_LIB:-unset}"')
    if grep -q "^ipcbyval/" <<<"$out" && grep -qx "lib=$want_lib" <<<"$out" &&
        grep -qx "run=/usr/bin/ipcbyval-run" <<<"$out" && grep -qx "after=unset" <<<"$out"; then
        pass "Lmod: module load ipcbyval ($(grep '^ipcbyval/' <<<"$out")) names the library, unload clears it"
    else
        fail "Lmod module" "$(tr '\n' ' ' <<<"$out")"
    fi
    # The same with a `make install` tree: module use PREFIX/share/modulefiles.
    prefix=$(mktemp -d)
    make -s --no-print-directory install PREFIX="$prefix" >/dev/null
    out=$(env -i HOME="$HOME" PATH=/usr/bin:/bin bash -lc "
        module use $prefix/share/modulefiles
        module load ipcbyval/0.1.0 2>&1 || exit 1
        echo \"run=\$(command -v ipcbyval-run)\"
        ipcbyval-run sh -c 'echo \"preload=\$LD_PRELOAD\"'")
    grep -qx "run=$prefix/bin/ipcbyval-run" <<<"$out" && grep -qx "preload=$prefix/lib/libipcbyval.so.1" <<<"$out" &&
        pass "Lmod: module use PREFIX/share/modulefiles after make install" || fail "make install module" "$out"
    rm -rf "$prefix"
else
    skip "Lmod" "lmod is not installed (scripts/deps.sh installs it unless environment-modules is)"
fi
finish
