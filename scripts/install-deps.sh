#!/usr/bin/env bash
# Installs, where missing, what zgate needs on Debian (apt-get; sudo unless root):
#   install-deps.sh main   what scripts/run.sh uses: build the library and the `zgate` command,
#                          draw the benchmark chart
#   install-deps.sh test   (the default) that plus what the test suite (scripts/test.sh)
#                          uses, including its Python packages (pip)
set -euo pipefail
set_name=${1:-test}
case "$set_name" in main | test) ;; *) echo "usage: install-deps.sh [main|test]" >&2; exit 2 ;; esac
SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"

# One list: the main job's packages, and what only the test suite adds to them.
main_debs=(cmake make gcc libc6-dev libdlpack-dev gnuplot-nox)  # libc6-dev: gcc only recommends it
test_debs=(g++ clang libcmocka-dev pkg-config valgrind
           gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user libclang-rt-14-dev
           libomp-14-dev)  # libomp-14-dev: OpenMP for the clang (sanitizer) build
test_py=(numpy ml_dtypes pytest scikit-build-core)

debs=("${main_debs[@]}")
[ "$set_name" = test ] && debs+=("${test_debs[@]}")
# The Python package's compiled binding (zgate._binding) needs the interpreter's headers; Debian's
# python3 has them in python3-dev (an interpreter of its own, e.g. pyenv's, brings its own).
if [ "$set_name" = test ] && ! python3 -c 'import os, sysconfig, sys
sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' 2>/dev/null; then
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
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if [ "$set_name" = test ]; then
  python3 -m pip install -q --disable-pip-version-check "${test_py[@]}"
fi
