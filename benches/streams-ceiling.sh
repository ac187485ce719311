#!/usr/bin/env bash
# Tokens one client core delivers against a zero-delay server, by stream count (issue 31's
# first question: where does the cost go between 64 and 256 streams?). The simulator runs in
# its own process pinned to the last core, the client to the first (`taskset`), each with one
# runtime thread; completions, 128-token prompts, 64-token answers (ignore-eos), one token per
# chunk in the simulator's vLLM-shaped chunks. With PERF=1 the client runs under `perf record
# -g` and a report of its top symbols is printed (build with `--profile profiling` for symbols).
#
#   cargo build --release && benches/streams-ceiling.sh [target/release/llmload] [SECONDS] [STREAMS...]
set -euo pipefail
llmload=${1:-target/release/llmload}
seconds=${2:-10}
shift $(( $# > 2 ? 2 : $# ))
streams=("$@")
[ ${#streams[@]} -eq 0 ] && streams=(64 256 1000)
cores=$(nproc)
client_core=0
sim_core=$(( cores - 1 ))
work=$(mktemp -d)
trap 'kill "$sim" 2>/dev/null || true; rm -rf "$work"' EXIT
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

taskset -c "$sim_core" "$llmload" sim --port 0 --ttft 0ms --itl 0ms --threads 1 > "$work/sim.out" &
sim=$!
for _ in $(seq 50); do
  port=$(grep -o '127.0.0.1:[0-9]*' "$work/sim.out" | head -1 | cut -d: -f2 || true)
  [ -n "$port" ] && break
  sleep 0.1
done

echo "| streams | requests/s | tokens/s (one client core) | client CPU % | TTFT p99 ms |"
echo "|---:|---:|---:|---:|---:|"
for n in "${streams[@]}"; do
  cat > "$work/plan-$n.kdl" <<PLAN
plan "ceiling-$n" { seed 1; }
target "http://127.0.0.1:$port" { model "m"; api "completions"; stream #true; metrics #false; timeout "60s"; }
workload { input 128; output 64 ignore-eos=#true; }
phase "warm" { concurrency $n; duration "2s"; record #false; }
phase "p" { concurrency $n; duration "${seconds}s"; }
PLAN
  run=(taskset -c "$client_core" "$llmload" run "$work/plan-$n.kdl" --out "$work/out-$n" --quiet --threads 1)
  if [ "${PERF:-0}" = 1 ]; then
    perf record -g -o "$work/perf-$n.data" -- "${run[@]}" > /dev/null 2>&1 || true
  else
    "${run[@]}" > /dev/null || true
  fi
  python3 - "$work/out-$n/summary.json" "$n" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
p = [p for p in s["phases"] if p["name"] == "p"][0]
rates = p["throughput"]
client = p.get("client") or {}
busy = 100 * client.get("cpu_s", 0) / max(p["wall_s"], 1e-9)
print(f"| {sys.argv[2]} | {rates['requests_per_s']:.0f} | {rates['output_tokens_per_s']:.0f} | "
      f"{busy:.0f} | {p['metrics']['ttft_ms']['p99']:.2f} |")
PY
  if [ "${PERF:-0}" = 1 ]; then
    perf report -i "$work/perf-$n.data" --no-children --percent-limit 1.5 --stdio 2>/dev/null \
      | grep -E '^ +[0-9]' | head -25
  fi
done
