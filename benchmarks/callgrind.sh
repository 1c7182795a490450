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
#
# Then cache misses per W1 pair at N = 10^6, from callgrind's cache
# simulation (--cache-sim=yes): 64-byte lines, a 48 KiB 12-way L1 data
# cache, and a last level of 2 MiB (about an L2, what a pair's random
# lines miss at 10^6 on any host) and of 32 MiB (an L3 slice), 16-way.
# Machine noise does not move these; where the program's memory lands
# does a little (within 0.02 a pair from run to run). They leave out what
# a real CPU adds (the TLB, its prefetchers, and how many misses it
# overlaps), so they say how much memory traffic a design makes, not how
# long it waits. About 1.1 of each back end's figure is the
# benchmark's own read of its handle array, the same for all.
#
# Last, W2 on a simulated clock at N = 10^6 (twheel-bench --callgrind-w2:
# 10^6 adds with delays in [0, 2 s], then an advance every simulated 1 ms
# until all have fired): instructions and misses per timer, its add, its
# firing (the benchmark's callback counts it) and its share of ~2,000
# advances, with the same cache. No sleep is counted: W2's own rows add
# the host's wake-ups, which cost what the host charges.
set -eu
bench=${1:-build/benchmarks/twheel-bench}
# Every figure is checked before it is printed: a benchmark or valgrind
# that changed under the script (a function renamed, an output format
# moved) makes it fail, not print a blank or a zero (CI runs it).
fail() {
  echo "callgrind.sh: $*" >&2
  exit 1
}
need() {
  case $2 in
  '' | *[!0-9.]* | *.*.* | . | 0 | 0.0 | 0.00) fail "no figure for $1 (got '$2')" ;;
  esac
}
pairs=100000
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '%-12s %16s %16s\n' backend "loop instr/pair" "library/pair"
for be in twheel twheel-thr heap heap-inline hashed intrusive; do
  out="$tmp/cg.$be"
  valgrind --tool=callgrind --toggle-collect=w1_loop --callgrind-out-file="$out" \
    "$bench" --callgrind 10000 --backends "$be" >/dev/null 2>&1 || fail "valgrind on $be"
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
  need "$be instructions" "$total"
  [ -z "$pat" ] || need "$be library instructions" "$lib"
  printf '%-12s %16s %16s\n' "$be" "$(awk "BEGIN {printf \"%.0f\", $total / $pairs}")" "$lib"
