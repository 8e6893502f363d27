#!/usr/bin/env bash
# One device-machine call that checks everything besides the CUDA kernel benchmark
# (scripts/gpu-run.sh does that): build the whole tree with CUDA, the CPU tests on the
# host's AVX-512 (when it has it), `zgate check` on the GPU, the Python tests with PyTorch,
# CuPy and JAX on the GPU, the host time of one zgate_bwd in C taken apart (hostcost.log:
# tests/cuda/cuda_host_cost.cu), the Python call overhead (the implementations' table, then
# the hot path's host time in parts: overhead.log), and tests/multi_gpu/dist_check.py under
# torchrun with one process per GPU. Logs in $OUT (build/gpu-out elsewhere); table last.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/build/gpu-out}; mkdir -p "$OUT"
BUILD=build/gpu-validate
STAGES=${STAGES:-"build cpu check python hostcost overhead dist"}
source scripts/gpu-stage.sh
source scripts/gpu-cmake-flags.sh
gpu_cmake_flags
export BUILD CFG OUT NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export ZGATE_LIBRARY=$PWD/$BUILD/src/libzgate.so PYTHONPATH=$PWD/python

stage build 170 'cmake -S . -B $BUILD $CFG && cmake --build $BUILD -j 16'
stage cpu 80 'grep -o "avx512[a-z_0-9]*" /proc/cpuinfo | sort -u | tr "\n" " "; echo; lscpu | grep "Model name";
  $BUILD/tools/zgate info; ctest --test-dir $BUILD -j 8 --output-on-failure -L "avx512|simd|c"'
stage check 50 '$BUILD/tools/zgate check --backend cuda --report $OUT/zgate-check-cuda.md'
stage python 300 'python3 -m pytest -q -rs -p no:cacheprovider tests/python'
stage hostcost 60 '$BUILD/tests/cuda/cuda_host_cost 1000 9'
stage overhead 120 'python3 -m zgate._overhead --device cuda --orig third_party_ref/mamba3 --breakdown'
stage dist 45 'torchrun --standalone --nproc_per_node=$(nvidia-smi -L | wc -l) tests/multi_gpu/dist_check.py'

for f in cpu check python hostcost overhead dist; do
  [ -f "$OUT/$f.log" ] || continue
  n=12; [ "$f" = overhead ] && n=60; [ "$f" = hostcost ] && n=14   # their whole tables
  echo "--- $f (tail)"; tail -n $n "$OUT/$f.log" | cut -c1-220
done
stage_summary
