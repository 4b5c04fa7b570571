#!/usr/bin/env bash
# bench/sessions-table.sh [LLMREPLAY]: the same trace of conversations replayed independent and
# sequential (actual history) at two speedups against the moe-230b-8gpu simulated engine, a
# fresh engine process (empty prefix cache) for every run; one table line per run from
# `analyze --json`: sustained output tok/s, TTFT p50/p99, the prefix-cache hit rate beside
# the best rate the run allows, the turns that waited for their predecessor (and the p50 of
# the wait), and the turns sent before their predecessor's answer ended. Loopback only;
# about 8 minutes.
#   ADDR=127.0.0.1:18411  SPEEDUPS="1 2"  KEEP=1 keeps the folder
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-}
tmp=$(mktemp -d)
if [ -z "$bin" ]; then go build -o "$tmp/llmreplay" ./cmd/llmreplay; bin=$tmp/llmreplay; fi
addr=${ADDR:-127.0.0.1:18411}
sim=
trap '[ -n "$sim" ] && kill $sim 2>/dev/null; [ "${KEEP:-}" = 1 ] && echo "kept $tmp" || rm -rf "$tmp"' EXIT
# 16 conversations open at once, 2-6 turns each, ~4 req/s: a conversation's next turn comes
# about 4 s after its last at 1x, 2 s at 2x, while an answer (50-200 tokens at 15-80 tok/s
# per user) takes 1-10 s: turns would overlap.
"$bin" trace synth --arrival poisson --rate 4 --duration 120s --prompt-tokens uniform:100,400 \
  --output-tokens uniform:50,200 --turns uniform:2,6 --sessions 16 --block-tokens 16 --seed 3 \
  -o "$tmp/conv.parquet" >/dev/null
"$bin" trace info "$tmp/conv.parquet" | grep -E '^(requests|span|prefix)' || true
printf '%-8s %-12s %10s %9s %9s %8s %8s %14s %12s %12s\n' speedup sessions "sustain t/s" "TTFT p50" "TTFT p99" "hit" "best" "turns waited" "wait p50 s" "overlapped"
for sp in ${SPEEDUPS:-1 2}; do
  for mode in independent sequential; do
    "$bin" sim --addr "$addr" --profile moe-230b-8gpu >"$tmp/sim.log" 2>&1 &
    sim=$!
    for _ in $(seq 50); do curl -fsS "http://$addr/v1/models" >/dev/null 2>&1 && break; sleep 0.1; done
    out=$tmp/$mode-$sp.parquet
    "$bin" replay --trace "$tmp/conv.parquet" --endpoint "http://$addr/v1" --speedup "$sp" --sessions "$mode" -q -o "$out" >/dev/null
    kill $sim; wait $sim 2>/dev/null || true; sim=
    "$bin" analyze "$out" --json >"$out.json"
    node -e '
      const d = JSON.parse(require("fs").readFileSync(process.argv[1]));
      const c = d.conversations || {}, pc = c.prefix_cache || {}, s = c.sessions;
      const f = (x, k = 1) => (x == null ? "-" : x.toFixed(k));
      const pct = (x) => (x == null ? "-" : (100 * x).toFixed(1) + "%");
      const waited = s ? `${s.waited}/${s.turns}` : "-", o = c.turn_overlap;
      const wait50 = s && s.session_wait_ms ? (s.session_wait_ms.p50 / 1000).toFixed(2) : "-";
      console.log([process.argv[2].padEnd(8), process.argv[3].padEnd(12), f(d.throughput.sustained_output_tokens_per_s).padStart(10),
        f(d.ttft_ms.p50).padStart(9), f(d.ttft_ms.p99).padStart(9), pct(pc.hit_rate).padStart(8), pct(pc.best_rate).padStart(8),
        waited.padStart(14), wait50.padStart(12), (o ? `${o.overlapped}/${o.turns}` : "-").padStart(12)].join(" "));
    ' "$out.json" "${sp}x" "$mode"
  done
done
