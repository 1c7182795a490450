#!/bin/sh
# Keeps the SONAME honest: the shared library's ABI (its exported
# functions, and every type they reach that include/ defines: struct
# tw_options, tw_stats, tw_allocator, the purgatory's structs, the
# callback types) must be the one recorded for its SONAME in
# tests/abi/SONAME.ARCH.abi. libabigail's abidw reads it from the
# library's debugging information; abidiff compares it with the record.
#
#   abi_test.sh LIB INCLUDE_DIR ABI_DIR          check (the abi test)
#   abi_test.sh LIB INCLUDE_DIR ABI_DIR write    (re)write the record
#
# Any difference fails, a compatible one too (a function added): abidiff
# cannot tell a field added to a caller-allocated struct, which breaks
# every program built before it, from a harmless addition, so a person
# decides. The fix is one of two: the change is compatible (a new
# function), and the record is rewritten, or it is not, and meson.build's
# twheel_soversion goes up, which asks for a new record. What the debugging
# information does not hold is not checked: the values of the headers'
# macros (TW_FIXED_RATE, ...) and what the functions do.
# Skipped (exit 77, saying why) where libabigail is not installed or no
# record exists for this architecture (only x86_64's is kept).
set -eu
lib="$1"; inc="$2"; dir="$3"; mode="${4:-check}"
for p in abidw abidiff; do
  command -v "$p" >/dev/null 2>&1 ||
    { echo "skipped: $p not found (Debian: apt-get install abigail-tools)"; exit 77; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The build directories' paths are left out of the record (a comparison
# does not read them), and each file's path is made relative to the tree.
abidw --headers-dir "$inc" --drop-private-types --no-corpus-path --no-show-locs \
  --type-id-style hash "$lib" |
  sed "s/ comp-dir-path='[^']*'//; s| path='[^']*/src/| path='src/|" > "$tmp/now.abi"
attr() { sed -n "1s/.* $1='\([^']*\)'.*/\1/p" "$tmp/now.abi"; }
soname=$(attr soname); arch=$(attr architecture)
[ -n "$soname" ] && [ -n "$arch" ] || { echo "abidw wrote no SONAME or architecture for $lib"; exit 1; }
grep -q "<function-decl name='tw_create'" "$tmp/now.abi" ||
  { echo "abidw found no types for tw_create: is $lib built without -g?"; exit 1; }
record="$dir/$soname.$arch.abi"

if [ "$mode" = write ]; then
  cp "$tmp/now.abi" "$record"
  echo "wrote $record"
  exit 0
fi

if [ ! -f "$record" ]; then
  if ls "$dir"/*."$arch".abi >/dev/null 2>&1; then
    echo "no ABI record for $soname on $arch, but one for another SONAME:"
    ls "$dir"/*."$arch".abi
    echo "a new SONAME starts a new record: $0 $lib $inc $dir write"
    exit 1
  fi
  echo "skipped: no ABI record for $arch (tests/abi keeps x86_64's)"
  exit 77
fi

rc=0
abidiff --no-show-locs "$record" "$tmp/now.abi" > "$tmp/diff" || rc=$?
if [ "$rc" -ne 0 ]; then
  cat "$tmp/diff"
  if [ $((rc & 3)) -ne 0 ]; then
    echo "abidiff failed (exit $rc)"
  elif [ $((rc & 8)) -ne 0 ]; then
    echo "an incompatible ABI change under the SONAME $soname (exit $rc):"
    echo "raise twheel_soversion in meson.build, then write the new record:"
    echo "  $0 $lib $inc $dir write"
  else
    echo "the ABI of $soname changed (exit $rc). If only functions were added,"
    echo "write the record again; if a struct or a signature changed, raise"
    echo "twheel_soversion in meson.build first (README, \"API\"):"
    echo "  $0 $lib $inc $dir write"
  fi
  exit 1
fi
echo "ok: the ABI of $soname ($arch) is the one recorded in $record"
