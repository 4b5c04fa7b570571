#!/usr/bin/env bash
# bench/ab-replay.sh A B: the user's path of two llmreplay binaries, side by side in one sitting.
# Each replays the same 6000-request, 300 req/s Poisson trace (100-token prompts and outputs)
# with `llmreplay replay --prompt-format token-ids` against one simulated engine (fixed
# profile: TTFT 50 ms, ITL 10 ms) served by binary B, alternating A and B RUNS times (default 5),
# and prints, per run, lateness p99 and TTFT - 50 ms (from `analyze --json` of binary B) and
# the replay process's CPU. Loopback only; about 25 s a run.
#   ADDR=127.0.0.1:18777   RUNS=5
set -euo pipefail
[ $# = 2 ] || { echo "usage: bench/ab-replay.sh OLD-llmreplay NEW-llmreplay" >&2; exit 2; }
a=$1 b=$2 runs=${RUNS:-5} addr=${ADDR:-127.0.0.1:18777}
tmp=$(mktemp -d)
trap 'kill $sim 2>/dev/null; rm -rf "$tmp"' EXIT
"$b" trace synth --arrival poisson --rate 300 --count 6000 --prompt-tokens fixed:100 \
  --output-tokens fixed:100 --seed 1 -o "$tmp/trace.parquet" >/dev/null
"$b" sim --addr "$addr" --profile fixed --ttft 50ms --itl 10ms >"$tmp/sim.log" 2>&1 &
sim=$!
sleep 1
for i in $(seq "$runs"); do
  for v in A B; do
    bin=$a; [ $v = B ] && bin=$b
    rm -f "$tmp/r.parquet"
    rm -f "$tmp/r.parquet"  # a run never replaces another: each starts on a free name
    /usr/bin/time -f '%U %S' -o "$tmp/time" "$bin" replay --trace "$tmp/trace.parquet" \
      --endpoint "http://$addr/v1" --prompt-format token-ids -q -o "$tmp/r.parquet" >/dev/null
    "$b" analyze "$tmp/r.parquet" --json >"$tmp/r.json"
    read -r user sys <"$tmp/time"
    node -e '
      const d = JSON.parse(require("fs").readFileSync(process.argv[1]));
      const f = (x) => x.toFixed(3);
      console.log(`${process.argv[2]} run ${process.argv[3]}: ok ${d.requests.ok}, lateness p99 ${f(d.schedule_lateness_ms.p99)} ms, ` +
        `TTFT-50 p50 ${f(d.ttft_ms.p50 - 50)} p99 ${f(d.ttft_ms.p99 - 50)} ms, CPU ${process.argv[4]} s user + ${process.argv[5]} s sys`);
    ' "$tmp/r.json" "$v" "$i" "$user" "$sys"
  done
done
