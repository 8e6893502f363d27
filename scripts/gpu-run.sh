#!/usr/bin/env bash
# Build, compare kernel variants, test, sanitize and benchmark the CUDA backend on a GPU
# machine, in one call.
#   scripts/gpu-run.sh            everything (build, first-call, smoke, variants, ctest of the
#                                 "cuda" label with its >2^31 tests, compute-sanitizer, bench);
#                                 STAGES may add "big" (the >2^31 tests alone), "inductor"
#                                 (torch.compile's generated code for two shapes, for reading)
#                                 and "profile" (ncu counters of zgate and torch.compile on
#                                 PROFILE_ROWS, bench/gpu_profile.py)
#   STAGES="build ctest" scripts/gpu-run.sh     a subset
#   VARIANTS="name=spec;name=spec" ...           several builds, each a full build in
#                                 build/var<i>; the variants stage times them side by side in
#                                 one process (bench/gpu_bench.py --variant-libs) and the
#                                 remaining stages test and benchmark the one with the highest
#                                 geomean fraction of copy bandwidth. A spec is either nvcc
#                                 flags for this tree (CMAKE_CUDA_FLAGS; empty: the shipped
#                                 build) or @REF: the library of git commit REF, built with the
#                                 default flags from its files exported to build/src-<name>.
#                                 The default, VARIANTS="", builds $BUILD only.
#   STAGES=export VARIANTS=...    only export the @REF sources (git archive), where the
#                                 repository is; the GPU machine's copy of the tree has no .git,
#                                 so export here and carry build/src-<name> with the call.
#                                 Same speed as the commit BASE before a change, in one run
#                                 (the GPU counterpart of scripts/cuda-sass-compare.py; the
#                                 full command is in docs/performance.md):
#                                   STAGES=export VARIANTS="new=;prev=@BASE" scripts/gpu-run.sh
#                                   then on the GPU, carrying build/src-prev (.export-ref
#                                   in it names the commit):
#                                   VARIANTS="new=;prev=@BASE" STAGES="build smoke variants" ...
#   FIRST_VARIANTS="0 1"          the builds whose first call the "first" stage measures in
#                                 fresh processes (tests/cuda/cuda_first_call.cu, and
#                                 bench/gpu_bench.py --first-call with PyTorch).
# Logs go to $OUT (build/gpu-out unless set), at most 8 files.
# Where the machine lacks libdlpack-dev / libcmocka-dev, headers and library copied from a
# Debian machine into build/gpu-deps (git-ignored) are used: see docs/performance.md.
# The original Triton kernel is benchmarked when third_party_ref/mamba3 (or
# ZGATE_ORIG_MAMBA3) exists; it is never committed.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/build/gpu-out}
mkdir -p "$OUT"
BUILD=${BUILD:-build/gpu}
STAGES=${STAGES:-"build first smoke variants ctest sanitize bench"}
ORIG=${ZGATE_ORIG_MAMBA3:-third_party_ref/mamba3}
# The kernels had build-time switches (ZG_CUDA_* macros) until 4 December 2026, and the
# variants measured with them are in docs/perf-notes.md; the shipped values are now plain
# constants, and an experiment is a commit, timed against the shipped one as NAME=@REF.
VARIANTS=${VARIANTS-""}
FIRST_VARIANTS=${FIRST_VARIANTS-"0 1"}
summary=()
START=$(date +%s)

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
} >"$OUT/build.log" 2>&1

source scripts/gpu-cmake-flags.sh
gpu_cmake_flags -DZGATE_BUILD_TOOLS=OFF
IFS=';' read -ra VLIST <<<"$VARIANTS"
export OUT BUILD CFG VARIANTS FIRST_VARIANTS

