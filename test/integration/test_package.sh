#!/bin/bash
# SPDX-License-Identifier: MIT
# make deb builds a Debian package with the library in the multiarch
# folder, ipcbyval-run, both man pages, the docs and the modulefile; make
# rpm the same files for RHEL (lib64, /usr/share/licenses); make install /
# uninstall; module load through Lmod and through Environment Modules
# (its modulecmd.tcl, unpacked by scripts/deps.sh: the two Debian packages
# conflict) after make install.
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
# The modulefile of a /usr install: no PATH line (/usr/bin is on PATH), no
# dead template line, no comment about where it was installed from.
mf="$x/usr/share/modulefiles/ipcbyval/$version"
! grep -qE 'prepend-path PATH|ne "/usr/bin"|@PATH@|@[A-Z]+@|is on PATH already' "$mf" &&
    pass "the package's modulefile: no PATH line, no dead template line" ||
    fail "package modulefile" "$(grep -nE 'PATH|ne |@' "$mf" | tr '\n' '|')"
bad=$(find "$x" -type f -perm /022 -o -type d -perm /022 | head -3)
[ -z "$bad" ] && ! (dpkg-deb --contents "$deb" | grep -vq ' root/root ') &&
    pass "files owned by root, none group or world writable" || fail "permissions" "$bad"
debfiles=$(dpkg-deb --contents "$deb" | awk '$6 !~ /\/$/ { print substr($6, 3) }')
rm -rf "$x"

# make rpm: the same files, where RHEL puts them. Compared with the .deb's
# list after mapping what each system's policy places differently: the
# library's folder (multiarch / lib64), the README (gzipped by Debian), the
# license (Debian's copyright file / RHEL's licenses folder), and Debian's
# changelog and /etc/lmod link (RHEL's module tools read
# /usr/share/modulefiles already).
if command -v rpmbuild >/dev/null; then
    rm -f "$BUILD"/ipcbyval-"$version"-1.*.rpm
    if "${M[@]}" rpm >"$BUILD/test-logs/package-rpm.log" 2>&1 &&
        rpm=$(ls "$BUILD"/ipcbyval-"$version"-1.*.rpm 2>/dev/null | head -1) && [ -n "$rpm" ]; then
        pass "make rpm: ${rpm##*/}"
        norm() {
            sed -E -e "s#^usr/lib/$multiarch/#LIBDIR/#; s#^usr/lib64/#LIBDIR/#" \
                -e 's#^(usr/share/doc/ipcbyval/README\.md)\.gz$#\1#' \
                -e 's#^usr/share/doc/ipcbyval/copyright$#LICENSE#; s#^usr/share/licenses/ipcbyval/LICENSE$#LICENSE#' |
                grep -vE '^(usr/share/doc/ipcbyval/changelog\.Debian\.gz|etc/lmod/modules/ipcbyval)$' | sort
        }
        rpmfiles=$(rpm -qp --qf '[%{FILENAMES} %{FILEMODES:perms}\n]' "$rpm" | awk '$2 !~ /^d/ { print substr($1, 2) }')
        d=$(diff <(norm <<<"$debfiles") <(norm <<<"$rpmfiles"))
        [ -z "$d" ] && pass "rpm and deb: the same $(norm <<<"$rpmfiles" | wc -l) files (library in lib64)" ||
            fail "rpm vs deb file lists" "$(tr '\n' ' ' <<<"$d")"
        info=$(rpm -qp --qf '%{NAME} %{VERSION} %{LICENSE} %{ARCH}' "$rpm")
        [ "$info" = "ipcbyval $version MIT $(rpm --eval '%{_arch}')" ] && pass "rpm header: $info" ||
            fail "rpm header" "$info"
        x=$(mktemp -d)
        rpm2archive - <"$rpm" | tar -xz -C "$x"
        grep -q '^LIBDIR="/usr/lib64"' "$x/usr/bin/ipcbyval-run" &&
            grep -q "^setenv IPCBYVAL_LIB /usr/lib64/libipcbyval.so.1$" "$x/usr/share/modulefiles/ipcbyval/$version" &&
            pass "the rpm's ipcbyval-run and modulefile name /usr/lib64" || fail "rpm paths" "$(ls -R "$x" | head -5)"
        rm -rf "$x"
    else
        fail "make rpm" "$(tail -3 "$BUILD/test-logs/package-rpm.log" | tr '\n' ' ')"
    fi
else
    skip "make rpm" "rpmbuild not found (scripts/deps.sh installs Debian's rpm)"
fi

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
    skip "module load" "Lmod is not installed (scripts/deps.sh installs it, as root, unless environment-modules is)"
fi
grep -qx "prepend-path PATH $prefix/bin" "$prefix/share/modulefiles/ipcbyval/$version" &&
    ! grep -q 'is on PATH already' "$prefix/share/modulefiles/ipcbyval/$version" &&
    pass "PREFIX install: the modulefile puts $prefix/bin on PATH, no stale comment" ||
    fail "PREFIX modulefile" "$(grep -n PATH "$prefix/share/modulefiles/ipcbyval/$version" | tr '\n' '|')"
# Environment Modules (Tcl): installed, or unpacked by scripts/deps.sh.
envmod_root=${IPCBYVAL_ENVMOD_ROOT:-/var/cache/ipcbyval/environment-modules}
modulecmd=$(ls /usr/lib/"$multiarch"/modulecmd.tcl "$envmod_root"/usr/lib/*/modulecmd.tcl 2>/dev/null | head -1)
if [ -n "$modulecmd" ] && command -v tclsh >/dev/null; then
    out=$(env -i HOME="$HOME" PATH=/usr/bin:/bin MODULEPATH="$prefix/share/modulefiles" bash -c "
        module() { eval \"\$(tclsh $modulecmd bash \"\$@\")\"; }
        module load ipcbyval || exit 1
        echo \"run=\$(command -v ipcbyval-run)\"
        echo \"lib=\$IPCBYVAL_LIB\"
        ipcbyval-run sh -c 'echo \"preload=\$LD_PRELOAD\"'
        module unload ipcbyval
        echo \"after=\${IPCBYVAL_LIB:-unset} \$PATH\"" 2>&1)
    grep -qx "run=$prefix/bin/ipcbyval-run" <<<"$out" && grep -qx "lib=$prefix/lib/libipcbyval.so.1" <<<"$out" &&
        grep -qx "preload=$prefix/lib/libipcbyval.so.1" <<<"$out" && grep -qx "after=unset /usr/bin:/bin" <<<"$out" &&
        pass "Environment Modules ($(tclsh "$modulecmd" bash --version 2>&1 | head -1 | cut -c1-30)): load puts ipcbyval-run on PATH, names the library; unload undoes it" ||
        fail "Environment Modules" "$(tr '\n' ' ' <<<"$out")"
else
    skip "Environment Modules" "modulecmd.tcl or tclsh not found (scripts/deps.sh unpacks it, as root)"
fi
"${M[@]}" uninstall PREFIX="$prefix" >/dev/null 2>&1
left=$(find "$prefix" -type f -o -type l)
[ -z "$left" ] && pass "make uninstall removes every file" || fail "make uninstall" "left: $left"
rm -rf "$prefix"
finish
