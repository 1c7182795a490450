#!/bin/sh
# Instructions per W1 pair, counted by callgrind: a figure that machine
# noise does not move. N = 10^4 pending timers, 10^5 (cancel + add) pairs;
# only the timed loop (w1_loop) is counted, prefill excluded.
#
#   benchmarks/callgrind.sh [path/to/twheel-bench]
#
# "loop" is everything per pair: the benchmark's loop and its calls through
# the back-end table (~25 instructions, the same for every back end) plus
# the back end's add and cancel. For twheel, "library" is tw_schedule +
# tw_cancel alone (twheel-thr: the threaded API, its shard lock and clock
# read included); for the intrusive model (benchmarks/intrusive.c),
# it_schedule + it_cancel, its loop figure including the free list that
# stands in for the caller's own objects. "floor" is the bare-list loop
# of benchmarks/floor.c (no library, no call per pair: everything is
# inline), and "floor+nops" the same with the no-ops twheel-bench's floor
# row adds to each pair.
set -eu
bench=${1:-build/benchmarks/twheel-bench}
pairs=100000
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '%-12s %16s %16s\n' backend "loop instr/pair" "library/pair"
for be in twheel twheel-thr heap heap-inline hashed intrusive; do
  out="$tmp/cg.$be"
  valgrind --tool=callgrind --toggle-collect=w1_loop --callgrind-out-file="$out" \
    "$bench" --callgrind 10000 --backends "$be" >/dev/null 2>&1
  total=$(callgrind_annotate "$out" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
  lib="-"
  pat=
  case $be in
  twheel|twheel-thr) pat='src\/timer.c:tw_(schedule|cancel)' ;;
  intrusive) pat='benchmarks\/intrusive.c:it_(schedule|cancel)' ;;
  esac
  if [ -n "$pat" ]; then
    # Each function's inclusive count, from its own line (not the "=>"
    # lines of its callers). callgrind_annotate names a function by a path
    # relative to the current directory, with its object in brackets after
    # it or not, and may list one function twice under two such names
    # (one of them not inclusive of everything): the largest count is it.
    lib=$(callgrind_annotate --inclusive=yes "$out" 2>/dev/null |
      awk '!/=>/ && match($0, /'"$pat"'( \[[^]]*\])?$/) {
             f = substr($0, RSTART, RLENGTH); sub(/ \[.*/, "", f)
             gsub(",", "", $1); if ($1 + 0 > m[f]) m[f] = $1 + 0 }
           END { for (f in m) s += m[f]; printf "%.0f", s / '"$pairs"' }')
  fi
  printf '%-12s %16s %16s\n' "$be" "$(awk "BEGIN {printf \"%.0f\", $total / $pairs}")" "$lib"
done
for fl in floor floor+nops; do
  fn=floor_loop_eager
  [ "$fl" = floor+nops ] && fn=floor_loop_eager_pad
  out="$tmp/cg.$fl"
  valgrind --tool=callgrind --toggle-collect="$fn" --callgrind-out-file="$out" \
    "$bench" --callgrind 10000 --backends floor >/dev/null 2>&1
  total=$(callgrind_annotate "$out" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
  printf '%-12s %16s %16s\n' "$fl" "$(awk "BEGIN {printf \"%.0f\", $total / $pairs}")" "-"
done
