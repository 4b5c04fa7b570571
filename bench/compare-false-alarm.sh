#!/usr/bin/env bash
# bench/compare-false-alarm.sh [LLMREPLAY]: how often `llmreplay compare` calls a change
# significant when there is none. PAIRS (default 40) pairs of runs of ONE synthetic trace
# against the same in-process simulated engine (profile tiny, loopback only), each run with
# its own --seed (fresh prompts, so no prefix cache carries over), run one after the other;
# each pair is compared (--json), and the script prints, per figure, in how many pairs its
# 95% interval excluded zero. The interval's promise is about 5% or fewer.
# Each run lasts about DURATION (default 8s) plus its drain: ~15 min for 40 pairs.
#   PAIRS=40  DURATION=8s  RATE=8  KEEP=1 (keep the runs in ./false-alarm-runs)
#   RUNS=DIR: compare the runs kept in DIR again (another build of compare), no replay
set -euo pipefail
bin=${1:-}
if [ -z "$bin" ]; then
  bin=$(mktemp -d)/llmreplay
  go build -o "$bin" ./cmd/llmreplay
fi
pairs=${PAIRS:-40} duration=${DURATION:-8s} rate=${RATE:-8}
tmp=$(mktemp -d)
if [ -n "${RUNS:-}" ]; then tmp=$RUNS; elif [ -n "${KEEP:-}" ]; then tmp=./false-alarm-runs; mkdir -p "$tmp"; else trap 'rm -rf "$tmp"' EXIT; fi
[ -n "${RUNS:-}" ] || "$bin" trace synth --arrival poisson --rate "$rate" --duration "$duration" --prompt-tokens uniform:100,400 \
  --output-tokens uniform:50,200 --seed 1 -o "$tmp/trace.parquet" >/dev/null
echo "trace: poisson $rate req/s for $duration; $pairs pairs against the in-process sim (tiny); $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for k in $(seq "$pairs"); do
  for s in 1 2; do
    [ -n "${RUNS:-}" ] && continue
    "$bin" replay --trace "$tmp/trace.parquet" --sim-profile tiny --seed $((2 * k - 2 + s)) -q \
      -o "$tmp/pair$k-$s.parquet" >/dev/null 2>>"$tmp/replay.log"
  done
  "$bin" compare "$tmp/pair$k-1.parquet" "$tmp/pair$k-2.parquet" --json >"$tmp/pair$k.json"
  echo "pair $k/$pairs: $(jq -r '[.sections[0].figures[] | select(.changes[0].significant) | .key] | if length == 0 then "no figure significant" else "significant: " + join(", ") end' "$tmp/pair$k.json")" \
    "$(jq -r '[.sections[0].runs[] | select(.client_limited) | .label] | if length > 0 then "(client-limited: " + join(",") + ")" else "" end' "$tmp/pair$k.json")" >&2
done
echo
printf '%-32s %12s %8s\n' figure significant rate
jq -s -r '
  [.[] | .sections[0].figures[]] | group_by(.key) |
  sort_by(.[0].key) | .[] |
  "\(.[0].key)\t\([.[] | select(.changes[0].significant)] | length)\t\(length)"' "$tmp"/pair*.json |
while IFS=$'\t' read -r key sig n; do
  printf '%-32s %7s / %-3s %7.1f%%\n' "$key" "$sig" "$n" "$(echo "100 * $sig / $n" | bc -l)"
done
jq -s -r '"pairs with a client-limited run: \([.[] | select(any(.sections[0].runs[]; .client_limited))] | length) of \(length)"' "$tmp"/pair*.json
