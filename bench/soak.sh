#!/usr/bin/env bash
# bench/soak.sh: the replayer for an hour (by default) at a steady moderate load against the
# simulated engine with faults on (the sim's --fault flags), through an embedded toxiproxy
# whose toxics are switched on and off every few minutes; it checks that records = due
# requests, that the replayer's RSS and goroutines do not grow, and that its lateness p99
# does not drift (bench/soak/main.go says how each is judged; bench/README.md, "Soak").
#
#   bench/soak.sh                       # one hour; the figures for a release note
#   bench/soak.sh --kill                # the same, ending with a kill -9 and `llmreplay recover`
#   bench/soak.sh --duration 5m --sample 30s --window 1m --toggle 30s
#   bench/soak.sh --smoke               # a few seconds, twice (to the end, then killed): CI
#
# Every other flag goes to the driver (go run ./bench/soak -h). Exit status: 0 all checks
# passed, 1 a check failed, 2 the soak could not run.
set -euo pipefail
cd "$(dirname "$0")/.."

bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/llmreplay" ./cmd/llmreplay
go build -o "$bin/soak" ./bench/soak

if [ "${1:-}" = --smoke ]; then
  shift
  smoke=(--duration 5s --rate 20 --sample 1s --window 2s --toggle 1s --timeout 3s
         --faults '503=0.02,disconnect=0.02,malformed=0.02,stall=0.02:10s' "$@")
  status=0
  echo "bench/soak.sh --smoke: to the end"
  "$bin/soak" -llmreplay "$bin/llmreplay" "${smoke[@]}" || status=$?
  echo "bench/soak.sh --smoke: killed"
  "$bin/soak" -llmreplay "$bin/llmreplay" "${smoke[@]}" --kill || status=$?
  exit "$status"
fi
exec "$bin/soak" -llmreplay "$bin/llmreplay" "$@"
