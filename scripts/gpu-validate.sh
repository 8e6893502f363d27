#!/usr/bin/env bash
# The one-call validation on a GPU machine. Stages (STAGES picks a subset, in this order):
#   build     the whole tree with CUDA (tests and the `zgate` command)
#   cpu       the CPU tests on the host's widest paths (AVX-512 where it has it)
#   cuda      the CUDA C test (ctest -L cuda: the case list, streams, devices, > 2^31 elements)
#   sanitize  compute-sanitizer memcheck, racecheck and initcheck on the CUDA test's subset
#   check     `zgate check` on the GPU (the shared case list, Markdown report)
#   python    the Python tests with PyTorch, CuPy and JAX on the GPU
#   hostcost  the host time of one zgate_bwd in C taken apart (tests/cuda/cuda_host_cost.cu)
#   overhead  the Python call overhead (bench/host_overhead.py)
#   dist      tests/multi_gpu/dist_check.py under torchrun, one process per GPU
#   bench     bench/gpu_bench.py: zgate against copy bandwidth, PyTorch eager, torch.compile
#             and upstream's Triton kernel where third_party_ref/mamba3 (or ZGATE_ORIG_MAMBA3)
#             exists; JSON and PNG chart in $OUT
# e.g. STAGES="build cuda bench" scripts/gpu-validate.sh. RUN_BUDGET (seconds for the whole
# call, e.g. a remote command's limit) makes the benchmark start no row late enough to overrun
# it. Logs in $OUT (build/gpu-out elsewhere), one per stage; the tails and the stage table last.
set -uo pipefail
START=$(date +%s)
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/build/gpu-out}; mkdir -p "$OUT"
BUILD=build/gpu-validate
STAGES=${STAGES:-"build cpu cuda sanitize check python hostcost overhead dist bench"}
ORIG=${ZGATE_ORIG_MAMBA3:-third_party_ref/mamba3}
source scripts/gpu-stage.sh
source scripts/gpu-cmake-flags.sh
gpu_cmake_flags
export BUILD CFG OUT ORIG PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

stage build 170 'nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nvcc --version | tail -1
  cmake -S . -B $BUILD $CFG && cmake --build $BUILD -j 16'
gpu_python_package
stage cpu 80 'grep -o "avx512[a-z_0-9]*" /proc/cpuinfo | sort -u | tr "\n" " "; echo; lscpu | grep "Model name";
  $BUILD/tools/zgate info; ctest --test-dir $BUILD -j 8 --output-on-failure -L "avx512|simd|c"'
stage cuda 240 'ctest --test-dir $BUILD -V -L cuda'
stage sanitize 90 'rc=0; for t in memcheck racecheck initcheck; do echo "--- $t";
  compute-sanitizer --tool $t --error-exitcode 99 $BUILD/tests/cuda/test_cuda_gate --small | tail -4 || rc=1; done; exit $rc'
stage check 50 '$BUILD/tools/zgate check --backend cuda --report $OUT/zgate-check-cuda.md'
stage python 300 'python3 -m pytest -q -rs -p no:cacheprovider tests/python'
stage hostcost 60 '$BUILD/tests/cuda/cuda_host_cost 1000 9'
stage overhead 120 'python3 bench/host_overhead.py --device cuda --orig $ORIG'
stage dist 45 'torchrun --standalone --nproc_per_node=$(nvidia-smi -L | wc -l) tests/multi_gpu/dist_check.py'
BENCH_S=$(( ${RUN_BUDGET:-100000} - ($(date +%s) - START) - 60 )); [ $BENCH_S -gt 360 ] && BENCH_S=360; [ $BENCH_S -lt 30 ] && BENCH_S=30
export BENCH_S
stage bench $((BENCH_S + 50)) 'python3 bench/gpu_bench.py --deadline $BENCH_S --json $OUT/gpu-bench.json --png $OUT/gpu-bench.png $([ -d "$ORIG" ] && echo --orig $ORIG)'

for f in cpu:12 cuda:12 sanitize:12 check:12 python:12 hostcost:14 overhead:60 dist:12 bench:40; do
  stage_tail "${f%:*}" "${f#*:}"
done
stage_summary
