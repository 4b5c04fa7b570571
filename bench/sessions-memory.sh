#!/usr/bin/env bash
# bench/sessions-memory.sh: peak memory (max RSS, GNU time) of `llmreplay replay` against the
# in-process simulated engine, profile fixed (TTFT 100 ms, ITL 10 ms, no capacity limit; its
# memory is in the figure too) for conversations:
#   1. the bundled Mooncake sample (testdata/traces, imported with --from mooncake) at
#      --speedup 60 (it has no session_id: it replays independent; its prompts are long);
#   2. a synthetic trace of about 100,000 sessions (250,000 requests at 3000 req/s,
#      --turns uniform:2,3, 2000 open at once, 64-token new text, 16-token answers), in
#      sequential mode with actual history (the default), then independent with synthetic
#      history, for comparison.
# Loopback only; about 3 minutes on a quiet 2-core machine.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
[ -x /usr/bin/time ] || { echo "bench/sessions-memory.sh: needs GNU time (/usr/bin/time)" >&2; exit 2; }
go build -o "$tmp/llmreplay" ./cmd/llmreplay
bin=$tmp/llmreplay
"$bin" trace import --from mooncake testdata/traces/mooncake_conversation_trace.jsonl -o "$tmp/mc.parquet" >/dev/null
"$bin" trace synth --arrival poisson --rate 3000 --count 250000 --prompt-tokens fixed:64 --output-tokens fixed:16 \
  --turns uniform:2,3 --sessions 2000 --seed 1 -o "$tmp/s100k.parquet" >/dev/null
run() {
  local name=$1; shift
  rm -f "$tmp/r.parquet"  # a run never replaces another: each starts on a free name
  /usr/bin/time -v -o "$tmp/time" "$bin" replay --sim-profile fixed -q -o "$tmp/r.parquet" "$@" >"$tmp/out" 2>"$tmp/err" || { cat "$tmp/err" >&2; exit 1; }
  rss=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$tmp/time")
  wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' "$tmp/time")
  reqs=$(grep -m1 '^Requests:' "$tmp/out" || true)
  late=$(grep -m1 'schedule lateness ' "$tmp/out" | awk '{print "lateness p50", $5, "p99", $8, "ms"}' || true)
  printf '%-44s max RSS %6d MiB, wall %s; %s; %s\n' "$name" $((rss / 1024)) "$wall" "$reqs" "$late"
}
run "mooncake sample, independent, speedup 60" --trace "$tmp/mc.parquet" --speedup 60
run "100k sessions, sequential, history actual" --trace "$tmp/s100k.parquet"
run "100k sessions, independent, synthetic" --trace "$tmp/s100k.parquet" --sessions independent
