#!/bin/bash
# SPDX-License-Identifier: MIT
# mkdeb.sh OUT.deb - the Debian package (make deb): make install into a
# staging tree under /usr with the library in the multiarch folder, then
# the files Debian policy asks for (compressed man pages and changelog,
# copyright, md5sums, the ldconfig trigger) and dpkg-deb --build.
# Environment (from the Makefile): BUILD VERSION DEB_ARCH MULTIARCH MAKE.
set -euo pipefail
umask 022 # files owned by root whatever umask the build ran with
out=$1
here=$(cd "$(dirname "$0")" && pwd)
: "${BUILD:?}" "${VERSION:?}" "${DEB_ARCH:?}" "${MULTIARCH:?}" "${MAKE:=make}"
command -v dpkg-deb >/dev/null || { echo "mkdeb: dpkg-deb not found (package dpkg)" >&2; exit 1; }

stage="$BUILD/deb/ipcbyval_${VERSION}_${DEB_ARCH}"
rm -rf "$stage"
mkdir -p "$stage/DEBIAN"
$MAKE --no-print-directory install DESTDIR="$stage" PREFIX=/usr \
    LIBDIR="/usr/lib/$MULTIARCH" MODULEDIR=/usr/share/modulefiles >/dev/null

doc="$stage/usr/share/doc/ipcbyval"
rm -f "$stage/usr/lib/$MULTIARCH/libipcbyval.so" # a -dev symlink; nothing links to it
strip --strip-unneeded --remove-section=.comment --remove-section=.note \
    "$stage/usr/lib/$MULTIARCH/libipcbyval.so.1"
gzip -9n "$stage"/usr/share/man/man*/*.[0-9] "$doc/README.md"
install -m 0644 "$here/debian/copyright" "$doc/copyright"
# Reproducible: the date of the last commit when there is one.
when=$(git -C "$here/.." log -1 --format=%ct 2>/dev/null || date +%s)
sed -e "s|@VERSION@|$VERSION|" -e "s|@DATE@|$(date -u -R -d "@$when")|" "$here/debian/changelog" |
    gzip -9n >"$doc/changelog.Debian.gz"
# Debian's lmod searches /etc/lmod/modules: module load ipcbyval works at once.
mkdir -p "$stage/etc/lmod/modules"
ln -s /usr/share/modulefiles/ipcbyval "$stage/etc/lmod/modules/ipcbyval"

# The newest glibc symbol version the library uses, as dpkg-shlibdeps would.
lib="$stage/usr/lib/$MULTIARCH/libipcbyval.so.1"
glibc=$(objdump -T "$lib" | grep -oE 'GLIBC_[0-9]+(\.[0-9]+)+' | sed 's/GLIBC_//' | sort -uV | tail -1)
size=$(du -sk --exclude=DEBIAN "$stage" | cut -f1)
sed -e "s|@VERSION@|$VERSION|" -e "s|@ARCH@|$DEB_ARCH|" -e "s|@SIZE@|$size|" \
    -e "s|@DEPENDS@|libc6 (>= ${glibc:-2.34})|" "$here/debian/control" >"$stage/DEBIAN/control"
install -m 0644 "$here/debian/triggers" "$stage/DEBIAN/triggers"
(cd "$stage" && find usr -type f -print0 | sort -z | xargs -0 md5sum) >"$stage/DEBIAN/md5sums"
chmod 0644 "$stage/DEBIAN/md5sums"

dpkg-deb --root-owner-group -Zxz --build "$stage" "$out" >/dev/null
echo "  built $out:"
dpkg-deb --contents "$out" | awk '$6 !~ /\/$/ { print "    " substr($6, 2) ($7 ? " " $7 " " $8 : "") }'
