#!/usr/bin/env bash
# Builds llama.cpp's `llama-server` for llmload's real-engine tests (tests/real_engine.rs), and
# prints its path. The source is the llama.cpp tree that the llama-cpp-python source
# distribution on PyPI vendors, at a pinned version, so the build needs nothing beyond the
# package registries; no prebuilt binary is used. Only the server target is built, with the
# options that would download anything (curl, model fetching) off. The build goes under
# target/engines/ (ignored by git) and is reused when it is already there.
#
#   tests/engines/llama-server.sh            # build (or reuse), print the binary's path
#   tests/engines/llama-server.sh --path     # print where the binary is (or will be), build nothing
#   LLMLOAD_ENGINES_DIR=/some/dir tests/engines/llama-server.sh
#
# On 2 cores the first build takes several minutes (docs/real-engines.md has the figure).
set -euo pipefail

LLAMA_CPP_PYTHON_VERSION=0.3.36
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=${LLMLOAD_ENGINES_DIR:-$root/target/engines}
src=$dir/llama.cpp-$LLAMA_CPP_PYTHON_VERSION
bin=$src/build/bin/llama-server

if [ "${1:-}" = "--path" ] || [ -x "$bin" ]; then
    echo "$bin"
    exit 0
fi

mkdir -p "$dir/download"
if ! command -v cmake >/dev/null 2>&1; then
    echo "llama-server.sh: installing cmake from PyPI" >&2
    python3 -m pip install --quiet cmake >&2
fi
sdist=$dir/download/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz
if [ ! -f "$sdist" ]; then
    echo "llama-server.sh: fetching llama-cpp-python $LLAMA_CPP_PYTHON_VERSION (source) from PyPI" >&2
    python3 -m pip download --quiet --no-deps --no-binary llama-cpp-python \
        "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" -d "$dir/download" >&2
fi
rm -rf "$src.partial"
mkdir -p "$src.partial"
tar -xzf "$sdist" -C "$src.partial" --strip-components=3 \
    "llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION/vendor/llama.cpp"
echo "llama-server.sh: building llama-server (this takes a few minutes on 2 cores)" >&2
cmake -S "$src.partial" -B "$src.partial/build" \
    -DCMAKE_BUILD_TYPE=Release \
    -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_CURL=OFF \
    -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_TOOLS=ON \
    -DLLAMA_BUILD_SERVER=ON \
    -DGGML_NATIVE=OFF \
    -DGGML_OPENMP=OFF >&2
cmake --build "$src.partial/build" --target llama-server -j "$(nproc)" >&2
# Only a finished build takes the final name, so an interrupted one is never reused.
rm -rf "$src"
mv "$src.partial" "$src"
echo "$bin"
