#!/usr/bin/env bash
# The client's peak memory with 1,000 requests in flight at once, each carrying a unique
# 1280×720 JPEG (about 155 KiB; 207 KiB of base64 in its body): docs/performance.md's
# "Multimodal requests". The simulator runs in its own process (so that its memory is not the
# client's), answering after 30 s so that every request of the wave is in flight together.
#
#   cargo build --release && benches/media-memory.sh [target/release/llmload] [STREAMS]
set -euo pipefail
llmload=${1:-target/release/llmload}
streams=${2:-1000}
work=$(mktemp -d)
trap 'kill "$sim" 2>/dev/null || true; rm -rf "$work"' EXIT
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

"$llmload" sim --port 0 --ttft 30s --itl 10ms > "$work/sim.out" &
sim=$!
for _ in $(seq 50); do
  port=$(grep -o '127.0.0.1:[0-9]*' "$work/sim.out" | head -1 | cut -d: -f2 || true)
  [ -n "$port" ] && break
  sleep 0.1
done

cat > "$work/plan.kdl" <<PLAN
plan "media-memory" { seed 1; }
target "http://127.0.0.1:$port" { model "vl"; api "chat"; stream #true; timeout "120s"; metrics #false; }
workload {
    input 64
    output 16
    images count=1 format="jpeg" quality=85 { size "1280x720"; }
}
phase "wave" { concurrency $streams; requests $streams; }
PLAN

"$llmload" run "$work/plan.kdl" --out "$work/out" | tee "$work/run.out"
python3 - "$work/out" <<'PY'
import json, sys
records = [json.loads(l) for l in open(sys.argv[1] + "/records.jsonl") if '"request"' in l]
ok = sum(1 for r in records if r.get("error") is None)
body = sum(r.get("request_bytes", 0) for r in records) / max(len(records), 1)
# In flight together: every request was sent before the first answer came (TTFT 30 s).
first_end = min(r["actual_send_us"] + r["e2e_us"] for r in records if r.get("e2e_us"))
last_send = max(r["actual_send_us"] for r in records)
print(f"requests {len(records)}, ok {ok}, body {body / 1024:.0f} KiB on average, "
      f"all sent before the first answer: {last_send < first_end} "
      f"(last sent at {last_send / 1e6:.1f} s, first answer at {first_end / 1e6:.1f} s)")
PY
