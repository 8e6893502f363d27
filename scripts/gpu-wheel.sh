#!/usr/bin/env bash
# The binary wheel (scripts/wheel.sh's dist/zgate-*.whl) on a GPU machine, installed as a user
# installs it: into the machine's Python (a venv that sees its packages, so PyTorch, Triton,
# NumPy are the machine's), offline, and run with no CUDA toolkit on PATH (the CUDA runtime is
# inside libzgate; only the driver is needed).
#
#   bash scripts/gpu-wheel.sh [MAMBA]    MAMBA: a state-spaces/mamba checkout (default
#                                        third_party_ref/mamba); carry dist and third_party_ref
# Stages (STAGES chooses; default "install check acceptance mamba"):
#   install     build/gpu-wheel/venv (--system-site-packages), the wheel installed with no index
#   check       tests/scripts/wheel_check.py --device cuda, PATH the venv's bin alone (no
#               compiler, CMake or nvcc): zgate.info() names the GPU, libzgate loads no
#               libcudart, import time, the CPU path against /proc/cpuinfo, the README examples
#   acceptance  python -m zgate.acceptance --device cuda --quick
#   mamba       upstream's Mamba-3 SISO tests with zgate.torch.use_in_mamba_ssm() in force
#               (scripts/gpu-mamba.sh's zgate stage on the installed zgate; a run in which no
#               call reached zgate fails); UPSTREAM_PYTEST_ARGS picks the tests, by default
#               "-k test_mamba3_siso_combined_batched" (upstream autotunes for minutes a test)
# acceptance and mamba run with the machine's PATH less every folder holding nvcc (Triton
# compiles its launcher with the machine's C compiler; its ptxas is its own), CUDA_HOME unset.
# Only the install stage installs: on a fresh machine name it first, e.g. STAGES="install mamba".
# Logs in $OUT (build/gpu-out elsewhere); table last.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
root=$PWD
unset PYTHONPATH   # zgate from the wheel alone
MAMBA=${1:-third_party_ref/mamba}
OUT=${OUT:-$PWD/build/gpu-out}; mkdir -p "$OUT"
STAGES=${STAGES:-"install check acceptance mamba"}
venv=$root/build/gpu-wheel/venv
source scripts/gpu-stage.sh
ls dist/zgate-*.whl >/dev/null 2>&1 ||
  { echo "gpu-wheel: no dist/zgate-*.whl (carry dist/: run scripts/wheel.sh first)"; exit 2; }

# The machine's PATH less the CUDA toolkit; nvcc must then be missing.
no_toolkit=$venv/bin
IFS=: read -ra dirs <<<"$PATH"
for d in "${dirs[@]}"; do
  [ -n "$d" ] && [ ! -x "$d/nvcc" ] && [[ "$d" != /usr/local/cuda* ]] && no_toolkit+=:$d
done
export NO_TOOLKIT_PATH=$no_toolkit VENV=$venv ROOT=$root MAMBA OUT

install_wheel() { # pip picks the wheel of dist/ that this Python and glibc take
  python3 -c 'import platform, sys; print("CPython", sys.version.split()[0], "glibc", platform.libc_ver()[1])'
  rm -rf "$VENV" && python3 -m venv --system-site-packages "$VENV" &&
    "$VENV/bin/python" -m pip install --no-index --no-deps --ignore-installed --disable-pip-version-check \
      --find-links "$ROOT/dist" zgate &&
    "$VENV/bin/python" -c 'import sys, zgate, torch
print(sys.version.split()[0], zgate.__file__, zgate.info()["build_info"])
print("torch", torch.__version__, "CUDA", torch.version.cuda)'
}
check_wheel() {
  cd "$OUT" && env -i HOME="$HOME" LANG=C.UTF-8 PATH="$VENV/bin" \
    python "$ROOT/tests/scripts/wheel_check.py" "$ROOT/README.md" --device cuda --require-all
}
without_toolkit() { # COMMAND...: run with the PATH above, CUDA_HOME unset, nvcc checked absent
  if PATH=$NO_TOOLKIT_PATH command -v nvcc; then echo "gpu-wheel: nvcc still on PATH"; return 1; fi
  env -u CUDA_HOME -u CUDA_PATH PATH="$NO_TOOLKIT_PATH" "$@"
}
acceptance() {
  cd "$OUT" && without_toolkit python -c 'import zgate; i = zgate.info()
print(zgate.__file__, i.get("cuda_devices") or i["cuda_unavailable"])' &&
    without_toolkit python -m zgate.acceptance --device cuda --quick --output "$OUT/acceptance.md"
}
mamba() {
  ZGATE_INSTALLED=1 STAGES=zgate OUT="$OUT/mamba" ZGATE_S=$((${ZGATE_S:-420} - 20)) \
    UPSTREAM_PYTEST_ARGS="${UPSTREAM_PYTEST_ARGS:--k test_mamba3_siso_combined_batched}" \
    without_toolkit bash "$ROOT/scripts/gpu-mamba.sh" "$MAMBA"
}
export -f install_wheel check_wheel without_toolkit acceptance mamba

stage install 120 install_wheel
stage check 180 check_wheel
stage acceptance 300 acceptance
stage mamba "${ZGATE_S:-420}" mamba

for f in install check acceptance; do stage_tail $f 14; done
[ ! -f "$OUT/mamba/zgate.log" ] || { echo "--- mamba (tail)"; grep -v "^$" "$OUT/mamba/zgate.log" | tail -n 14 | cut -c1-240; }
[ ! -f "$OUT/mamba/zgate.err" ] || { echo "--- mamba: error figures with zgate"; cut -c1-200 "$OUT/mamba/zgate.err"; }
echo
echo "wheel: $(cd "$venv/lib" 2>/dev/null && cat python3*/site-packages/zgate-*.dist-info/WHEEL 2>/dev/null | grep '^Tag' | tr '\n' ' ')"
stage_summary
