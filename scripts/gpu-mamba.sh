#!/usr/bin/env bash
# Upstream's Mamba-3 with zgate's compute_dzdo on a GPU machine:
#   scripts/gpu-mamba.sh PATH     PATH: a state-spaces/mamba checkout, its mamba_ssm/ and tests/
#                                 (never committed; a REVISION file in it names its commit)
# Stages (STAGES chooses; each has its own time limit):
#   build     libzgate with CUDA (the library alone) in build/gpu-mamba
#   shipped   upstream's Mamba-3 SISO tests as shipped (tests/ops/triton/test_mamba3_siso*.py
#             and the SISO cases of tests/modules/test_mamba3*.py)
#   zgate     the same tests with zgate.torch.use_in_mamba_ssm() in force
#             (tests/mamba/mamba_pytest_plugin.py; a run where no call reached zgate fails)
#   compare   the error figures the tests print, the two runs side by side (from
#             build/gpu-mamba/{shipped,zgate}.err: this stage needs no GPU)
#   layer     tests/mamba/mamba_layer_check.py: the Mamba3 module's gradients against upstream's and
#             a float32 reference, the gate's errors and its share of the backward time, at
#             bf16, batch 2, seqlen 2048, 24 heads, headdim 64/128/80/96 (LAYER_ARGS adds
#             arguments, e.g. "--in-process --rep 10"; about 4 minutes a headdim)
# ZGATE_INSTALLED=1: no build stage; the zgate that python3 imports is tested (scripts/gpu-wheel.sh).
# UPSTREAM_PYTEST_ARGS adds pytest arguments to both test runs; SHIPPED_S and ZGATE_S set their
# limits in seconds (300 and 240). On an H200 upstream's autotuning takes minutes per test item
# (300 s did not finish the second), so with a 10-minute limit per command run one item a call:
#   UPSTREAM_PYTEST_ARGS="-k test_mamba3_siso_combined_batched" STAGES="build shipped zgate compare"
# mamba_ssm is imported without its __init__.py both times, so Mamba-1's CUDA extensions
# (selective_scan_cuda, causal_conv1d) need not be built. Logs in $OUT (build/gpu-out
# elsewhere): stage logs, the two runs' error lines (*.err, each ending with the pytest run's
# outcome) and layer.json; table last.
set -uo pipefail
MAMBA=$(cd "${1:?usage: scripts/gpu-mamba.sh PATH-TO-A-STATE-SPACES/MAMBA-CHECKOUT}" && pwd) || exit 2
cd "$(dirname "$0")/.."
if [ ! -d "$MAMBA/mamba_ssm/ops/triton/mamba3" ] || [ ! -d "$MAMBA/tests" ]; then
  echo "gpu-mamba: $MAMBA holds no mamba_ssm/ops/triton/mamba3 and tests/"; exit 2
fi
OUT=${OUT:-$PWD/build/gpu-out}; mkdir -p "$OUT"
BUILD=build/gpu-mamba ERRS=build/gpu-mamba
STAGES=${STAGES:-"build shipped zgate compare layer"}
source scripts/gpu-stage.sh
source scripts/gpu-cmake-flags.sh
gpu_cmake_flags -DZGATE_BUILD_TOOLS=OFF -DZGATE_BUILD_TESTS=OFF
mkdir -p "$ERRS"; ERRS=$(cd "$ERRS" && pwd)
export BUILD ERRS CFG OUT MAMBA PYTHONUNBUFFERED=1

# The SISO tests: every test_mamba3*.py of tests/ops/triton and tests/modules, less the MIMO
# cases (TileLang) of the module tests.
upstream_tests() { # run name
  cd "$MAMBA" || return 1
  local files=() f
  for f in tests/ops/triton/test_mamba3*.py tests/modules/test_mamba3*.py; do
    case "$f" in *mimo*) ;; *) [ -f "$f" ] && files+=("$f") ;; esac
  done
  echo "revision $(cat REVISION 2>/dev/null || echo unknown); tests: ${files[*]}"
  python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__, torch.cuda.get_device_name())'
  # -c /dev/null: no pytest configuration of an enclosing folder (this repository's) applies
  ZGATE_MAMBA_ERRORS=$ERRS/$1.err python3 -m pytest -c /dev/null --rootdir . \
    -p mamba_pytest_plugin -p no:cacheprovider \
    -q -rs --durations=10 ${UPSTREAM_PYTEST_ARGS:-} "${files[@]}" \
    --deselect "tests/modules/test_mamba3_varlen.py::test_mamba3_varlen_matches_nonvarlen[True]" \
    --deselect "tests/modules/test_mamba3_varlen.py::test_mamba3_varlen_backward[True]"
  local rc=$?
  cp "$ERRS/$1.err" "$OUT/" 2>/dev/null
  return $rc
}
compare() { # the error lines of both runs, which come in the same order
  [ -f "$ERRS/shipped.err" ] && [ -f "$ERRS/zgate.err" ] || { echo "compare: no $ERRS/shipped.err and zgate.err"; return 1; }
  echo "test | as shipped | with zgate"
  paste -d '\t' "$ERRS/shipped.err" "$ERRS/zgate.err" |
    awk -F'\t' '{ t = $1; sub(/^.*::/, "", t); if ($1 != $3) { print "MISMATCHED LINES: " $1 " / " $3; bad = 1 }
                  print t " | " $2 " | " $4 } END { exit bad }'
}
export -f upstream_tests compare

if [ "${ZGATE_INSTALLED:-0}" = 1 ]; then
  # zgate as installed for python3 (scripts/gpu-wheel.sh: the wheel), nothing built here
  export PYTHONPATH=$PWD/tests/mamba:$MAMBA
else
  stage build 180 'cmake -S . -B $BUILD $CFG && cmake --build $BUILD --target zgate zgate_python -j 16'
  gpu_python_package && export PYTHONPATH=$PYTHONPATH:$PWD/tests/mamba:$MAMBA
fi
stage shipped "${SHIPPED_S:-300}" 'ZGATE_MAMBA=0 upstream_tests shipped'
stage zgate "${ZGATE_S:-240}" 'ZGATE_MAMBA=1 upstream_tests zgate'
stage compare 10 compare
stage layer 520 'python3 tests/mamba/mamba_layer_check.py --mamba "$MAMBA" --json "$OUT/layer.json" ${LAYER_ARGS:-}'

for f in shipped zgate compare layer; do stage_tail $f 14; done
stage_summary
