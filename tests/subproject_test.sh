#!/bin/sh
# Builds a small meson project that takes twheel as a subproject (this
# source tree, linked under its subprojects/), as a project that vendors
# it or fetches it with a wrap file would, and asks for it with
# dependency('twheel'): the shared library by default, the archive with
# `static: true`, each at exactly this version. Both programs must run,
# and the static one must not load libtwheel.so.
# usage: subproject_test.sh MESON SOURCE_ROOT CONSUMER_C VERSION
set -eu
meson="$1"; src="$2"; consumer="$3"; version="$4"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/parent/subprojects"
ln -s "$src" "$tmp/parent/subprojects/twheel"
cp "$consumer" "$tmp/parent/consumer.c"
cat > "$tmp/parent/meson.build" <<MESON
project('consumer', 'c', default_options: ['c_std=c11', 'warning_level=3', 'werror=true'])
opts = ['tests=disabled', 'benchmarks=false', 'fuzzer=disabled']
tw = dependency('twheel', version: '== $version', fallback: 'twheel', default_options: opts)
tws = dependency('twheel', version: '== $version', static: true, fallback: 'twheel',
                 default_options: opts)
executable('consumer', 'consumer.c', dependencies: tw)
executable('consumer-static', 'consumer.c', dependencies: tws)
MESON
# --force-fallback-for: an installed twheel must not answer instead. A
# subproject that does not answer dependency('twheel'), or at another
# version, fails this setup (both required).
"$meson" setup "$tmp/build" "$tmp/parent" --force-fallback-for=twheel > "$tmp/setup.log" 2>&1 ||
  { cat "$tmp/setup.log"; exit 1; }
"$meson" compile -C "$tmp/build" > "$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; exit 1; }
for prog in consumer consumer-static; do
  out=$("$tmp/build/$prog")
  echo "$prog: $(echo "$out" | tail -n 1)"
  echo "$out" | grep -q "a threaded timer fired 1" || { echo "$out"; echo "$prog failed"; exit 1; }
done
readelf -d "$tmp/build/consumer" | grep -q 'NEEDED.*libtwheel\.so' ||
  { echo "the default dependency did not link libtwheel.so"; exit 1; }
if readelf -d "$tmp/build/consumer-static" | grep -q 'NEEDED.*libtwheel'; then
  echo "the static dependency still needs libtwheel.so"; exit 1
fi
echo "ok: dependency('twheel') from the subproject, shared and static, version $version"
