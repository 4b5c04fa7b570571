#!/usr/bin/env bash
# bench/analyze.sh: time and peak memory (max RSS) of `llmreplay analyze` on a
# 1-million-request results file, beside DuckDB computing the same percentiles on the same
# file. Targets, set when analyze was first built and held since: <= 3 s and <= 1 GB.
#   RUNS=5 (repetitions; medians are reported)   FILE=/tmp/llmreplay-bench-1m.parquet
#   DUCKDB=0 skips the DuckDB comparison (it unnests 1.4e8 gaps: ~40 s and 3.4 GB)
# The file is generated once (analysis/bench_test.go: writeBenchResults) and reused.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${RUNS:-5}
file=${FILE:-/tmp/llmreplay-bench-1m.parquet}
bin=$(mktemp -d)/llmreplay
go build -o "$bin" ./cmd/llmreplay
if [ ! -f "$file" ]; then
  echo "bench: writing $file (1,000,000 requests; takes minutes)"
  LLMREPLAY_BENCH_RESULTS=$file go test ./analysis -run '^TestWriteBenchResults$' -count=1 -timeout 0 >/dev/null
fi
echo "bench: $file, $(du -h "$file" | cut -f1), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

: >/tmp/bench-analyze.$$
for i in $(seq "$runs"); do
  /usr/bin/time -f '%e %M %U %S' -o /tmp/bench-time.$$ "$bin" analyze "$file" --json >/tmp/bench-json.$$
  read -r secs kb user sys </tmp/bench-time.$$
  echo "llmreplay analyze run $i: ${secs} s, max RSS $((kb / 1024)) MiB, cpu ${user} s user + ${sys} s sys"
  echo "$secs $kb" >>/tmp/bench-analyze.$$
done
echo "llmreplay analyze median: $(cut -d' ' -f1 /tmp/bench-analyze.$$ | median) s, max RSS $(( $(cut -d' ' -f2 /tmp/bench-analyze.$$ | median | cut -d. -f1) / 1024 )) MiB (median of $runs)"

if [ "${DUCKDB:-1}" = 0 ]; then
  echo "duckdb: skipped (DUCKDB=0)"
elif command -v node >/dev/null && [ -d testdata/duckdb/node_modules/@duckdb/node-api ]; then
  ps='[0.5, 0.9, 0.95, 0.99, 0.999]'
  sql="WITH r AS (SELECT * FROM '$file' WHERE status = 'ok'),
    g AS (SELECT unnest(list_transform(range(2, len(chunk_ns) + 1), i -> chunk_ns[i] - chunk_ns[i - 1])) / 1e6 AS itl FROM r)
    SELECT (SELECT count(*) FROM r) AS ok,
      (SELECT quantile_cont((first_token_ns - sent_ns) / 1e6, $ps) FROM r) AS ttft,
      (SELECT quantile_cont((end_ns - first_token_ns) / 1e6 / (output_tokens - 1), $ps) FROM r WHERE output_tokens > 1) AS tpot,
      (SELECT quantile_cont((end_ns - sent_ns) / 1e6, $ps) FROM r) AS e2e,
      (SELECT quantile_cont((sent_ns - scheduled_ns) / 1e6, $ps) FROM '$file' WHERE sent_ns IS NOT NULL) AS lateness,
      (SELECT quantile_cont(itl, $ps) FROM g) AS itl"
  : >/tmp/bench-duck.$$
  for i in $(seq "$runs"); do
    /usr/bin/time -f '%e %M' -o /tmp/bench-time.$$ node testdata/duckdb/query.mjs "$sql" >/tmp/bench-duckout.$$
    read -r secs kb </tmp/bench-time.$$
    echo "duckdb (node query.mjs) run $i: ${secs} s, max RSS $((kb / 1024)) MiB"
    echo "$secs $kb" >>/tmp/bench-duck.$$
  done
  echo "duckdb median: $(cut -d' ' -f1 /tmp/bench-duck.$$ | median) s, max RSS $(( $(cut -d' ' -f2 /tmp/bench-duck.$$ | median | cut -d. -f1) / 1024 )) MiB (median of $runs; includes node start-up)"
  echo "duckdb:    $(cat /tmp/bench-duckout.$$)"
  echo "llmreplay: $(python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(json.dumps({"ok": j["requests"]["ok"], **{k: [j[k][p] for p in ("p50","p90","p95","p99","p99_9")] for k in ("ttft_ms","tpot_ms","e2e_ms","schedule_lateness_ms","itl_ms")}}))' /tmp/bench-json.$$)"
else
  echo "duckdb: node or testdata/duckdb/node_modules missing; skipped"
fi
rm -f /tmp/bench-*.$$
