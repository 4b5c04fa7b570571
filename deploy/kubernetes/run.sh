#!/usr/bin/env bash
# run.sh: start N llmreplay shards as one run on Kubernetes, then analyse them.
#
#   deploy/kubernetes/run.sh N ENDPOINT [LEAD_SECONDS]
#
# It fills the shard count, the endpoint and a common start instant (now + LEAD_SECONDS,
# default 60: time for every pod to be scheduled and pull the image) into shards-job.yaml,
# applies it, waits for it, then runs analyze-job.yaml over the N result files.
# Needs kubectl with a namespace holding the PVCs llmreplay-data (with trace.parquet) and
# llmreplay-results (ReadWriteMany), and optionally the Secret llmreplay-api-key.
set -euo pipefail
n=${1:?usage: run.sh N ENDPOINT [LEAD_SECONDS]}
endpoint=${2:?usage: run.sh N ENDPOINT [LEAD_SECONDS]}
lead=${3:-60}
here=$(dirname "$0")
start=$(date -u -d "+${lead} seconds" +%Y-%m-%dT%H:%M:%SZ)

sed -e "s|completions: 4|completions: ${n}|; s|parallelism: 4|parallelism: ${n}|" \
    -e "s|--shard=\$(JOB_COMPLETION_INDEX)/4|--shard=\$(JOB_COMPLETION_INDEX)/${n}|" \
    -e "s|value: http://vllm.default.svc.cluster.local:8000/v1|value: ${endpoint}|" \
    -e "s|value: \"2030-01-01T00:00:00Z\"|value: \"${start}\"|" \
    "$here/shards-job.yaml" | kubectl apply -f -
echo "shards start at ${start}"
kubectl wait --for=condition=complete --timeout=24h job/llmreplay-shards

files=""
for ((i = 0; i < n; i++)); do files="${files}            - /results/shard-${i}.parquet\n"; done
sed -e '/- \/results\/shard-[0-9]*\.parquet/d' "$here/analyze-job.yaml" |
  awk -v files="$files" '{print} /- --parquet=/{printf "%s", files}' | kubectl apply -f -
kubectl wait --for=condition=complete --timeout=1h job/llmreplay-analyze
kubectl logs job/llmreplay-analyze
