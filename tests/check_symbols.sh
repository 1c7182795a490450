#!/bin/sh
# check_symbols.sh NM LIB [ARCHIVE [MAP INCDIR VERSIONED [READELF]]]
#
# Fails if the shared library exports any symbol not starting with tw_, or
# any internal one (tw__); and if the static archive defines a global
# symbol outside tw_ (internal ones are tw__ there: a program linked
# statically sees them, so they keep the prefix and cannot clash with its
# own names). Names starting with __ are the compiler's (i386 pc thunks,
# ASan's ODR indicators) and are let through.
#
# Given the version script (MAP, src/twheel.map) and the headers' directory,
# also fails unless three lists name the same functions: the headers'
# TW_API declarations, the map's, and the library's exports; and, when the
# library was linked with the map (VERSIONED 1), unless each export carries,
# as its default version, the node of the map that lists it, and nothing
# else is versioned. So a function declared but left out of the map (the
# map would hide it), or moved to another node (a program linked against it
# would no longer load: abi_test.sh says so too), fails here.
#
# Given READELF (the library was linked with -Bsymbolic-functions), also
# fails if a dynamic relocation names a tw_ function: the library's calls
# to its own exports would go through the PLT (or, built with -fno-plt,
# the GOT), which meson.build says why they must not.
nm="$1"; lib="$2"; archive="${3:-}"; map="${4:-}"; incdir="${5:-}"; versioned="${6:-0}"
readelf="${7:-}"
# The checks run in a subshell (each `exit` ends it), and the temporary
# directory goes after it: not from a trap, since the valgrind test setup
# runs this script under memcheck, which counts dash's copy of a trap's
# command as a leak.
tmp=$(mktemp -d) || exit 1
(

# name@@VERSION (or name@VERSION, or name) of each defined dynamic symbol;
# the version nodes themselves are absolute symbols named after the node
"$nm" -D --defined-only "$lib" | awk '$2 != "A" {print $NF}' | sort > "$tmp/dyn"
sed 's/@.*//' "$tmp/dyn" | sort -u > "$tmp/names"
bad=$(grep -v '^tw_' "$tmp/names" || true)
bad="$bad$(grep '^tw__' "$tmp/names" || true)"
count=$(grep -c '^tw_[^_]' "$tmp/names")
if [ -n "$bad" ]; then
  echo "internal or non-tw_ symbols exported:"; echo "$bad"; exit 1
fi
[ "$count" -ge 20 ] || { echo "only $count tw_ symbols exported"; exit 1; }
if [ -n "$archive" ]; then
  abad=$("$nm" -g --defined-only "$archive" | awk 'NF==3{print $3}' |
         grep -v '^tw_' | grep -v '^__' | sort -u || true)
  if [ -n "$abad" ]; then
    echo "global symbols outside tw_ in $archive:"; echo "$abad"; exit 1
  fi
  acount=$("$nm" -g --defined-only "$archive" | awk 'NF==3{print $3}' | grep -c '^tw__')
  echo "ok: $archive defines only tw_ globals ($acount internal tw__ ones)"
fi
echo "ok: $count tw_ symbols, nothing else"
if [ -n "$readelf" ]; then
  "$readelf" -rW "$lib" > "$tmp/relocs" || { echo "$readelf -r $lib failed"; exit 1; }
  # "offset info type value name": every symbol a relocation names
  awk '$3 ~ /^R_/ && NF >= 5 {print $5}' "$tmp/relocs" | sed 's/@.*//' > "$tmp/relnames"
  grep -q '^pthread_mutex_lock$' "$tmp/relnames" ||
    { echo "no relocation names pthread_mutex_lock in $lib: is readelf's output as expected?"; exit 1; }
  self=$(grep '^tw_' "$tmp/relnames" | sort -u || true)
  if [ -n "$self" ]; then
    echo "the library calls its own functions through the PLT or the GOT:"; echo "$self"; exit 1
  fi
  echo "ok: no relocation names a tw_ function (-Bsymbolic-functions)"
fi
[ -n "$map" ] || exit 0

# the map's functions, each with its node: "name NODE". Comments dropped,
# then one token a line: NODE { global: name; ... local: *; } [PARENT] ;
awk '{ while (match($0, /\/\*/)) {
         pre = substr($0, 1, RSTART - 1); rest = substr($0, RSTART + 2)
         while (!match(rest, /\*\//)) { if ((getline rest) <= 0) { rest = ""; break } }
         $0 = pre " " substr(rest, RSTART + 2) }
       print }' "$map" | sed 's/[{};]/ & /g' | tr -s ' \t' '\n\n' | awk '
  $0 == "" { next }
  depth == 0 && $0 == "{" { depth = 1; node = prev; sect = "global:"; next }
  depth == 1 && $0 == "}" { depth = 0; next }
  depth == 1 && ($0 == "global:" || $0 == "local:") { sect = $0; next }
  depth == 1 && sect == "global:" && /^tw_[a-z0-9_]+$/ { print $0, node }
  { prev = $0 }
' | sort > "$tmp/map"
cut -d' ' -f1 "$tmp/map" > "$tmp/mapnames"
[ -s "$tmp/mapnames" ] || { echo "no function found in $map"; exit 1; }
dups=$(uniq -d "$tmp/mapnames")
[ -z "$dups" ] || { echo "listed twice in $map:"; echo "$dups"; exit 1; }

cat "$incdir"/*.h | grep -o 'TW_API[^(]*[ *]tw_[a-z0-9_]*(' |
  sed 's/.*[ *]\(tw_[a-z0-9_]*\)($/\1/' | sort -u > "$tmp/header"
[ -s "$tmp/header" ] || { echo "no TW_API function found in $incdir"; exit 1; }

if ! cmp -s "$tmp/header" "$tmp/mapnames"; then
  echo "the headers' TW_API functions (<) and $map's (>) differ:"
  diff "$tmp/header" "$tmp/mapnames" | grep '^[<>]'
  echo "a new function goes into a new node of the map (its comment says how)"
  exit 1
fi
if ! cmp -s "$tmp/header" "$tmp/names"; then
  echo "the headers' TW_API functions (<) and $lib's exports (>) differ:"
  diff "$tmp/header" "$tmp/names" | grep '^[<>]'
  exit 1
fi
echo "ok: the headers, $(basename "$map") and the exports name the same $count functions"

if [ "$versioned" = 1 ]; then
  awk '{print $1 "@@" $2}' "$tmp/map" | sort > "$tmp/want"
  if ! cmp -s "$tmp/want" "$tmp/dyn"; then
    echo "exports (>) not at the versions $map gives them (<):"
    diff "$tmp/want" "$tmp/dyn" | grep '^[<>]'
    exit 1
  fi
  nodes=$(cut -d' ' -f2 "$tmp/map" | sort -u | tr '\n' ' ')
  echo "ok: every export at its node's version ($nodes)"
else
  if grep -q @ "$tmp/dyn"; then
    echo "$lib has symbol versions, but the build says it was linked without the map"
    exit 1
  fi
  echo "skipped: the linker took no version script, so the exports carry no versions"
fi
)
rc=$?
rm -rf "$tmp"
exit $rc
