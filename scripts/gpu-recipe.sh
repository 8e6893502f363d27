#!/usr/bin/env bash
# The documented acceptance recipes for real on an NVIDIA GPU (tests/triton/gpu_recipe.py):
# zgate built with CUDA, upstream's kernel from ZGATE_ORIG_MAMBA (default third_party_ref/mamba,
# never committed; its mamba_ssm/ops/triton holds mamba3/), the NPU step on the GPU as its
# stand-in. FULL=1: the commands without --quick. STAGES: build, recipe or both. Logs and
# reports in $OUT; the table last.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/build/gpu-out}; mkdir -p "$OUT"
BUILD=build/gpu-recipe
UP=${ZGATE_ORIG_MAMBA:-third_party_ref/mamba}/mamba_ssm/ops/triton
source scripts/gpu-stage.sh
source scripts/gpu-cmake-flags.sh
gpu_cmake_flags -DZGATE_BUILD_TOOLS=OFF
export BUILD CFG OUT UP
STAGES=${STAGES:-"build recipe"}     # one device call each if 10 minutes are too few for both
# upstream autotunes 54 configs per power-of-two headdim in each run: keep the results on disk
export TRITON_CACHE_AUTOTUNING=1
stage build 300 'cmake -S . -B $BUILD $CFG && cmake --build $BUILD -j 16'
gpu_python_package
# upstream's mamba3_siso_bwd.py imports einops at the top, and its dzdo path never calls it
if ! python3 -c "import einops" 2>/dev/null; then
  mkdir -p $BUILD/stub && printf 'def rearrange(*a, **k):\n    raise NotImplementedError("einops stub")\nrepeat = rearrange\n' >$BUILD/stub/einops.py
  export PYTHONPATH=$PYTHONPATH:$PWD/$BUILD/stub
fi
stage recipe 560 "python3 -c 'import torch, triton; print(\"torch\", torch.__version__, \"triton\", triton.__version__)'
  python3 tests/triton/gpu_recipe.py \$OUT/recipe \$PWD/\$UP ${FULL:+--full}"
stage_tail build 3
[ -f "$OUT/recipe.log" ] && { echo "--- recipe"; cut -c1-240 "$OUT/recipe.log" | tail -n 40; }
stage_summary
