#!/usr/bin/env bash
# The README's main job: install what is missing, build zgate in build/main, then run
#   zgate info    (version, CPU paths, CUDA devices)
#   zgate check   (precision suite on every backend and CPU path here; Markdown report)
#   zgate bench   (bandwidth suite vs a ceiling measured in the same run; table, JSON, PNG),
#                 after waiting up to 180 s for the build's and the check's load to leave the
#                 CPUs (the table and chart say whether the machine settled)
# on the default problem, on whatever hardware is present: the CPU always, CUDA devices
# where the library was built with CUDA and a GPU exists. Outputs go to build/main/report/.
# Exits nonzero when the build or any check fails.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh main

build=build/main
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DZGATE_BUILD_TESTS=OFF
cmake --build "$build" -j "$(nproc)" --target zgate_tool
zgate="$build/tools/zgate"
out="$build/report"
mkdir -p "$out"

echo "== zgate info"
"$zgate" info

echo "== zgate check (report: $out/zgate-check.md)"
check_rc=0
"$zgate" check --report "$out/zgate-check.md" || check_rc=$?

echo "== zgate bench (results: $out/zgate-bench.json, chart: $out/zgate-bench.png)"
bench_rc=0
"$zgate" bench --settle 180 --json "$out/zgate-bench.json" --png "$out/zgate-bench.png" || bench_rc=$?

echo "== done: check exit $check_rc, bench exit $bench_rc; outputs in $out"
[ "$check_rc" -eq 0 ] && [ "$bench_rc" -eq 0 ]
