#!/usr/bin/env bash
# Installs, where missing, what zgate needs on Debian (apt-get; sudo unless root):
#   install-deps.sh main        what scripts/run.sh uses: build the library and the `zgate`
#                               command, draw the benchmark chart
#   install-deps.sh test        (the default) that plus what the test suite (scripts/test.sh)
#                               uses, including its Python packages (pip)
#   install-deps.sh debs PKG... the Debian packages named (a test stage's own); a PKG:arm64
#                               adds the arm64 architecture first
set -euo pipefail
set_name=${1:-test}
SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"

main_debs=(cmake make gcc libc6-dev libdlpack-dev gnuplot-nox)  # libc6-dev: gcc only recommends it
test_debs=(g++ clang libcmocka-dev pkg-config valgrind
           gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user libclang-rt-14-dev
           libomp-14-dev)  # libomp-14-dev: OpenMP for the clang (sanitizer) build
case "$set_name" in
  main) debs=("${main_debs[@]}") ;;
  test) debs=("${main_debs[@]}" "${test_debs[@]}") ;;
  debs) shift; debs=("$@") ;;
  *) echo "usage: install-deps.sh [main|test|debs PKG...]" >&2; exit 2 ;;
esac
# The Python package's compiled binding (zgate._binding) needs the interpreter's headers; Debian's
# python3 has them in python3-dev (an interpreter of its own, e.g. pyenv's, brings its own).
if [ "$set_name" = test ] &&
   [ ! -f "$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])' 2>/dev/null)/Python.h" ]; then
  debs+=(python3-dev)
fi
# nvcc compiles its host code with g++: where CUDA is installed, the main job needs it too.
if [ "$set_name" = main ] && { command -v nvcc || [ -x /usr/local/cuda/bin/nvcc ]; } >/dev/null; then
  debs+=(g++)
fi

missing=()
for p in "${debs[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: apt-get install ${missing[*]}"
  case " ${missing[*]}" in *:arm64*) dpkg --print-foreign-architectures | grep -qx arm64 || $SUDO dpkg --add-architecture arm64 ;; esac
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if [ "$set_name" = test ]; then
  python3 -m pip install -q --disable-pip-version-check numpy ml_dtypes pytest scikit-build-core
fi
