#!/usr/bin/env bash
# bench/ab-sessions.sh LLMREPLAY: the dispatcher's lateness with conversations. One 6000-request,
# 300 req/s Poisson trace of conversations (--turns uniform:2,5, 64 open at once: a session's
# next turn comes about 0.2 s after its last, while an answer takes about 1 s) replayed against
# one simulated engine (fixed profile: TTFT 50 ms, ITL 10 ms; a separate process) with text
# prompts, alternating --sessions independent and --sessions sequential (actual history) RUNS
# times (default 3); per run: lateness p50/p99 (analyze --json), the turns that waited, and
# the replay process's CPU. Loopback only; about 25 s a run.
#   ADDR=127.0.0.1:18779   RUNS=3
set -euo pipefail
[ $# = 1 ] || { echo "usage: bench/ab-sessions.sh llmreplay" >&2; exit 2; }
bin=$1 runs=${RUNS:-3} addr=${ADDR:-127.0.0.1:18779}
tmp=$(mktemp -d)
trap 'kill $sim 2>/dev/null; rm -rf "$tmp"' EXIT
"$bin" trace synth --arrival poisson --rate 300 --count 6000 --prompt-tokens fixed:100 --output-tokens fixed:100 \
  --turns uniform:2,5 --sessions 64 --seed 1 -o "$tmp/trace.parquet" >/dev/null
"$bin" sim --addr "$addr" --profile fixed --ttft 50ms --itl 10ms >"$tmp/sim.log" 2>&1 &
sim=$!
sleep 1
for i in $(seq "$runs"); do
  for mode in independent sequential; do
    rm -f "$tmp/r.parquet"
    rm -f "$tmp/r.parquet"  # a run never replaces another: each starts on a free name
    /usr/bin/time -f '%U %S' -o "$tmp/time" "$bin" replay --trace "$tmp/trace.parquet" --endpoint "http://$addr/v1" \
      --prompt-format text --sessions "$mode" -q -o "$tmp/r.parquet" >"$tmp/out"
    "$bin" analyze "$tmp/r.parquet" --json >"$tmp/r.json"
    read -r user sys <"$tmp/time"
    node -e '
      const d = JSON.parse(require("fs").readFileSync(process.argv[1]));
      const f = (x) => x.toFixed(3);
      console.log(`${process.argv[2]} run ${process.argv[3]}: ok ${d.requests.ok}, lateness p50 ${f(d.schedule_lateness_ms.p50)} p99 ${f(d.schedule_lateness_ms.p99)} ms, ` +
        `CPU ${process.argv[4]} s user + ${process.argv[5]} s sys`);
    ' "$tmp/r.json" "$mode" "$i" "$user" "$sys"
  done
done
