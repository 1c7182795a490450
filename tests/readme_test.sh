#!/bin/sh
# Keeps the README true to the code:
#  1. every tw_ / TW_ name it (and tests/README.md) mentions is declared
#     in include/, and it names every function twheel.h exports;
#  2. its options table lists exactly the members of struct tw_options, and
#     its build options table exactly the options of meson_options.txt;
#  3. the fuzz corpora hold as many inputs as it (and tests/README.md)
#     says;
#  4. every ```c block compiles against the headers with -Wall -Wextra
#     -Werror, so a renamed call, a changed argument list or a wrong type
#     in an example fails here.
# A block mixes file-scope code (#include, functions) with statements. The
# statements start at the first line, outside braces, that is not blank,
# a preprocessor line, a static definition or a comment; they are compiled
# as the body of a function. The names the examples leave to the reader
# (request_fail, monotonic_ns, req, conn_idle_id, ...) are stubbed below.
# usage: readme_test.sh CC README INCLUDE_DIR [MESON_OPTIONS_TXT [DOC...]]
# Each further DOC (tests/README.md) gets the first check's first half
# (every tw_ / TW_ name it mentions must be declared in include/) and the
# third (the corpus sizes it gives, in its own form ": N inputs").
set -eu
cc="$1"; readme="$2"; incdir="$3"; mopts="${4:-}"
shift 3
if [ $# -gt 0 ]; then shift; fi # what is left: the further DOCs
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

# 1. the names, both ways (the prefixes alone, and the environment
# variables of the tests and the mutation check, are not declared names)
for doc in "$readme" "$@"; do
  grep -o '\b[tT][wW]_[A-Za-z0-9_]*' "$doc" | sort -u |
    grep -v -x -e 'tw_' -e 'tw__' -e 'TW_' -e 'TW_TEST_SLOW' -e 'TW_MUTANT_TIMEOUT' \
      -e 'TW_MUTANT_FILES' -e 'TW_MUTANT_SETUP' -e 'TW_MUTANT_LINES' -e 'TW_MUTANT_SKIP' \
      -e 'TW_TEST_CLOCK' -e 'TW_MODEL_SEEDS' > "$tmp/names.doc" || true
  for n in $(cat "$tmp/names.doc"); do
    if ! grep -q -w -- "$n" "$incdir"/*.h; then
      echo "${doc#"$(dirname "$readme")/"} names $n, which no header declares"
      fail=1
    fi
  done
  if [ "$doc" = "$readme" ]; then cp "$tmp/names.doc" "$tmp/names"; fi
done
echo "names: $(wc -l < "$tmp/names") tw_/TW_ names in the README, checked against the headers"

# the other way: every function twheel.h exports is in the README
grep -o 'TW_API[^(]*[ *]tw_[a-z0-9_]*(' "$incdir/twheel.h" |
  sed 's/.*[ *]\(tw_[a-z0-9_]*\)(/\1/' | sort -u > "$tmp/api"
[ -s "$tmp/api" ] || { echo "no TW_API function found in twheel.h"; exit 1; }
for n in $(cat "$tmp/api"); do
  grep -q -w -- "$n" "$readme" || { echo "twheel.h exports $n, which the README never names"; fail=1; }
done
echo "api: the README names all $(wc -l < "$tmp/api") functions of twheel.h"

# the first column (backquoted names) of the first table after the README
# line that starts with $1
table_names() {
  awk -v h="$1" '
    index($0, h) == 1 { on = 1; next }
    on && /^\|/ { rows = 1; if ($0 ~ /^\| `/) { split($0, c, "|"); print c[2] }; next }
    on && rows { exit }
  ' "$readme" | grep -o '`[a-z_0-9]*`' | tr -d '`' | sort -u
}
# both ways: the lists $2 and $3 (files) hold the same names
same_names() {
  what="$1"
  for n in $(comm -23 "$2" "$3"); do echo "$what: $n is in the code, not in the README's table"; fail=1; done
  for n in $(comm -13 "$2" "$3"); do echo "$what: the README's table has $n, which the code has not"; fail=1; done
  echo "$what: $(wc -l < "$2") in the code, $(wc -l < "$3") in the README's table"
}

# 2. struct tw_options's members and the README's Options table
# (the struct's text with its comments removed, one declaration a line)
awk '/^struct tw_options \{/ { on = 1; next } on && /^\};/ { on = 0 }
     on { body = body " " $0 }
     END { gsub(/\/\*([^*]|\*+[^*\/])*\*+\//, "", body); gsub(/;/, ";\n", body); printf "%s", body }' \
    "$incdir/twheel.h" | grep ';' |
  sed 's/.*(\*\([a-z_0-9]*\)).*/\1/; s/.*[ *]\([a-z_0-9]*\);.*/\1/' | sort -u > "$tmp/fields"
[ -s "$tmp/fields" ] || { echo "no member of struct tw_options found in twheel.h"; exit 1; }
table_names '### Options (`struct tw_options`)' > "$tmp/fields.md"
same_names "struct tw_options" "$tmp/fields" "$tmp/fields.md"

# meson_options.txt and the README's build options table
if [ -n "$mopts" ]; then
  sed -n "s/^option('\([a-z_0-9]*\)'.*/\1/p" "$mopts" | sort -u > "$tmp/mopts"
  table_names 'Build options' > "$tmp/mopts.md"
  same_names "meson options" "$tmp/mopts" "$tmp/mopts.md"
fi

# 3. the fuzz corpora's sizes: each `tests/DIR/` the README follows with
# "(N inputs)", and each a further DOC follows with ": N inputs" (a line
# break between words reads as a space), must hold N files, so that a
# corpus that grows or shrinks cannot leave a figure behind. Each
# document must give at least one.
srcdir=$(dirname "$readme")
for doc in "$readme" "$@"; do
  tr '\n' ' ' < "$doc" |
    grep -o '`tests/fuzz_corpus[a-z_]*/`\( *( *\|: *\)[0-9][0-9]* inputs' |
    sed 's/`tests\/\([a-z_]*\)\/`[ (:]*\([0-9]*\) inputs/\1 \2/' > "$tmp/corpora"
  name=${doc#"$srcdir"/}
  [ -s "$tmp/corpora" ] || { echo "$name gives no corpus's size (\`tests/fuzz_corpus.../\` (N inputs) or : N inputs)"; fail=1; }
  while read -r dir n; do
    have=$(find "$srcdir/tests/$dir" -maxdepth 1 -type f | wc -l)
    if [ "$have" -ne "$n" ]; then
      echo "$name says tests/$dir/ holds $n inputs; it holds $have"
      fail=1
    else
      echo "corpus: tests/$dir/ holds $n inputs, as $name says"
    fi
  done < "$tmp/corpora"
done

# 4. the C blocks, one file each: file-scope part, then the statements
awk -v dir="$tmp" '
  /^```c[ \t]*$/ { n++; inblk = 1; stmts = 0; depth = 0
                   f = dir "/block" n; print "" > (f ".top"); print "" > (f ".body")
                   next }
  /^```/         { if (inblk) { close(f ".top"); close(f ".body") } inblk = 0; next }
  inblk {
    if (!stmts && depth == 0 && $0 !~ /^([ \t]*$|#|static |[{}]|\/\*|\/\/)/) stmts = 1
    if (stmts) print > (f ".body"); else print > (f ".top")
    line = $0; sub(/\/\*.*\*\//, "", line)
    depth += gsub(/{/, "{", line) - gsub(/}/, "}", line)
  }
  END { print n + 0 > (dir "/count") }
' "$readme"

blocks=$(cat "$tmp/count")
[ "$blocks" -gt 0 ] || { echo "no \`\`\`c block found in $readme"; exit 1; }

cat > "$tmp/prelude.h" <<'EOF'
/* what the README's examples leave to the reader */
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <twheel.h>
#include <twheel_purgatory.h>
struct request { int id; };
struct produce { int acks; };
static void request_fail(struct request *r, const char *why) { (void)r; (void)why; }
static uint64_t monotonic_ns(void) { return 0; }
static struct pollfd fds[1];
static nfds_t nfds = 1;
static struct request *req;
static tw_id conn_idle_id;
static bool replicas_caught_up(struct produce *p) { return p->acks > 0; }
static void send_response(struct produce *p) { (void)p; }
static void count_timeout(struct produce *p) { (void)p; }
static void give_back(tw_timer *t, tw_id id, void *arg) { (void)t; (void)id; (void)arg; }
EOF

i=1
while [ "$i" -le "$blocks" ]; do
  b="$tmp/block$i"
  {
    echo '#include "prelude.h"'
    cat "$b.top"
    echo "void readme_example_$i(void);"
    echo "void readme_example_$i(void)"
    echo "{"
    cat "$b.body"
    echo "}"
  } > "$b.c"
  if $cc -std=c11 -Wall -Wextra -Werror -Wno-unused-function -Wno-unused-variable -Wno-unused-parameter \
      -I"$incdir" -I"$tmp" -fsyntax-only "$b.c" 2> "$b.err"; then
    echo "block $i: compiles"
  else
    echo "block $i of $readme does not compile:"
    cat -n "$b.c"
    cat "$b.err"
    fail=1
  fi
  i=$((i + 1))
done
exit "$fail"