done
for fl in floor floor+nops; do
  fn=floor_loop_eager
  [ "$fl" = floor+nops ] && fn=floor_loop_eager_pad
  out="$tmp/cg.$fl"
  valgrind --tool=callgrind --toggle-collect="$fn" --callgrind-out-file="$out" \
    "$bench" --callgrind 10000 --backends floor >/dev/null 2>&1 || fail "valgrind on $fl"
  total=$(callgrind_annotate "$out" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
  need "$fl instructions" "$total"
  printf '%-12s %16s %16s\n' "$fl" "$(awk "BEGIN {printf \"%.0f\", $total / $pairs}")" "-"
done

# The same count for W1b (twheel-bench --callgrind-w1b: bursts of 16
# cancels, then 16 adds, so that 15 adds of 16 do not follow a cancel
# and take their slots from the free list's blocks, not its spare).
printf '\ninstructions per W1b pair (bursts of 16 cancels, then 16 adds), N = 10000\n'
printf '%-12s %16s %16s\n' backend "loop instr/pair" "library/pair"
for be in twheel twheel-thr heap; do
  out="$tmp/cb.$be"
  valgrind --tool=callgrind --toggle-collect=w1b_loop --callgrind-out-file="$out" \
    "$bench" --callgrind-w1b 10000 --backends "$be" >/dev/null 2>&1 || fail "valgrind on $be (W1b)"
  total=$(callgrind_annotate "$out" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
  lib="-"
  if [ "$be" != heap ]; then
    lib=$(callgrind_annotate --inclusive=yes "$out" 2>/dev/null |
      awk '!/=>/ && match($0, /src\/timer.c:tw_(schedule|cancel)( \[[^]]*\])?$/) {
             f = substr($0, RSTART, RLENGTH); sub(/ \[.*/, "", f)
             gsub(",", "", $1); if ($1 + 0 > m[f]) m[f] = $1 + 0 }
           END { for (f in m) s += m[f]; printf "%.0f", s / '"$pairs"' }')
    need "$be W1b library instructions" "$lib"
  fi
  need "$be W1b instructions" "$total"
  printf '%-12s %16s %16s\n' "$be" "$(awk "BEGIN {printf \"%.0f\", $total / $pairs}")" "$lib"
done
# Cache misses per pair at N = 10^6: D1 misses (reads and writes), and
# last-level misses for each simulated size; for twheel and the intrusive
# model also the library's share of the 2 MiB figure (inclusive, as above).
n6=1000000
printf '\ncache misses per W1 pair, N = %d (callgrind --cache-sim, D1 48 KiB)\n' "$n6"
printf '%-12s %10s %14s %14s %14s\n' backend "D1 miss" "LL 2 MiB miss" "library/pair" "LL 32 MiB miss"
for be in twheel heap heap-inline hashed intrusive floor; do
  fn=w1_loop
  [ "$be" = floor ] && fn=floor_loop_eager
  lib="-"
  pat=
  case $be in
  twheel) pat='src\/timer.c:tw_(schedule|cancel)' ;;
  intrusive) pat='benchmarks\/intrusive.c:it_(schedule|cancel)' ;;
  esac
  for ll in 2097152 33554432; do
    out="$tmp/cm.$be.$ll"
    valgrind --tool=callgrind --cache-sim=yes --D1=49152,12,64 --LL="$ll,16,64" \
      --toggle-collect="$fn" --callgrind-out-file="$out" \
      "$bench" --callgrind "$n6" --backends "$be" >/dev/null 2>&1 || fail "valgrind on $be"
    # PROGRAM TOTALS: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw, each with
    # its percentage after it, in brackets (taken out first: "( 0.11%)"
    # holds a space).
    tot=$(callgrind_annotate "$out" 2>/dev/null | awk '/PROGRAM TOTALS/ {
            gsub(/\([^)]*\)/, ""); gsub(",", "")
            printf "%.2f %.2f", ($5 + $6) / '"$pairs"', ($8 + $9) / '"$pairs"' }')
    need "$be misses" "${tot% *}"
    need "$be misses" "${tot#* }"
    case $ll in
    2097152) d1=${tot% *} m2=${tot#* } ;;
    *) m32=${tot#* } ;;
    esac
    if [ -n "$pat" ] && [ "$ll" = 2097152 ]; then
      lib=$(callgrind_annotate --inclusive=yes --show=DLmr,DLmw "$out" 2>/dev/null |
        awk '!/=>/ && match($0, /'"$pat"'( \[[^]]*\])?$/) {
               f = substr($0, RSTART, RLENGTH); sub(/ \[.*/, "", f)
               gsub(/\([^)]*\)/, ""); gsub(",", "")
               if ($1 + $2 > m[f]) m[f] = $1 + $2 }
             END { for (f in m) s += m[f]; printf "%.2f", s / '"$pairs"' }')
      need "$be library misses" "$lib"
    fi
  done
  printf '%-12s %10s %14s %14s %14s\n' "$be" "$d1" "$m2" "$lib" "$m32"
done

# W2 on a simulated clock, per timer fired.
printf '\nW2 on a simulated clock, per timer (add + firing + advances), N = %d (callgrind)\n' "$n6"
printf '%-12s %10s %10s %14s %14s\n' backend "instr" "D1 miss" "LL 2 MiB miss" "LL 32 MiB miss"
for be in twheel heap heap-inline hashed; do
  for ll in 2097152 33554432; do
    out="$tmp/w2.$be.$ll"
    valgrind --tool=callgrind --cache-sim=yes --D1=49152,12,64 --LL="$ll,16,64" \
      --toggle-collect=w2_sim_loop --callgrind-out-file="$out" \
      "$bench" --callgrind-w2 "$n6" --backends "$be" >/dev/null 2>&1 || fail "valgrind on $be (W2)"
    tot=$(callgrind_annotate "$out" 2>/dev/null | awk '/PROGRAM TOTALS/ {
            gsub(/\([^)]*\)/, ""); gsub(",", "")
            printf "%.1f %.2f %.2f", $1 / '"$n6"', ($5 + $6) / '"$n6"', ($8 + $9) / '"$n6"' }')
    set -f
    # shellcheck disable=SC2086 # three figures, split on purpose
    set -- $tot
    set +f
    need "$be W2 instructions" "${1-}"
    need "$be W2 misses" "${2-}"
    need "$be W2 misses" "${3-}"
    case $ll in
    2097152) ir=$1 d1=$2 m2=$3 ;;
    *) m32=$3 ;;
    esac
  done
  printf '%-12s %10s %10s %14s %14s\n' "$be" "$ir" "$d1" "$m2" "$m32"
done
