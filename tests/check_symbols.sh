#!/bin/sh
# Fails if the shared library exports any symbol not starting with tw_.
nm="$1"; lib="$2"
bad=$("$nm" -D --defined-only "$lib" | awk '{print $NF}' | grep -v '^tw_' || true)
count=$("$nm" -D --defined-only "$lib" | awk '{print $NF}' | grep -c '^tw_')
if [ -n "$bad" ]; then
  echo "non-tw_ symbols exported:"; echo "$bad"; exit 1
fi
[ "$count" -ge 20 ] || { echo "only $count tw_ symbols exported"; exit 1; }
echo "ok: $count tw_ symbols, nothing else"