# build/src-<name> for each NAME=@REF variant: REF's files (git archive), its commit in
# build/src-<name>/.export-ref; an export of another commit is replaced. Without git (the
# GPU machine's copy of the tree) the export must already be there.
export_refs() {
  local spec name ref dir want list
  IFS=';' read -ra list <<<"$VARIANTS"
  for spec in "${list[@]}"; do
    name=${spec%%=*} ref=${spec#*=}
    [ "${ref#@}" != "$ref" ] || continue
    ref=${ref#@} dir=build/src-$name
    if git rev-parse --git-dir >/dev/null 2>&1; then
      want=$(git rev-parse --verify -q "$ref^{commit}") || { echo "$ref: not a commit"; return 1; }
      if [ "$(cat "$dir/.export-ref" 2>/dev/null)" != "$want" ]; then
        rm -rf "$dir" && mkdir -p "$dir" && git archive "$want" | tar -x -C "$dir" && echo "$want" >"$dir/.export-ref" || return 1
      fi
    elif [ ! -f "$dir/CMakeLists.txt" ]; then
      echo "$dir: missing, and no git here to export $ref (run STAGES=export where the repository is)"; return 1
    fi
    echo "$name: $dir, commit $(cat "$dir/.export-ref" 2>/dev/null || echo unknown)"
  done
}
export -f export_refs
stage export 60 export_refs
if [ "$STAGES" = export ]; then ! printf '%s\n' "${summary[@]}" | grep -q FAILED; exit; fi

build_one() { # dir spec (nvcc flags for this tree, or @REF: build/src-<name>)
  local src=. flags=$2
  if [ "${flags#@}" != "$flags" ]; then src=build/src-$3 flags=""; fi
  # a build dir configured from another source tree is started afresh
  if ! grep -qx "CMAKE_HOME_DIRECTORY:INTERNAL=$(cd "$src" && pwd)" "$1/CMakeCache.txt" 2>/dev/null; then rm -rf "$1"; fi
  cmake -S "$src" -B "$1" $CFG "-DCMAKE_CUDA_FLAGS=$flags" >"$1.cfg.log" 2>&1 &&
    cmake --build "$1" --target zgate test_cuda_gate cuda_first_call example_cuda_stream -j 6 >"$1.build.log" 2>&1 || { tail -30 "$1.cfg.log" "$1.build.log"; return 1; }
}
build() {
  local i=0 rc=0 spec pids=()
  export_refs || return 1
  if [ -z "$VARIANTS" ]; then build_one "$BUILD" "" || return 1; fi
  IFS=';' read -ra list <<<"$VARIANTS"
  for spec in "${list[@]}"; do
    mkdir -p build; build_one "build/var$i" "${spec#*=}" "${spec%%=*}" & pids+=($!); i=$((i + 1))
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  return $rc
}
export -f build build_one
stage build 150 build

# First call of each build in fresh processes: the C probe (context, then optionally
# cudaFuncGetAttributes of the kernel, then the first and second call, then another dtype's
# first call), with eager module loading once; then through PyTorch (context and tensors
# first, then libzgate loaded and called).
first() {
  local i d next r dirs
  if [ -n "$VARIANTS" ]; then dirs=""; for i in $FIRST_VARIANTS; do dirs="$dirs build/var$i"; done; else dirs=$BUILD; fi
  for b in $dirs; do
    for d in bf16 fp16 fp32; do
      next=$([ $d = bf16 ] && echo fp16 || echo bf16)
      for r in 1 2 3; do echo "$b $("$b/tests/cuda/cuda_first_call" $d --then $next)"; done
      echo "$b $("$b/tests/cuda/cuda_first_call" $d --attr)"
    done
    echo "$b $(CUDA_MODULE_LOADING=EAGER "$b/tests/cuda/cuda_first_call" bf16 --then fp16)"
  done
  for b in $dirs; do
    for d in bf16 fp16 fp32; do
      next=$([ $d = fp32 ] && echo bf16 || echo fp32)
      python3 bench/gpu_bench.py --lib "$b/src/libzgate.so" --first-call $d,$next | sed "s|^|$b |"
    done
  done
}
smoke() {
  local i=0 spec rc=0
  IFS=';' read -ra list <<<"$VARIANTS"
  for spec in "${list[@]}"; do
    echo "--- build/var$i (${spec%%=*})"; build/var$i/tests/cuda/test_cuda_gate --small | tail -2 || rc=1; i=$((i + 1))
  done
  return $rc
}
export -f first smoke
stage first 150 first
[ -n "$VARIANTS" ] && stage smoke 60 smoke

variants() {
  local i=0 spec libs=""
  IFS=';' read -ra list <<<"$VARIANTS"
  for spec in "${list[@]}"; do libs="$libs${libs:+,}${spec%%=*}=build/var$i/src/libzgate.so"; i=$((i + 1)); done
  PYTHONUNBUFFERED=1 python3 bench/gpu_bench.py --lib build/var0/src/libzgate.so --impls "${VARIANT_IMPLS-compile}" --quick \
    --variant-libs "$libs" ${VARIANT_BENCH_ARGS:---shapes 1,2,3,5,7 --rep 30 --clean-flush} --json "$OUT/variants.json" || return 1
  python3 - "$OUT/variants.json" "$VARIANTS" <<'PY'
import json, math, statistics, sys
d = json.load(open(sys.argv[1]))
names = [s.split("=", 1)[0] for s in sys.argv[2].split(";")]
score = {n: math.exp(statistics.fmean(math.log(r[n + "_frac"]) for r in d["rows"])) for n in names}
for n in names:
    g = {}
    for r in d["rows"]:
        g.setdefault((r["dtype"], r["layout"]), []).append(r[n + "_frac"])
    print("variant %-8s geomean %.2f%% | " % (n, 100 * score[n]) +
          " ".join("%s/%s %.1f-%.1f" % (k[0], k[1], 100 * min(v), 100 * max(v)) for k, v in g.items()))
ok = [n for n in names if max(r[n + "_err"] for r in d["rows"]) < 1e-2]
best = max(ok, key=lambda n: score[n])
print("chosen:", best, "(index %d)" % names.index(best))
open("build/chosen", "w").write(str(names.index(best)))
PY
}
export -f variants
if [ -n "$VARIANTS" ]; then
  rm -f build/chosen
  stage variants ${VARIANTS_LIMIT:-240} variants
  [ -f build/chosen ] || echo 0 >build/chosen # no comparison: the first build (the defaults)
  BUILD=build/var$(cat build/chosen)
  echo "tests and benchmark use $BUILD (${VLIST[$(cat build/chosen)]})" | tee -a "$OUT/variants.log"
  export BUILD
fi
{ # resource use and vector widths of the kernels tested, for docs/perf-notes.md
  echo "--- $BUILD: registers per kernel (count)"
  cuobjdump -res-usage "$BUILD"/src/libzgate.so 2>/dev/null | grep -A1 gate_kernel | grep -o "REG:[0-9]*" | sort | uniq -c
  echo "--- global accesses in the fatbin:"
  cuobjdump -sass "$BUILD"/src/libzgate.so 2>/dev/null | grep -oE "(LDG|STG)\.E[.A-Z0-9]*" | sort | uniq -c
  ldd "$BUILD"/src/libzgate.so | grep -i cuda
} >>"$OUT/build.log" 2>&1

stage ctest 180 'ctest --test-dir "$BUILD" -V -L cuda'
stage big 60 '"$BUILD/tests/cuda/test_cuda_gate" --big'
sanitize() {
  set -o pipefail; local rc=0
  for tool in memcheck racecheck initcheck; do
    echo "--- compute-sanitizer --tool $tool"
    compute-sanitizer --tool "$tool" --error-exitcode 99 "$BUILD/tests/cuda/test_cuda_gate" --small | tail -4 || rc=1
  done
  return $rc
}
export -f sanitize
stage sanitize 90 sanitize
inductor() { # torch.compile's kernels for two rows where it was faster (2 December 2026)
  TORCH_LOGS=output_code python3 - <<'PY' 2>&1 | grep -v "^\s*$" | head -400
import sys, torch
sys.path.insert(0, "bench")
from gpu_bench import SHAPES, formula, make_inputs
f = torch.compile(formula)
for dt, lay in ((torch.float32, "proj"), (torch.bfloat16, "dense")):
    dout, z, o, _ = make_inputs(SHAPES[2], dt, lay, 0)
    f(dout, z, o)
    torch.cuda.synchronize()
PY
}
export -f inductor
stage inductor 90 inductor
profile() { # ncu's counters for zgate and torch.compile on PROFILE_ROWS ("dtype:layout:shape ...")
  local m=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,launch__grid_size,launch__block_size
  m=$m,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum
  m=$m,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_write.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed
  for row in ${PROFILE_ROWS:-fp32:proj:2 fp32:dense:2}; do
    IFS=: read -r d l sh <<<"$row"
    echo "--- $row"
    ncu --profile-from-start off --clock-control none -k 'regex:gate_kernel|triton' --metrics "$m" \
      python3 bench/gpu_profile.py --lib "$BUILD/src/libzgate.so" --dtype "$d" --layout "$l" --shape "$sh" --co
  done
}
export -f profile
stage profile 150 profile
BENCH="python3 bench/gpu_bench.py --lib $BUILD/src/libzgate.so --json $OUT/bench.json ${BENCH_ARGS:-}"
[ -d "$ORIG" ] && BENCH="$BENCH --orig $ORIG"
# RUN_BUDGET (seconds for the whole script): the benchmark gets what is left, less 15 s, and
# starts no new row in its last 10 s (--deadline), so that its summary is printed
START=${START:-$(date +%s)}
if [ -n "${RUN_BUDGET:-}" ]; then
  BENCH_LIMIT=$(( RUN_BUDGET - ($(date +%s) - START) - 15 ))
  BENCH="$BENCH --deadline $(( BENCH_LIMIT - 10 ))"
fi
stage bench "${BENCH_LIMIT:-420}" "PYTHONUNBUFFERED=1 $BENCH"

echo; echo "stages:"; printf '  %s\n' "${summary[@]}"
[ -f "$OUT/first.log" ] && python3 bench/gpu_bench.py --first-call-summary "$OUT/first.log"
grep -h "^variant\|^chosen\|^tests and" "$OUT/variants.log" 2>/dev/null
[ -f "$OUT/bench.log" ] && sed -n '/^copy bandwidth/,$p' "$OUT/bench.log" | cut -c1-200
grep -h "worst error\|cases,\|big dense (\|big wide (\|FAIL\|ERROR SUMMARY\|RACECHECK SUMMARY" "$OUT"/ctest.log "$OUT"/big.log "$OUT"/sanitize.log 2>/dev/null | cut -c1-200 | head -20
! printf '%s\n' "${summary[@]}" | grep -q FAILED
