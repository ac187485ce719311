#!/usr/bin/env bash
# Builds what tests/real_engine.rs serves — llama.cpp's llama-server (llama-server.sh) and the
# tiny model (tiny-model.py) — then writes the build's exit status to STATUS_FILE, whole or not
# at all, so that a reader never sees half of it. `.ci/run` runs this in the background at idle
# priority while the rest of CI uses the cores, and the real-engine tests wait for STATUS_FILE
# (LLMLOAD_ENGINE_BUILD_STATUS).
#
#   tests/engines/build.sh STATUS_FILE LOG_FILE
set -uo pipefail
status_file=$1
log=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
model=${LLMLOAD_TINY_MODEL:-$root/target/engines/tiny-model}
started=$(date +%s)
(
    set -e
    server=$("$root/tests/engines/llama-server.sh")
    llama_cpp_dir=$(cd "$(dirname "$server")/../.." && pwd)
    python3 -c "import numpy" 2>/dev/null || python3 -m pip install --quiet numpy
    if [ ! -f "$model/tiny-llama.gguf" ]; then
        python3 "$root/tests/engines/tiny-model.py" "$llama_cpp_dir" "$model"
    fi
    echo "engine ready in $(( $(date +%s) - started )) s: $server"
) > "$log" 2>&1
status=$?
echo "$status" > "$status_file.partial"
mv "$status_file.partial" "$status_file"
exit "$status"
