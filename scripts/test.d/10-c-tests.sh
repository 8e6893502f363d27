#!/usr/bin/env bash
# Stage: the C test suite (cmocka under ctest, label "c"), release build with gcc, without
# CUDA (so the "no CUDA" status is exercised). Every CPU path built runs once per test
# binary; a path this CPU cannot run (AVX-512 here) is reported as skipped, not passed.
# Own build dir: build/ci-release. Budget: 8 min on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=build/ci-release
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=gcc -DZGATE_CUDA=OFF \
  -DZGATE_BUILD_TESTS=ON -DZGATE_BUILD_TOOLS=OFF -DZGATE_TEST_WRAPPER= >/dev/null
cmake --build "$build" -j2
cd "$build"
ctest -L '^c$' -j2 --output-on-failure
