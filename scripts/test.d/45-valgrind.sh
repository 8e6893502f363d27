#!/usr/bin/env bash
# Stage: the scalar CPU path under Valgrind memcheck, quick matrix (ZGATE_TEST_QUICK=1):
# the oracle self-test, validation (every bad input, nothing written), and the scalar
# accuracy, special-value and huge-offset tests. Any memcheck error or definite leak fails
# the test (--error-exitcode=1). Own build dir: build/ci-valgrind. Budget: 8 min on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=build/ci-valgrind
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=gcc -DZGATE_CUDA=OFF \
  -DZGATE_BUILD_TESTS=ON -DZGATE_BUILD_TOOLS=OFF \
  "-DZGATE_TEST_WRAPPER=valgrind;--error-exitcode=1;--leak-check=full;--errors-for-leak-kinds=definite;--show-leak-kinds=definite" >/dev/null
cmake --build "$build" -j2 --target test_check test_validation test_accuracy test_special test_huge_offsets
cd "$build"
# OpenMP threads wait passively: Valgrind runs one thread at a time, spinning only burns it.
export ZGATE_TEST_QUICK=1 OMP_WAIT_POLICY=passive
ctest -R '^(test_check|test_validation|test_(accuracy|special|huge_offsets)_scalar)$' -j2 --output-on-failure
