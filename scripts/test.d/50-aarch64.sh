#!/usr/bin/env bash
# Stage: the aarch64 NEON path. Cross-compiles the library and its C tests with Debian's
# aarch64 cross compiler (cmake/toolchain-aarch64-linux-gnu.cmake; CUDA, tools and benchmarks off)
# and runs its C tests under qemu-user: every per-path test once with the NEON path forced
# (ZGATE_CPU_ISA=neon) and once with the scalar path (ZGATE_CPU_ISA=scalar), the same
# matrix as on x86, plus the path-independent tests and the documentation's examples.
# Budget: 12 min on 2 cores (emulation is slow: see the matrix choice below).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=build/aarch64
jobs=$(nproc 2>/dev/null || echo 2)

# what this stage needs beyond the test set: arm64 cmocka (Debian multiarch)
bash scripts/install-deps.sh debs gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user \
  libcmocka-dev:arm64 libcmocka0:arm64

# The C tests run through ZGATE_TEST_WRAPPER (tests/CMakeLists.txt): qemu-user with the cross
# loader and libc, as the toolchain file's CMAKE_CROSSCOMPILING_EMULATOR (which ctest applies
# to tests named by target, e.g. the documentation's examples).
qemu="$(command -v qemu-aarch64);-L;/usr/aarch64-linux-gnu;-E;LD_LIBRARY_PATH=/usr/aarch64-linux-gnu/lib"
cmake -S . -B "$build" -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-aarch64-linux-gnu.cmake \
  -DCMAKE_BUILD_TYPE=Release -DZGATE_CUDA=OFF -DZGATE_BUILD_TOOLS=OFF \
  -DZGATE_BUILD_TESTS=ON -DZGATE_TEST_TIMEOUT_SCALE=2 "-DZGATE_TEST_WRAPPER=$qemu" >/dev/null
cmake --build "$build" -j "$jobs" >/dev/null

# The library must have been built with the NEON path.
grep -q "ZGATE_HAVE_NEON" "$build"/src/CMakeFiles/zgate_objects.dir/flags.make \
  || { echo "50-aarch64: the aarch64 build has no NEON path"; exit 1; }

# One ctest entry per test and CPU path (<test>_neon, <test>_scalar), plus the documentation's
# examples. Every path runs the quick matrix (ZGATE_TEST_QUICK=1: every dtype combination
# kind, the QUICK shapes, every layout): the full one holds the model-size shapes (up to 77M
# elements) and takes over 20 minutes under qemu-user on 2 cores, the quick one 14 s.
# ZGATE_AARCH64_FULL=1 runs the NEON path's full matrix, as stage 10 does on x86. The CLI's
# tests drive the tool through host-side scripts and belong to stage 30.
neon_quick=1; [ "${ZGATE_AARCH64_FULL:-0}" = 1 ] && neon_quick=0
cd "$build"
status=0
echo "--- aarch64 under qemu-user: NEON path ($([ $neon_quick = 1 ] && echo quick || echo full) matrix)"
ZGATE_TEST_QUICK=$neon_quick OMP_NUM_THREADS=2 ctest -L '^neon$' -j "$jobs" --timeout 2400 \
  --output-on-failure || status=1
echo "--- aarch64 under qemu-user: scalar path and path-independent tests (quick), doc examples"
ZGATE_TEST_QUICK=1 OMP_NUM_THREADS=2 ctest -L '^(c|docs)$' -LE '^neon$' -j "$jobs" --timeout 600 \
  --output-on-failure || status=1
exit $status
