#!/usr/bin/env bash
# Stage: the `zgate` command's smoke tests (ctest -L cli: help, info, a small check and
# bench, the CPU ceiling's loops (zgate_stream_ceiling_test), and every kind of bad option
# answered in words with exit code 2) and the documentation's examples (ctest -L docs: built, run, and shown verbatim in docs/api.md).
# Own build dir: build/cli.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=build/cli
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DZGATE_BUILD_TESTS=ON >/dev/null
# and every documentation example this configuration builds (the CUDA one only with CUDA)
examples=$(cmake --build "$build" --target help | grep -o 'example_[A-Za-z0-9_]*' | sort -u)
cmake --build "$build" -j "$(nproc)" --target zgate_tool zgate_stream_ceiling_test $examples
cd "$build"
ctest -L 'cli|docs' --output-on-failure
