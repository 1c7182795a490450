#!/bin/sh
# Fails if the shared library exports any symbol not starting with tw_, or
# any internal one (tw__); and if the static archive (optional third
# argument) defines a global symbol outside tw_ (internal ones are tw__
# there: a program linked statically sees them, so they keep the prefix
# and cannot clash with its own names). Names starting with __ are the
# compiler's (i386 pc thunks, ASan's ODR indicators) and are let through.
nm="$1"; lib="$2"; archive="${3:-}"
bad=$("$nm" -D --defined-only "$lib" | awk '{print $NF}' | grep -v '^tw_' || true)
bad="$bad$("$nm" -D --defined-only "$lib" | awk '{print $NF}' | grep '^tw__' || true)"
count=$("$nm" -D --defined-only "$lib" | awk '{print $NF}' | grep -c '^tw_[^_]')
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
