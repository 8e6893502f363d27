#!/usr/bin/env bash
# Installs what building and testing zgate needs, where it is missing (Debian + PyPI).
set -euo pipefail
SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
debs=(cmake make gcc g++ clang libdlpack-dev libcmocka-dev pkg-config valgrind gnuplot-nox
      gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user libclang-rt-14-dev
      libomp-14-dev)  # libomp-14-dev: OpenMP for the clang (sanitizer) build
missing=()
for p in "${debs[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: apt-get install ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
py=(numpy ml_dtypes pytest scikit-build-core)
python3 -m pip install -q --disable-pip-version-check "${py[@]}"
