#!/usr/bin/env bash
# bench/agents-memory.sh: peak memory (max RSS, GNU time) of `llmreplay replay --sessions dag`
# holding 1,000 live agent sessions with 100k-token contexts: each session's first call has a
# 96,000-token prompt, then 3 more calls 10 s apart (a tool's recorded time) each append the
# 200-token answer and 1,000 tokens of tool output, to 99,600 tokens; all 1,000 sessions
# start within 2 s, so all are live together for 30 s. The endpoint is a loopback sink
# (bench/agentbench -serve) that reads each body and answers at once, so the figure is the
# replayer's. Then the Go benchmark of building the calls (BenchmarkAgentContexts), medians
# of 5. Loopback only; about 2 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'kill "${sink:-0}" 2>/dev/null || true; rm -rf "$tmp"' EXIT
[ -x /usr/bin/time ] || { echo "bench/agents-memory.sh: needs GNU time (/usr/bin/time)" >&2; exit 2; }
go build -o "$tmp/llmreplay" ./cmd/llmreplay
go build -o "$tmp/agentbench" ./bench/agentbench
"$tmp/agentbench" -trace "$tmp/agents.parquet" -sessions 1000 -calls 4 -first 96000 -add 1000 -out 200 -gap 10s
"$tmp/agentbench" -serve 127.0.0.1:0 >"$tmp/url" &
sink=$!
for _ in $(seq 50); do [ -s "$tmp/url" ] && break; sleep 0.1; done
url=$(head -1 "$tmp/url")
/usr/bin/time -v -o "$tmp/time" "$tmp/llmreplay" replay --trace "$tmp/agents.parquet" --endpoint "$url" --api chat \
  --model sink --scrape none -q -o "$tmp/r.parquet" >"$tmp/out" 2>"$tmp/err" || { cat "$tmp/err" >&2; exit 1; }
rss=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$tmp/time")
wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' "$tmp/time")
printf 'replay, 1000 agent sessions of 100k-token contexts: max RSS %d MiB, wall %s\n' $((rss / 1024)) "$wall"
grep -m1 '^Requests:' "$tmp/out" || true
grep -m1 'schedule lateness ' "$tmp/out" || true
go test -run '^$' -bench AgentContexts -benchtime 1000x -count 5 ./replay | grep '^Benchmark'
