#!/usr/bin/env bash
# Build, test, sanitize and benchmark the CUDA backend on a GPU machine, in one call.
#   scripts/gpu-run.sh            everything (build, ctest, bench, >2^31 test, compute-sanitizer)
#   STAGES="build ctest" scripts/gpu-run.sh     a subset
# Logs go to $OUT (the device tool's output folder; build/gpu-out elsewhere), at most 8 files.
# Where the machine lacks libdlpack-dev / libcmocka-dev, headers and library copied from a
# Debian machine into build/gpu-deps (git-ignored) are used: see docs/performance.md.
# The original Triton kernel is benchmarked when third_party_ref/mamba3 (or
# ZGATE_ORIG_MAMBA3) exists; it is never committed.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/build/gpu-out}
mkdir -p "$OUT"
BUILD=${BUILD:-build/gpu}
STAGES=${STAGES:-"build ctest bench big sanitize"}
ORIG=${ZGATE_ORIG_MAMBA3:-third_party_ref/mamba3}
DEPS=$PWD/build/gpu-deps
summary=()

stage() { # name timeout 'shell command' (run by bash -c, so functions are exported)
  local name=$1 limit=$2 cmd=$3
  case " $STAGES " in *" $name "*) ;; *) return 0 ;; esac
  local start=$(date +%s) r
  if timeout "$limit" bash -c "$cmd" >>"$OUT/$name.log" 2>&1; then r=ok; else r="FAILED (exit $?)"; fi
  summary+=("$(printf '%-9s %-16s %4d s' "$name" "$r" $(( $(date +%s) - start )))")
  echo "== $name: $r" | tee -a "$OUT/$name.log"
}

{
  date -u; uname -m; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv
  nvcc --version | tail -1; python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
} >"$OUT/env.txt" 2>&1

CFG="-DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DZGATE_CUDA=ON -DZGATE_BUILD_TOOLS=OFF -DZGATE_BUILD_BENCH=OFF"
[ -f /usr/include/dlpack/dlpack.h ] || CFG="$CFG -DDLPACK_INCLUDE_DIR=$DEPS/include"
if [ ! -f /usr/include/cmocka.h ] && [ -f "$DEPS/include/cmocka.h" ]; then
  CFG="$CFG -DCMOCKA_INCLUDE_DIR=$DEPS/include -DCMOCKA_LIB=$DEPS/lib/libcmocka.so"
  export LD_LIBRARY_PATH="$DEPS/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
command -v ninja >/dev/null && CFG="$CFG -G Ninja"
export OUT BUILD CFG

build() {
  cmake -S . -B "$BUILD" $CFG && cmake --build "$BUILD" -j "$(nproc)" || return 1
  # resource use and vector widths of the kernels, for docs/perf-notes.md
  cuobjdump -res-usage "$BUILD"/src/libzgate.so 2>/dev/null | grep -A1 gate_kernel | grep -o "REG:[0-9]*" | sort | uniq -c
  echo "16-byte loads/stores in the fatbin:"; cuobjdump -sass "$BUILD"/src/libzgate.so 2>/dev/null | grep -oE "(LDG|STG)\.E\.128" | sort | uniq -c
  return 0
}
export -f build
stage build 200 build
stage ctest 150 'ctest --test-dir "$BUILD" -V -R cuda_gate -E cuda_gate_big'
stage big 90 '"$BUILD/tests/cuda/test_cuda_gate" --big'
sanitize() {
  set -o pipefail; local rc=0
  for tool in memcheck racecheck initcheck; do
    echo "--- compute-sanitizer --tool $tool"
    compute-sanitizer --tool "$tool" --error-exitcode 99 "$BUILD/tests/cuda/test_cuda_gate" --small | tail -4 || rc=1
  done
  return $rc
}
export -f sanitize
stage sanitize 150 sanitize
BENCH="python3 bench/gpu_bench.py --lib $BUILD/src/libzgate.so --json $OUT/bench.json ${BENCH_ARGS:-}"
[ -d "$ORIG" ] && BENCH="$BENCH --orig $ORIG"
stage bench "${BENCH_LIMIT:-420}" "PYTHONUNBUFFERED=1 $BENCH"

echo; echo "stages:"; printf '  %s\n' "${summary[@]}"
[ -f "$OUT/bench.log" ] && sed -n '/^copy bandwidth/,$p' "$OUT/bench.log" | cut -c1-240
grep -h "worst error\|cases,\|big dense (\|big wide (" "$OUT"/ctest.log "$OUT"/big.log 2>/dev/null | head -8
! printf '%s\n' "${summary[@]}" | grep -q FAILED
