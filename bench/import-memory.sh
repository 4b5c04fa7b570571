#!/usr/bin/env bash
# bench/import-memory.sh: peak memory (max RSS) of importing a ROWS-row Azure-format CSV
# (default 5,000,000) with the built binary, measured by GNU time (/usr/bin/time -v).
# The budget is 200 MB (BUDGET_MB); the script exits 1 when the import goes over it.
#   bench/import-memory.sh            # 5M rows
#   ROWS=20000000 bench/import-memory.sh
set -euo pipefail
cd "$(dirname "$0")/.."
rows=${ROWS:-5000000}
budget_mb=${BUDGET_MB:-200}
runs=${RUNS:-3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if [ ! -x /usr/bin/time ]; then
  echo "bench/import-memory.sh: needs GNU time (/usr/bin/time; Debian package 'time')" >&2
  exit 2
fi
go build -o "$tmp/llmreplay" ./cmd/llmreplay

# Azure 2023 form, CRLF, 7 fractional digits; one row every 700 µs from 18:00:00, so
# 5M rows span 3,500 s; lengths cycle through realistic ranges.
awk -v n="$rows" 'BEGIN {
  printf "TIMESTAMP,ContextTokens,GeneratedTokens\r\n"
  for (i = 0; i < n; i++) {
    tick = i * 7000                       # 100 ns ticks
    s = int(tick / 10000000); f = tick % 10000000
    h = 18 + int(s / 3600); m = int((s % 3600) / 60); sec = s % 60
    printf "2023-11-16 %02d:%02d:%02d.%07d,%d,%d\r\n", h, m, sec, f, 1 + (i * 31) % 7437, 1 + (i * 17) % 1899
  }
}' > "$tmp/in.csv"
echo "input: $rows rows, $(du -m "$tmp/in.csv" | cut -f1) MB"

for i in $(seq "$runs"); do
  /usr/bin/time -v "$tmp/llmreplay" trace import --from azure "$tmp/in.csv" -o "$tmp/out.parquet" \
    > "$tmp/stdout" 2> "$tmp/time"
  kb=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$tmp/time")
  wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' "$tmp/time")
  echo "run $i: max RSS $((kb / 1024)) MB, wall $wall; $(cat "$tmp/stdout")"
  if [ "$kb" -ge $((budget_mb * 1024)) ]; then
    echo "FAIL: max RSS $((kb / 1024)) MB >= budget $budget_mb MB" >&2
    exit 1
  fi
done
echo "output: $(du -m "$tmp/out.parquet" | cut -f1) MB; max RSS within $budget_mb MB"
