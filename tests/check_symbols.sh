#!/bin/sh
# Fails if the shared library exports any symbol not starting with tw_, or
# any internal one (tw__).
nm="$1"; lib="$2"
bad=$("$nm" -D --defined-only "$lib" | awk '{print $NF}' | grep -v '^tw_' || true)
bad="$bad$("$nm" -D --defined-only "$lib" | awk '{print $NF}' | grep '^tw__' || true)"
count=$("$nm" -D --defined-only "$lib" | awk '{print $NF}' | grep -c '^tw_[^_]')
if [ -n "$bad" ]; then
  echo "internal or non-tw_ symbols exported:"; echo "$bad"; exit 1
fi
[ "$count" -ge 20 ] || { echo "only $count tw_ symbols exported"; exit 1; }
echo "ok: $count tw_ symbols, nothing else"
