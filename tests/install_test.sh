#!/bin/sh
# Installs the build into a temporary DESTDIR, then compiles and runs a
# small program against it using only `pkg-config --cflags --libs twheel`.
set -eu
build="$1"; src="$2"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
meson install -C "$build" --destdir "$tmp" --no-rebuild --quiet
pcdir=$(dirname "$(find "$tmp" -name twheel.pc | head -n 1)")
[ -f "$pcdir/twheel.pc" ] || { echo "twheel.pc not installed"; exit 1; }
export PKG_CONFIG_PATH="$pcdir" PKG_CONFIG_SYSROOT_DIR="$tmp"
flags=$(pkg-config --cflags --libs twheel)
echo "pkg-config: $flags"
${CC:-cc} -std=c11 -Wall -Werror -o "$tmp/consumer" "$src" $flags
libdir=$(pkg-config --libs-only-L twheel | sed 's/^ *-L//; s/ *$//')
out=$(LD_LIBRARY_PATH="$libdir" "$tmp/consumer")
echo "$out"
# pkg-config, the headers and the library agree on the version
echo "$out" | grep -qx "consumer: version $(pkg-config --modversion twheel)" ||
  { echo "version differs from pkg-config's $(pkg-config --modversion twheel)"; exit 1; }
# the SONAME is versioned
readelf -d "$libdir/libtwheel.so" | grep -q 'SONAME.*libtwheel\.so\.0'
echo "ok: installed, found by pkg-config, SONAME libtwheel.so.0"
