#!/bin/bash
# SPDX-License-Identifier: MIT
# make deb builds a Debian package with the library in the multiarch
# folder, ipcbyval-run, both man pages, the docs and the modulefile;
# make install / uninstall; module load through Lmod after make install.
. "$(dirname "$0")/lib.sh"
need "$LIB"
if [ -n "${SAN:-}" ]; then
    # A nested make without the sanitizer's flags would rebuild the library.
    skip package "tested by the plain make check (SAN=$SAN builds are not packaged)"
    exit 77
fi
command -v dpkg-deb >/dev/null || { skip package "dpkg-deb not found"; exit 77; }
M=(make -s --no-print-directory -C "$ROOT" BUILD="$BUILD")
version=$(sed -nE 's/^VERSION *:= *//p' "$ROOT/Makefile")
arch=$(dpkg --print-architecture)
multiarch=$(${CC:-cc} -print-multiarch)
deb="$BUILD/ipcbyval_${version}_${arch}.deb"
log="$BUILD/test-logs/package-deb.log"

rm -f "$deb"
if "${M[@]}" deb >"$log" 2>&1 && [ -f "$deb" ]; then
    pass "make deb: ${deb##*/}"
else
    fail "make deb" "$(tail -3 "$log" | tr '\n' ' ')"
    finish
fi
contents=$(dpkg-deb --contents "$deb" | awk '{ print $6 }')
missing=""
for f in "./usr/lib/$multiarch/libipcbyval.so.1" ./usr/bin/ipcbyval-run \
    ./usr/share/man/man1/ipcbyval-run.1.gz ./usr/share/man/man7/ipcbyval.7.gz \
    ./usr/share/doc/ipcbyval/copyright ./usr/share/doc/ipcbyval/changelog.Debian.gz \
    "./usr/share/modulefiles/ipcbyval/$version" ./etc/lmod/modules/ipcbyval; do
    grep -qx -- "$f" <<<"$contents" || missing="$missing $f"
done
[ -z "$missing" ] && pass "contents: library in /usr/lib/$multiarch, bin/ipcbyval-run, both man pages, docs, modulefile" ||
    fail "deb contents" "missing:$missing"
info=$(dpkg-deb --field "$deb" Package Version Architecture Depends)
grep -qx "Package: ipcbyval" <<<"$info" && grep -qx "Version: $version" <<<"$info" &&
    grep -qx "Architecture: $arch" <<<"$info" && grep -qE '^Depends: libc6 \(>= 2\.[0-9]+\)$' <<<"$info" &&
    pass "control: $(xargs <<<"$info")" || fail "deb control" "$info"
x=$(mktemp -d)
dpkg-deb -x "$deb" "$x"
grep -q "^LIBDIR=\"/usr/lib/$multiarch\"" "$x/usr/bin/ipcbyval-run" &&
    grep -q "^setenv IPCBYVAL_LIB /usr/lib/$multiarch/libipcbyval.so.1" "$x/usr/share/modulefiles/ipcbyval/$version" &&
    pass "ipcbyval-run and the modulefile name the installed library" ||
    fail "installed paths" "$(grep -h 'LIBDIR=\|IPCBYVAL_LIB' "$x/usr/bin/ipcbyval-run" "$x/usr/share/modulefiles/ipcbyval/$version" | xargs)"
bad=$(find "$x" -type f -perm /022 -o -type d -perm /022 | head -3)
[ -z "$bad" ] && ! (dpkg-deb --contents "$deb" | grep -vq ' root/root ') &&
    pass "files owned by root, none group or world writable" || fail "permissions" "$bad"
rm -rf "$x"

# make install / uninstall into a prefix of our own.
prefix=$(mktemp -d)
"${M[@]}" install PREFIX="$prefix" >/dev/null 2>&1
n=$(find "$prefix" -type f | wc -l)
[ -x "$prefix/bin/ipcbyval-run" ] && [ -f "$prefix/share/modulefiles/ipcbyval/$version" ] && [ "$n" -ge 6 ] &&
    pass "make install: $n files, modulefile included" || fail "make install" "$(find "$prefix" -type f | xargs)"
if [ -r /etc/profile.d/lmod.sh ]; then
    out=$(env -i HOME="$HOME" PATH=/usr/bin:/bin bash -lc "
        module use $prefix/share/modulefiles
        module load ipcbyval 2>&1 || exit 1
        echo \"run=\$(command -v ipcbyval-run)\"
        echo \"lib=\$IPCBYVAL_LIB\"
        ipcbyval-run sh -c 'echo \"preload=\$LD_PRELOAD\"'" 2>&1)
    grep -qx "run=$prefix/bin/ipcbyval-run" <<<"$out" && grep -qx "lib=$prefix/lib/libipcbyval.so.1" <<<"$out" &&
        grep -qx "preload=$prefix/lib/libipcbyval.so.1" <<<"$out" &&
        pass "Lmod: module load ipcbyval puts ipcbyval-run on PATH and names the library" ||
        fail "module load" "$(tr '\n' ' ' <<<"$out")"
else
    skip "module load" "Lmod is not installed (scripts/deps.sh lmod)"
fi
"${M[@]}" uninstall PREFIX="$prefix" >/dev/null 2>&1
left=$(find "$prefix" -type f -o -type l)
[ -z "$left" ] && pass "make uninstall removes every file" || fail "make uninstall" "left: $left"
rm -rf "$prefix"
finish
