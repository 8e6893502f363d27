#!/usr/bin/env bash
# Stage: installing. First, scripts/install-deps.sh asks for the main job's set or the test
# suite's as told (tests/scripts/install_deps_sets.sh, with stubs: nothing is installed).
# Then what `cmake --install` gives a user: the library and the `zgate` command are
# installed into a temporary prefix, which is then moved (an install must be relocatable),
# and with no LD_LIBRARY_PATH and no ldconfig:
#   - P/bin/zgate info runs, and loads P's libzgate;
#   - the README's C example (docs/examples/bwd_dense.c), built with
#     `pkg-config --cflags --libs zgate`, runs and loads P's libzgate;
#   - the same example from a CMake project with find_package(zgate), linked to
#     zgate::zgate and to zgate::zgate_static, runs.
# Twice: with the default libdir (lib) and with a deeper one (lib/<multiarch>, what
# GNUInstallDirs picks for /usr on Debian), so the relative RPATH is checked at both depths.
# Own build dir: build/ci-install. Budget: 2 min on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
src=$PWD
build=build/ci-install
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
unset LD_LIBRARY_PATH

bash tests/scripts/install_deps_sets.sh

# Fails unless program $1 (with its arguments) loads libzgate from under prefix $2.
loads_from() {
  local prefix=$1 found; shift
  found=$(ldd "$1" | grep 'libzgate\.so' || true)
  [[ "$found" == *"=> $prefix/"* ]] ||
    { echo "35-install: $1 does not load libzgate from $prefix: ldd says '${found:-no libzgate}'"; return 1; }
  "$@" >"$work/out.txt" || { cat "$work/out.txt"; echo "35-install: $* failed"; return 1; }
}

check_layout() {
  local libdir=$1
  echo "--- libdir $libdir"
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DZGATE_CUDA=OFF -DZGATE_BUILD_TESTS=OFF \
    -DZGATE_BUILD_TOOLS=ON "-DCMAKE_INSTALL_LIBDIR=$libdir" >/dev/null
  cmake --build "$build" -j2 >/dev/null
  rm -rf "$work/staged" "$work/prefix"
  cmake --install "$build" --prefix "$work/staged" >/dev/null
  mv "$work/staged" "$work/prefix"
  local P=$work/prefix

  loads_from "$P" "$P/bin/zgate" info
  grep -q "CPU path chosen" "$work/out.txt" || { cat "$work/out.txt"; return 1; }
  echo "installed zgate info: ok"

  local pc
  pc=$(PKG_CONFIG_PATH="$P/$libdir/pkgconfig" pkg-config --cflags --libs zgate)
  # shellcheck disable=SC2086  # the flags are words
  cc -O2 -o "$work/bwd_dense_pc" docs/examples/bwd_dense.c $pc -lm
  loads_from "$P" "$work/bwd_dense_pc"
  echo "pkg-config example ($pc): $(cat "$work/out.txt")"

  mkdir -p "$work/consumer"
  cat >"$work/consumer/CMakeLists.txt" <<EOF
cmake_minimum_required(VERSION $(sed -n 's/^cmake_minimum_required(VERSION \([0-9.]*\)).*/\1/p' CMakeLists.txt))
project(zgate_consumer LANGUAGES C)
find_package(zgate 0.1 REQUIRED)
add_executable(bwd_dense "$src/docs/examples/bwd_dense.c")
target_link_libraries(bwd_dense PRIVATE zgate::zgate m)
add_executable(bwd_dense_static "$src/docs/examples/bwd_dense.c")
target_link_libraries(bwd_dense_static PRIVATE zgate::zgate_static m)
EOF
  rm -rf "$work/consumer-build"
  cmake -S "$work/consumer" -B "$work/consumer-build" "-DCMAKE_PREFIX_PATH=$P" >/dev/null
  cmake --build "$work/consumer-build" -j2 >/dev/null
  loads_from "$P" "$work/consumer-build/bwd_dense"
  echo "find_package example (zgate::zgate): $(cat "$work/out.txt")"
  "$work/consumer-build/bwd_dense_static" >"$work/out.txt"
  if ldd "$work/consumer-build/bwd_dense_static" | grep -q libzgate; then
    echo "35-install: bwd_dense_static loads a shared libzgate"; return 1
  fi
  echo "find_package example (zgate::zgate_static): $(cat "$work/out.txt")"
}

check_layout lib
multiarch=$(cc -print-multiarch 2>/dev/null || true)
check_layout "lib/${multiarch:-zgate-arch}"
echo "35-install: the installed command, pkg-config and find_package consumers all run"
