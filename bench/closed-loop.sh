#!/usr/bin/env bash
# bench/closed-loop.sh [LLMREPLAY]: the field's classic table, checked against the simulated
# engine's analytical truth. It serves the moe-230b-8gpu profile (one process) and runs, as a
# user would:
#   1. sweep --concurrencies 1,2,4,...,1024 (256-token prompts and outputs, --duration 25s);
#   2. sweep --auto --auto-axis concurrency (--duration 20s) over the same range, with prompts
#      of its own (--seed 2^50: the engine's prefix cache must not serve the first sweep's);
# then checks against the engine's /sim/info:
#   - no point is client-limited;
#   - C=1: per-user 1/TPOT p50 within 3% of single_stream_tok_per_sec;
#   - the plateau (C >= max_batch): sustained output tok/s within 5% of max_decode_tok_per_sec;
#   - both searches put saturation at max_batch (256 for this profile).
# Loopback only; about 20 minutes. Prints the tables and one PASS/FAIL line per check; exits
# 1 if a check fails. Keeps its folder when KEEP=1; CHECK=DIR only checks a kept folder again.
#   ADDR=127.0.0.1:18401  DURATION=25s  AUTO_DURATION=20s
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-}
tmp=$(mktemp -d)
if [ -z "$bin" ]; then
  go build -o "$tmp/llmreplay" ./cmd/llmreplay
  bin=$tmp/llmreplay
fi
addr=${ADDR:-127.0.0.1:18401}
sim=
if [ -n "${CHECK:-}" ]; then tmp=$CHECK KEEP=1; fi
trap '[ -n "$sim" ] && kill $sim 2>/dev/null; [ "${KEEP:-}" = 1 ] && echo "kept $tmp" || rm -rf "$tmp"' EXIT

if [ -z "${CHECK:-}" ]; then
"$bin" trace synth --arrival constant --rate 100 --count 6000 --prompt-tokens fixed:256 \
  --output-tokens fixed:256 --seed 1 -o "$tmp/trace.parquet" >/dev/null
"$bin" sim --addr "$addr" --profile moe-230b-8gpu >"$tmp/sim.log" 2>&1 &
sim=$!
for _ in $(seq 50); do curl -fsS "http://$addr/sim/info" >"$tmp/info.json" 2>/dev/null && break; sleep 0.1; done

echo "== sweep --concurrencies 1,2,4,...,1024 (as printed)"
"$bin" sweep --trace "$tmp/trace.parquet" --endpoint "http://$addr/v1" \
  --concurrencies 1,2,4,8,16,32,64,128,256,512,1024 --duration "${DURATION:-25s}" --cooldown 2s \
  -o "$tmp/list" | tee "$tmp/list.txt"
echo
echo "== sweep --auto --auto-axis concurrency --start 1 --max 1024"
"$bin" sweep --trace "$tmp/trace.parquet" --endpoint "http://$addr/v1" \
  --auto --auto-axis concurrency --start 1 --max 1024 --duration "${AUTO_DURATION:-20s}" --cooldown 2s \
  --seed $((1 << 50)) \
  -o "$tmp/auto" | tee "$tmp/auto.txt"
echo
fi

node - "$tmp/info.json" "$tmp/list/sweep.json" "$tmp/auto/sweep.json" <<'EOF'
const fs = require("fs");
const [info, list, auto] = process.argv.slice(2).map((f) => JSON.parse(fs.readFileSync(f)));
let failed = 0;
const check = (ok, what) => { console.log(`${ok ? "PASS" : "FAIL"} ${what}`); if (!ok) failed++; };
const pct = (a, b) => (100 * (a / b - 1)).toFixed(2) + "%";
for (const s of [list, auto]) {
  const limited = s.points.filter((p) => p.client_limited).map((p) => p.load);
  check(limited.length === 0, `${s.auto ? "auto" : "list"}: no point client-limited (${limited.length ? "limited: " + limited.join(",") : s.points.length + " points"})`);
}
const at = (c) => list.points.find((p) => p.load === c);
const one = at(1);
const single = info.single_stream_tok_per_sec;
const ceil = info.max_decode_tok_per_sec, cap = info.config.max_batch;
const u1 = one.per_user.inv_tpot_per_s.p50, s1 = one.sustained_output_tokens_per_s;
check(Math.abs(u1 / single - 1) <= 0.03, `C=1: per-user 1/TPOT p50 ${u1.toFixed(1)} tok/s vs /sim/info single-stream ${single.toFixed(1)} (${pct(u1, single)}, bound 3%)`);
check(Math.abs(s1 / single - 1) <= 0.03, `C=1: sustained ${s1.toFixed(1)} tok/s vs /sim/info single-stream ${single.toFixed(1)} (${pct(s1, single)}, bound 3%)`);
// Below the batch cap every user decodes at the engine's per-stream rate for that batch.
for (const p of list.points.filter((p) => p.load <= cap)) {
  const st = info.steps[p.load - 1], u = p.per_user.inv_tpot_per_s.p50;
  check(Math.abs(u / st.per_stream_tok_per_sec - 1) <= 0.03, `C=${p.load}: per-user 1/TPOT p50 ${u.toFixed(2)} tok/s vs /sim/info per-stream at batch ${st.batch} ${st.per_stream_tok_per_sec.toFixed(2)} (${pct(u, st.per_stream_tok_per_sec)}, bound 3%)`);
}
for (const p of list.points.filter((p) => p.load >= cap)) {
  const s = p.sustained_output_tokens_per_s;
  check(Math.abs(s / ceil - 1) <= 0.05, `C=${p.load}: sustained ${s.toFixed(1)} tok/s vs decode ceiling ${ceil.toFixed(1)} (${pct(s, ceil)}, bound 5%)`);
}
check(list.saturation.found && list.saturation.pass_load === cap, `list: saturation at C=${list.saturation.pass_load}, max_batch ${cap}`);
check(auto.saturation.found && auto.saturation.pass_load === cap, `auto: saturation at C=${auto.saturation.pass_load}, max_batch ${cap}`);
process.exit(failed ? 1 : 0);
EOF
