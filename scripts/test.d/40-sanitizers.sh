#!/usr/bin/env bash
# Stage: the C test suite and the doc examples (not the GPU tests; the CLI has its own stage)
# built with clang under AddressSanitizer + UndefinedBehaviorSanitizer
# (-DZGATE_SANITIZE=address,undefined: any report aborts the test). Leaks are errors too.
# Own build dir: build/ci-asan. Budget: 10 min on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=build/ci-asan
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
  -DZGATE_SANITIZE=address,undefined -DZGATE_CUDA=OFF -DZGATE_BUILD_TESTS=ON \
  -DZGATE_BUILD_TOOLS=OFF -DZGATE_TEST_WRAPPER= >/dev/null
cmake --build "$build" -j2
cd "$build"
export ASAN_OPTIONS="detect_leaks=1:detect_stack_use_after_return=1:check_initialization_order=1:strict_string_checks=1:halt_on_error=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
ctest -LE cuda -j2 --output-on-failure
