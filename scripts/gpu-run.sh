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
STAGES=${STAGES:-"build ctest big sanitize bench"}
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
# Build-time variants of the kernel (cuda_backend.cu's ZG_CUDA_* macros), each benchmarked
# (zgate only) in the same run; for docs/perf-notes.md. VARIANTS: ';'-separated flag sets.
VARIANTS=${VARIANTS:-"-DZG_CUDA_ITEMS=2;-DZG_CUDA_PIPE=1;-DZG_CUDA_ITEMS=1 -DZG_CUDA_MINB=4;-DZG_CUDA_COVER=1 -DZG_CUDA_ITEMS=1 -DZG_CUDA_MINB=4;-DZG_CUDA_COVER=1 -DZG_CUDA_ITEMS=1 -DZG_CUDA_MINB=4 -DZG_CUDA_STREAMING=1;-DZG_CUDA_STREAMING=1"}
export VARIANTS
variants() {
  local i=0 flags
  IFS=';' read -ra list <<<"$VARIANTS"
  for flags in "${list[@]}"; do
    (cmake -S . -B build/var$i $CFG -DZGATE_BUILD_TESTS=OFF "-DCMAKE_CUDA_FLAGS=$flags" >/dev/null &&
     cmake --build build/var$i --target zgate -j 4 >/dev/null) &
    i=$((i + 1))
  done
  wait
  i=0
  for flags in "${list[@]}"; do
    echo "### variant $i: $flags"
    python3 bench/gpu_bench.py --lib build/var$i/src/libzgate.so --impls zgate --json "build/var$i/bench.json" \
      ${VARIANT_BENCH_ARGS:---shapes 1,3,4,5,7 --rep 40} >"build/var$i/bench.log" 2>&1 || echo "variant $i failed"
    python3 - "build/var$i/bench.json" "$flags" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
groups = {}
for r in d["rows"]:
    groups.setdefault((r["dtype"], r["layout"]), []).append(r["zgate_frac"])
print("variant %-70s copy %4.0f GB/s | " % (sys.argv[2], d["copy_gbs"]) +
      " ".join("%s/%s %.1f-%.1f%%" % (k[0], k[1], 100 * min(v), 100 * max(v)) for k, v in groups.items()))
PY
    i=$((i + 1))
  done
}
export -f variants
stage variants 300 variants
BENCH="python3 bench/gpu_bench.py --lib $BUILD/src/libzgate.so --json $OUT/bench.json ${BENCH_ARGS:-}"
[ -d "$ORIG" ] && BENCH="$BENCH --orig $ORIG"
stage bench "${BENCH_LIMIT:-420}" "PYTHONUNBUFFERED=1 $BENCH"

echo; echo "stages:"; printf '  %s\n' "${summary[@]}"
[ -f "$OUT/bench.log" ] && sed -n '/^copy bandwidth/,$p' "$OUT/bench.log" | cut -c1-240
grep -h "worst error\|cases,\|big dense (\|big wide (\|FAIL" "$OUT"/ctest.log "$OUT"/big.log 2>/dev/null | cut -c1-300 | head -20
[ -f "$OUT/variants.log" ] && grep "^variant" "$OUT/variants.log"
! printf '%s\n' "${summary[@]}" | grep -q FAILED
