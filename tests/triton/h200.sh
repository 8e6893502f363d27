#!/usr/bin/env bash
# zgate.triton on an NVIDIA GPU (upstream Triton), in one device-machine call: the CUDA build
# (gpu_bench.py and the self-check's golden need libzgate), tests/triton/gpu_check.py (the
# self-check on CUDA tensors against the float64 reference and, golden, against zgate's CUDA
# kernels; a tensor past 2^31 elements), then bench/gpu_bench.py --impls triton: the
# backward's time against a same-size copy per shape, dtype and Z layout. Logs in $OUT
# (build/gpu-out elsewhere); last, each row's % of a same-size copy and the verdict on rows of
# 256 MB or more (95% or better).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/build/gpu-out}; mkdir -p "$OUT"
BUILD=build/gpu-triton
STAGES=${STAGES:-"build check bench"}
source scripts/gpu-stage.sh
source scripts/gpu-cmake-flags.sh
gpu_cmake_flags -DZGATE_BUILD_TOOLS=OFF
export BUILD CFG OUT

stage build 170 'cmake -S . -B $BUILD $CFG && cmake --build $BUILD -j 16'
gpu_python_package
stage check 400 'python3 -c "import torch, triton; print(\"torch\", torch.__version__, \"triton\", triton.__version__)";
  python3 tests/triton/gpu_check.py $OUT/triton-check'
stage bench 500 'python3 bench/gpu_bench.py --impls triton --quick --json $OUT/triton-bench.json'

echo "--- check (tail)"; tail -n 4 "$OUT/check.log" 2>/dev/null | cut -c1-200
if [ -f "$OUT/triton-bench.json" ]; then
  python3 - "$OUT/triton-bench.json" <<'PY' || summary+=("copy95    FAILED (a row of 256 MB or more under 95%)")
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
print("%-5s %-5s %-20s %7s %9s %9s %7s" % ("dtype", "Z", "shape", "MB", "copy us", "triton us", "% copy"))
low = []
for r in rows:
    frac = 100 * r["triton_frac_same"]
    print("%-5s %-5s %-20s %7.0f %9.1f %9.1f %6.1f%%" % (
        r["dtype"], r["layout"], "x".join(map(str, r["shape"])), r["bytes"] / 1e6,
        r["copy_same_us"], r["triton_us"], frac))
    if r["bytes"] >= 256e6 and frac < 95.0:
        low.append(r)
big = [r for r in rows if r["bytes"] >= 256e6]
print("rows of 256 MB or more: %d, under 95%% of a same-size copy: %d" % (len(big), len(low)))
sys.exit(1 if low or not big else 0)
PY
fi
stage_summary
