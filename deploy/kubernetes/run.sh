#!/usr/bin/env sh
# Runs a plan as N shards on Kubernetes, merges them, prints the verdict and copies the run out.
#
#   deploy/kubernetes/run.sh PLAN.kdl SHARDS [TARGET_URL]
#
# Needs kubectl pointed at the cluster (and namespace) to use, and the image llmload:0.1 where
# the nodes can pull it (docker build -t llmload:0.1 . ; push or load it). The results stay on
# the volume llmload-results and are copied to ./llmload-results/RUN_ID. Exit code: the merged
# run's verdict (0 pass, 1 fail, 2 a mistake, 3 not carried out).
# Environment: START_IN (seconds until the shards start, default 60: enough for every pod to be
# scheduled and to pull the image), TIMEOUT (default 3600 s per step).
set -eu

plan=${1:?usage: run.sh PLAN.kdl SHARDS [TARGET_URL]}
shards=${2:?usage: run.sh PLAN.kdl SHARDS [TARGET_URL]}
target=${3:-}
here=$(cd "$(dirname "$0")" && pwd)
run_id=run-$(date -u +%Y%m%dT%H%M%SZ)
start_in=${START_IN:-60}
timeout=${TIMEOUT:-3600}

case $shards in
  '' | *[!0-9]*) echo "SHARDS must be a number" >&2; exit 2 ;;
esac
# Every shard must be scheduled and started before this instant: the shards start together.
start_at=@$(( $(date -u +%s) + start_in ))

kubectl delete job llmload-shards llmload-merge --ignore-not-found --wait=true >/dev/null
kubectl apply -f "$here/results-pvc.yaml"
kubectl create configmap llmload-plan --from-file=plan.kdl="$plan" --dry-run=client -o yaml | kubectl apply -f -
kubectl create configmap llmload-run \
  --from-literal=shards="$shards" \
  --from-literal=start-at="$start_at" \
  --from-literal=target="$target" \
  --from-literal=run-id="$run_id" \
  --dry-run=client -o yaml | kubectl apply -f -

# N shards: the Job's completions and parallelism.
sed "s/: 3 # shards/: $shards # shards/" "$here/shards-job.yaml" | kubectl apply -f -
echo "llmload: $shards shards start at $start_at (run $run_id)"
if ! kubectl wait --for=condition=complete job/llmload-shards --timeout="${timeout}s"; then
  echo "llmload: a shard failed or timed out; the merge reports which" >&2
fi

kubectl apply -f "$here/merge-job.yaml"
code=3
while :; do
  if kubectl wait --for=condition=complete job/llmload-merge --timeout=5s >/dev/null 2>&1; then code=0; break; fi
  if kubectl wait --for=condition=failed job/llmload-merge --timeout=5s >/dev/null 2>&1; then
    code=$(kubectl get pods -l job-name=llmload-merge \
      -o jsonpath='{.items[0].status.containerStatuses[0].state.terminated.exitCode}' 2>/dev/null || echo 3)
    break
  fi
done
kubectl logs job/llmload-merge || true

kubectl apply -f "$here/results-pod.yaml"
kubectl wait --for=condition=ready pod/llmload-results --timeout=300s
mkdir -p llmload-results
kubectl cp "llmload-results:/results/$run_id" "llmload-results/$run_id"
kubectl delete pod llmload-results --wait=false
echo "llmload: the run is in llmload-results/$run_id (merged/report.md)"
exit "$code"
