#!/usr/bin/env bash
# zgate.triton on an NVIDIA GPU (upstream Triton), in one device-machine call. Stages (STAGES
# picks a subset, in this order; default "build check bench"):
#   build     the CUDA build (gpu_bench.py and the golden CUDA run need libzgate)
#   check     tests/triton/gpu_check.py: the case list on CUDA tensors against the float64
#             reference and, golden, against zgate's CUDA kernels (the acceptance run,
#             precision only); a tensor past 2^31 elements
#   bench     bench/gpu_bench.py --impls triton: the backward's time against a same-size copy
#             per shape, dtype and Z layout; last, each row's % of a same-size copy and the
#             verdict on rows of 256 MB or more (95% or better)
# The acceptance run (python -m zgate.acceptance --device cuda); about 8 minutes, in two calls
# if need be ("build upstream zgate", then "triton triton-up"):
#   upstream  competitor 1: upstream's dzdo kernel (third_party_ref/mamba3, never committed,
#             or ZGATE_ORIG_MAMBA3), backward cases of the smallest real shape (its autotuning
#             costs 6-35 s per headdim)
#   zgate     competitor 2: zgate's CUDA kernels, the --quick list
#   triton    candidate: zgate.triton (the NPU kernel's source) against zgate CUDA, whose
#             outputs are the golden run
#   triton-up the candidate against upstream (reports in English and Chinese)
# The MindSpeed-Ops tree (python -m zgate.mindspeed_ops), needs no build; generated with
# upstream's kernel from $UPM (a mamba checkout, default third_party_ref/mamba, required) and
# applied to tests/mindspeed_ops_skeleton as its README says (scripts/msops-check.sh), with
# zgate unimportable; the float64 formula, the torch small-op version and upstream's original
# kernel (power-of-two headdims) as references:
#   msops        its unit tests on CUDA (small odd shapes, special values, bad input).
#   msops-model  the same on the Mamba-3 model shapes (pytest -m model_shapes; the float64
#                reference on the host: about 5 minutes, a call of its own).
#   MSOPS_K="bfloat16" (a pytest -k expression) runs a part. Logs and junit XML (each case's
#   precision figures) in $OUT/msops*.
# Its reports (.md), results and baselines (.json) and goldens (.npz) stay in $BUILD/results,
# so that a later call's stages find the baselines, and are copied to $OUT (not the goldens).
# Logs in $OUT (build/gpu-out elsewhere); the tails and the stage table last.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/build/gpu-out}; mkdir -p "$OUT"
BUILD=build/gpu-triton
RES=$PWD/$BUILD/results; mkdir -p "$RES"
STAGES=${STAGES:-"build check bench"}
UP=${ZGATE_ORIG_MAMBA3:-third_party_ref/mamba3}
UPM=${ZGATE_UPSTREAM_MAMBA:-third_party_ref/mamba}
MSOPS_K=${MSOPS_K:-}
export UP UPM MSOPS_K
source scripts/gpu-stage.sh
source scripts/gpu-cmake-flags.sh
gpu_cmake_flags -DZGATE_BUILD_TOOLS=OFF
export BUILD CFG OUT RES
acc="python3 -m zgate.acceptance --device cuda"
small="--quick --op bwd --filter 2x2048x24x64"
vs_up="--baseline \$RES/upstream.json --golden \$RES/zgate-cuda.npz"

stage build 170 'cmake -S . -B $BUILD $CFG && cmake --build $BUILD -j 16'
gpu_python_package
stage check 400 'python3 -c "import torch, triton; print(\"torch\", torch.__version__, \"triton\", triton.__version__)";
  python3 tests/triton/gpu_check.py $OUT/triton-check'
stage bench 500 'python3 bench/gpu_bench.py --impls triton --quick --json $OUT/triton-bench.json'
# the generator needs zgate's Python files and cases.def only
msops() {   # msops NAME [pytest arguments]: the tree on the skeleton, its unit tests on CUDA
  local name=$1 G=$PWD/$BUILD/msops; shift
  rm -rf $G/gen-$name && mkdir -p $G/gen-$name && cp -r python/zgate $G/gen-$name/ &&
    cp --remove-destination check/cases.def $G/gen-$name/zgate/ || return 1
  [ -f "$UPM/mamba_ssm/ops/triton/mamba3/mamba3_siso_bwd.py" ] || { echo "no mamba checkout at $UPM"; return 1; }
  PYTHONPATH=$G/gen-$name UPSTREAM=$(cd "$UPM" && pwd) scripts/msops-check.sh python3 python3 $G/$name \
    ${MSOPS_K:+-k "$MSOPS_K"} "$@"
  local r=$?
  cp $G/$name/pytest.log $OUT/$name-pytest.log; cp $G/$name/pytest.xml $OUT/$name.xml
  grep -c "vs original Triton: " $OUT/$name-pytest.log | sed 's/^/comparisons with the original kernel: /'
  return $r
}
export -f msops
stage msops 400 'msops msops'
stage msops-model 580 'msops msops-model -m model_shapes'
stage upstream 240 "$acc --impl upstream --upstream-path $UP $small --save-baseline \$RES/upstream.json --save-golden \$RES/upstream.npz --output \$RES/upstream.md"
stage zgate 150 "$acc --impl zgate --quick --save-baseline \$RES/zgate-cuda.json --save-golden \$RES/zgate-cuda.npz --output \$RES/zgate-cuda.md"
stage triton 150 "$acc --impl triton --quick --baseline \$RES/zgate-cuda.json --golden \$RES/zgate-cuda.npz --output \$RES/triton-vs-zgate.md --json \$RES/triton-vs-zgate.json"
stage triton-up 90 "$acc --impl triton $small $vs_up --output \$RES/triton-vs-upstream.md --json \$RES/triton-vs-upstream.json; r=\$?; $acc --impl triton $small $vs_up --lang zh-CN --output \$RES/triton-vs-upstream.zh-CN.md >/dev/null; exit \$r"
cp "$RES"/*.md "$RES"/*.json "$OUT"/ 2>/dev/null   # not the .npz goldens (large)

[ -f "$OUT/check.log" ] && { echo "--- check (tail)"; tail -n 4 "$OUT/check.log" | cut -c1-200; }
stage_tail msops 4
stage_tail msops-model 4
for f in upstream zgate triton triton-up; do
  [ -f "$OUT/$f.log" ] || continue
  echo "--- $f"; grep -E "^(PASS|FAIL|speed|error)" "$OUT/$f.log" | cut -c1-200
done
for f in triton-vs-zgate triton-vs-upstream; do
  [ -f "$RES/$f.md" ] && { echo "--- $f.md"; grep -E "^(- \*\*|Time ratio)" "$RES/$f.md" | cut -c1-300; }
done
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
