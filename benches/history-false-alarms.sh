#!/usr/bin/env bash
# How often `llmload history` calls an unchanged run worse or better: docs/ci.md's false-alarm
# rate. RUNS runs (default 100) of one plan against one server that never changes — the
# simulator in its own process, its jitter drawn from another seed each run, as two runs of one
# build differ — then `history` over them, counting the runs that stand out in any measure.
# Every stand-out is a false alarm: nothing changed.
#
#   cargo build --release && benches/history-false-alarms.sh [target/release/llmload] [RUNS]
set -euo pipefail
llmload=${1:-target/release/llmload}
runs=${2:-100}
work=$(mktemp -d)
sim=
trap 'kill "$sim" 2>/dev/null || true; rm -rf "$work"' EXIT

# What a CI gate runs: 20 req/s for 3 s (some 60 requests), TTFT 100 ms, ITL 10 ms, each
# delay stretched by up to 20 ms.
plan() {
  cat <<PLAN
plan "unchanged" { seed 9; }
target "http://127.0.0.1:$1" { api "chat"; stream #true; model "m"; timeout "10s"; metrics #false; }
workload { input 64; output 16 ignore-eos=#true; }
phase "steady" { rate 20; duration "3s"; }
sla { ttft p50 < "500ms"; }
PLAN
}

for n in $(seq "$runs"); do
  "$llmload" sim --port 0 --ttft 100ms --itl 10ms --jitter 20ms --seed "$n" --threads 1 > "$work/sim.out" &
  sim=$!
  port=
  for _ in $(seq 50); do
    port=$(grep -o '127.0.0.1:[0-9]*' "$work/sim.out" | head -1 | cut -d: -f2 || true)
    [ -n "$port" ] && break
    sleep 0.1
  done
  plan "$port" > "$work/plan.kdl"
  "$llmload" run "$work/plan.kdl" --out "$work/runs/run-$(printf %03d "$n")" --quiet \
    --label "commit=c$(printf %03d "$n")" > /dev/null || true
  kill "$sim"; wait "$sim" 2>/dev/null || true
done

"$llmload" history "$work/runs" --label commit --out "$work/history" --format json > "$work/history.json"
python3 - "$work/history.json" <<'PY'
import json, sys
history = json.load(open(sys.argv[1]))
plan = history["plans"][0]
runs = plan["runs"]
judged = [i for i, _ in enumerate(runs) if any(m["changes"][i] for m in plan["measures"])]
flagged = sorted({s["run"] for s in plan["stand_outs"]})
cells = sum(1 for m in plan["measures"] for c in m["changes"] if c)
print(f"runs: {len(runs)}, judged against a band: {len(judged)}, set apart: "
      f"{sum(1 for r in runs if r.get('set_apart'))}")
print(f"runs standing out (false alarms): {len(flagged)} of {len(judged)} "
      f"({100 * len(flagged) / max(1, len(judged)):.1f}%); measures judged: {cells}, "
      f"standing out: {len(plan['stand_outs'])}")
for s in plan["stand_outs"]:
    print(f"  run {s['run'] + 1}: {s['measure']} {s['value']:.2f} {s['unit']} {s['change']} "
          f"(band {s['band']['low']:.2f}-{s['band']['high']:.2f}, interval {s.get('bounds')})")
PY
