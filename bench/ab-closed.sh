#!/usr/bin/env bash
# bench/ab-closed.sh OLD NEW: the closed loop's first wave with two llmreplay binaries,
# alternating run by run. Each run is `replay --concurrency C --limit 2C` of a trace of
# 256-token prompts and 64-token outputs against the in-process simulated engine (no
# --endpoint; profile PROFILE), and prints bench/closedwave's line: when the C-th request
# went out (the first wave's send duration), lateness p99 of every request and of those
# after the first wave. Medians per binary and C at the end. Loopback only.
#   CS="256 1024"   PROFILE=moe-230b-8gpu   RUNS=5   OUTPUT=64
set -euo pipefail
[ $# = 2 ] || { echo "usage: bench/ab-closed.sh OLD-llmreplay NEW-llmreplay" >&2; exit 2; }
a=$1 b=$2 runs=${RUNS:-5} profile=${PROFILE:-moe-230b-8gpu} cs=${CS:-256 1024} out=${OUTPUT:-64}
here=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$here" && go build -o "$tmp/closedwave" ./bench/closedwave)
"$b" trace synth --arrival constant --rate 100 --count 4096 --prompt-tokens fixed:256 \
  --output-tokens "fixed:$out" --seed 1 -o "$tmp/trace.parquet" >/dev/null
for c in $cs; do
  for i in $(seq "$runs"); do
    for v in A B; do
      bin=$a; [ $v = B ] && bin=$b
      rm -f "$tmp/r.parquet"
      rm -f "$tmp/r.parquet"  # a run never replaces another: each starts on a free name
      "$bin" replay --trace "$tmp/trace.parquet" --sim-profile "$profile" --concurrency "$c" \
        --limit $((2 * c)) -q -o "$tmp/r.parquet" >/dev/null 2>"$tmp/err" || { cat "$tmp/err" >&2; exit 1; }
      echo "$v run $i $("$tmp/closedwave" "$tmp/r.parquet")" | tee -a "$tmp/lines"
    done
  done
done
# Medians: fields are "V run I C N: S sent, wave W ms, lateness p99 L ms, after the wave p99 T ms".
med() { sort -g | awk '{ x[NR] = $1 } END { printf "%.3f", NR % 2 ? x[(NR + 1) / 2] : (x[NR / 2] + x[NR / 2 + 1]) / 2 }'; }
for c in $cs; do
  for v in A B; do
    grep "^$v run [0-9]* C $c:" "$tmp/lines" >"$tmp/sel"
    echo "$v C $c: median wave $(awk '{print $9}' "$tmp/sel" | med) ms, lateness p99 $(awk '{print $13}' "$tmp/sel" | med) ms," \
      "after the wave p99 $(awk '{print $19}' "$tmp/sel" | med) ms ($(wc -l <"$tmp/sel") runs)"
  done
done
