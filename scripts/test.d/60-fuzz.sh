#!/usr/bin/env bash
# Stage: the libFuzzer target on zgate's API validation, calls of every rank 0..8 and beyond
# (tests/fuzz/, docs/reliability.md): clang, -DZGATE_FUZZ=ON, ASan + UBSan, no CUDA (CUDA
# tensors are fuzzed as validation only). The committed seed corpus is replayed (ctest
# fuzz_corpus_replay), then the fuzzer runs for ZGATE_FUZZ_SECONDS (60) from a temporary copy.
# Any crash, leak, sanitizer report or harness contract violation fails the stage; the
# failing input is kept under build/ci-fuzz/artifacts/ and printed in base64. Last, a table
# of the run's corpus by rank.
# Needs clang's runtime (Debian libclang-rt-14-dev). Own build dir: build/ci-fuzz.
# Budget: about 3 min on 2 cores (build ~1 min, replay seconds, fuzzing 60 s).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=build/ci-fuzz
seconds=${ZGATE_FUZZ_SECONDS:-60}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
  -DZGATE_SANITIZE=address,undefined -DZGATE_FUZZ=ON -DZGATE_CUDA=OFF -DZGATE_BUILD_TESTS=ON \
  -DZGATE_BUILD_TOOLS=OFF -DZGATE_TEST_WRAPPER= >/dev/null
cmake --build "$build" -j2 --target zgate_fuzz_api zgate_fuzz_replay

export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:strict_string_checks=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
(cd "$build" && ctest -R '^fuzz_corpus_replay$' --output-on-failure)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus" "$build/artifacts"
cp tests/fuzz/corpus/* "$work/corpus/"
log="$build/fuzz.log"
echo "60-fuzz: fuzzing for ${seconds} s from $(ls tests/fuzz/corpus | wc -l) seeds (log: $log)"
rc=0
timeout $((seconds + 120)) "$build/tests/fuzz/zgate_fuzz_api" "$work/corpus" \
  -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 -max_len=512 \
  -artifact_prefix="$build/artifacts/" -print_final_stats=1 >"$log" 2>&1 || rc=$?
grep -E '^stat::(number_of_executed_units|average_exec_per_sec|new_units_added|peak_rss_mb)' "$log" || true
if [ $rc -ne 0 ]; then
  echo "60-fuzz: FAILED (exit $rc); the report:"
  grep -v -E '^#[0-9]+\s+(NEW|REDUCE|pulse)' "$log" | tail -60
  for a in "$build"/artifacts/*; do [ -f "$a" ] && echo "input $a: $(base64 -w0 "$a")"; done
  exit 1
fi
echo "60-fuzz: no crash, leak, sanitizer report or contract violation in ${seconds} s"
# The run's corpus replayed, each case counted by rank ("mixed": tensors of different ndim)
echo "60-fuzz: the run's corpus by rank"
printf '%10s %9s %9s\n' rank accepted refused
ZGATE_FUZZ_VERBOSE=1 "$build/tests/fuzz/zgate_fuzz_replay" "$work/corpus" 2>&1 >/dev/null |
  awk '/^fuzz case:/ { seen[$5] = 1; if ($7 == "0") ok[$5]++; else no[$5]++ }
       END { for (r in seen) printf "%10s %9d %9d\n", r, ok[r], no[r] }' | sort -g
