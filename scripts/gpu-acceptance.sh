#!/usr/bin/env bash
# One device-machine call: python -m zgate.acceptance on CUDA, validated end to end.
#   competitor 1  upstream's dzdo kernel (third_party_ref/mamba3, never committed), backward
#                 cases of the smallest real shape (its autotuning costs 6-35 s per headdim)
#   competitor 2  zgate's CUDA kernels, the --quick list
#   candidate     zgate.triton (the NPU kernel's source) on CUDA against both baselines, with
#                 zgate CUDA's outputs as the golden run
#   timers        the profiler's kernel time next to triton.testing.do_bench's on the real
#                 bfloat16 shapes (scripts/gpu_acceptance_timers.py)
# Reports (.md, English and Chinese), results and baselines (.json) and goldens (.npz) are
# kept in build/gpu-acceptance/results (so that a later call's stages find the baselines) and
# copied with the logs to $OUT (build/gpu-out elsewhere); the criteria of every run and the
# timers' table last. About 8 minutes in all; in two calls if need be:
#   STAGES="build upstream zgate" scripts/gpu-acceptance.sh
#   STAGES="triton triton-up timers" scripts/gpu-acceptance.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/build/gpu-out}; mkdir -p "$OUT"
BUILD=build/gpu-acceptance
RES=$PWD/$BUILD/results; mkdir -p "$RES"
UP=${ZGATE_UPSTREAM_PATH:-third_party_ref}
STAGES=${STAGES:-"build upstream zgate triton triton-up timers"}
source scripts/gpu-stage.sh
source scripts/gpu-cmake-flags.sh
gpu_cmake_flags -DZGATE_BUILD_TESTS=OFF -DZGATE_BUILD_TOOLS=OFF
export RES BUILD
acc="python3 -m zgate.acceptance --device cuda"
small="--quick --op bwd --filter 2x2048x24x64"

stage build 200 'cmake -S . -B $BUILD $CFG && cmake --build $BUILD -j 16'
gpu_python_package
stage upstream 240 "$acc --impl upstream --upstream-path $UP $small --save-baseline \$RES/upstream.json --save-golden \$RES/upstream.npz --output \$RES/upstream.md"
stage zgate 150 "$acc --impl zgate --quick --save-baseline \$RES/zgate-cuda.json --save-golden \$RES/zgate-cuda.npz --output \$RES/zgate-cuda.md"
stage triton 150 "$acc --impl triton --quick --baseline \$RES/zgate-cuda.json --golden \$RES/zgate-cuda.npz --output \$RES/triton-vs-zgate.md --json \$RES/triton-vs-zgate.json"
stage triton-up 90 "$acc --impl triton $small --baseline \$RES/upstream.json --golden \$RES/zgate-cuda.npz --output \$RES/triton-vs-upstream.md --json \$RES/triton-vs-upstream.json; r=\$?; $acc --impl triton $small --baseline \$RES/upstream.json --golden \$RES/zgate-cuda.npz --lang zh-CN --output \$RES/triton-vs-upstream.zh-CN.md >/dev/null; exit \$r"
stage timers 300 "python3 scripts/gpu_acceptance_timers.py --upstream-path $UP --json \$RES/timers.json"

for f in upstream zgate triton triton-up; do
  [ -f "$OUT/$f.log" ] || continue
  echo "--- $f"; grep -E "^(PASS|FAIL|speed|error)" "$OUT/$f.log" | cut -c1-200
done
cp "$RES"/*.md "$RES"/*.json "$OUT"/ 2>/dev/null   # not the .npz goldens (large)
for f in triton-vs-zgate triton-vs-upstream; do
  [ -f "$RES/$f.md" ] && { echo "--- $f.md"; grep -E "^(- \*\*|Time ratio)" "$RES/$f.md" | cut -c1-300; }
done
[ -f "$OUT/timers.log" ] && { echo "--- timers"; tail -n 40 "$OUT/timers.log" | cut -c1-160; }
stage_summary
