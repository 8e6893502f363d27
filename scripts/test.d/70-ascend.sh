#!/usr/bin/env bash
# Stage: zgate.triton, the Triton kernel for Ascend NPUs and NVIDIA GPUs, without either.
#  1. tests/triton: the kernel under the Triton interpreter on CPU tensors (the Python that
#     20-python set up: PyTorch and upstream Triton) against the float64 reference.
#  2. tests/ascend, in a venv of its own with triton-ascend and ascendnpu-ir (they must not
#     share an environment with upstream triton): triton-ascend's linalg lowering of the
#     kernel executed on x86 (Debian's mlir-19-tools, llvm-19, clang-19, libclang-rt-19-dev),
#     and the compile for Ascend 910B2/B3/B4 and the A3 targets (Ascend910_93xx) down to the
#     final HIVM IR with its UB plan.
#     zgate is the wheel 20-python built (build/wheel; built here when absent): its compiled
#     binding judges the outputs by the C policy.
#  3. The MindSpeed-Ops tree (python -m zgate.mindspeed_ops --upstream: a mamba checkout from
#     $ZGATE_UPSTREAM_MAMBA or third_party_ref/mamba where there is one, else the stand-in of
#     tests/triton/fake_mamba.py, as on a fresh clone) applied, as its README says, to the
#     skeleton of MindSpeed-Ops in tests/mindspeed_ops_skeleton (scripts/msops-check.sh); its
#     unit tests there under triton-ascend's interpreter, in a venv over this Python's PyTorch
#     (--system-site-packages, its triton-ascend shadowing upstream triton) where `import
#     zgate` fails: at least 10 cases pass within 60 s, none skips or fails. Its kernel's HIVM
#     compile is in tests/ascend (step 2).
# A tool that cannot be installed fails the stage; nothing here skips.
set -euo pipefail
cd "$(dirname "$0")/../.."
py=python3
root=$PWD

# libclang-rt-19-dev: the builtins that tests/ascend links the lowered kernels with (--rtlib=compiler-rt)
bash scripts/install-deps.sh debs mlir-19-tools llvm-19 clang-19 libmlir-19 libclang-rt-19-dev

# 1. interpreter, upstream Triton (comes with PyTorch)
if ! "$py" -c "import torch, triton" 2>/dev/null; then
  timeout 600 "$py" -m pip install -q --disable-pip-version-check torch
fi
"$py" -c "import torch, triton; print('70-ascend: torch', torch.__version__, 'triton', triton.__version__)"
# against the package that 20-python installed (zgate.bwd needs its compiled binding)
"$py" -m pytest -q -p no:cacheprovider tests/triton

# 2. triton-ascend venv
venv=${ZGATE_ASCEND_VENV:-$root/build/venv-ascend}
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import triton.backends.ascend, ascendnpuir" 2>/dev/null; then
  rm -rf "$venv"
  "$py" -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "triton-ascend==3.2.0" \
    "ascendnpu-ir==1.2.0" pybind11 "numpy<2.4" ml_dtypes pytest
fi
ls build/wheel/zgate-*.whl >/dev/null 2>&1 ||
  "$py" -m pip wheel -q --no-build-isolation --no-deps --disable-pip-version-check -w build/wheel .
wheel=$(ls build/wheel/zgate-*.whl | head -n 1)
"$venv/bin/pip" install -q --disable-pip-version-check --no-deps --force-reinstall "$wheel"
"$venv/bin/python" -c "import triton; from triton.backends import backends; assert 'ascend' in backends; print('70-ascend: triton-ascend', triton.__version__)"
# from the repository root but against the installed package (python/ is not on the path)
"$venv/bin/python" -m pytest -q -p no:cacheprovider tests/ascend

# 3. the MindSpeed-Ops tree, standalone: PyTorch from this Python, triton-ascend over it
tvenv=${ZGATE_ASCEND_TORCH_VENV:-$venv-torch}
if [ ! -x "$tvenv/bin/python" ] || ! "$tvenv/bin/python" -c "import torch; from triton.backends import backends; assert 'ascend' in backends" 2>/dev/null; then
  rm -rf "$tvenv"
  "$py" -m venv --system-site-packages "$tvenv"
  "$tvenv/bin/pip" install -q --disable-pip-version-check "triton-ascend==3.2.0" pybind11 "numpy<2.4"
fi
"$tvenv/bin/python" -c "from triton.backends import backends; assert 'ascend' in backends, 'not triton-ascend'"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
up=${ZGATE_UPSTREAM_MAMBA:-$root/third_party_ref/mamba}
if [ ! -d "$up" ]; then    # no checkout (third_party_ref/ is never committed): the stand-in
  up=$work/fake-mamba
  PYTHONPATH=tests/triton "$py" -c "import fake_mamba, sys; fake_mamba.write(sys.argv[1])" "$up"
fi
t0=$(date +%s)
UPSTREAM=$up TRITON_INTERPRET=1 scripts/msops-check.sh "$venv/bin/python" "$tvenv/bin/python" "$work" ||
  { tail -n 30 "$work/pytest.log" 2>/dev/null; echo "70-ascend: the MindSpeed-Ops tree's unit tests failed"; exit 1; }
secs=$(( $(date +%s) - t0 ))
summary=$(tail -n 1 "$work/pytest.log")      # pytest's last line: "N passed, ... in S s"
passed=$(grep -oE '[0-9]+ passed' <<<"$summary" | cut -d' ' -f1)
if [ "${passed:-0}" -lt 10 ] || grep -qE '[0-9]+ (skipped|failed|errors?)' <<<"$summary"; then
  echo "70-ascend: the MindSpeed-Ops tree's unit tests: ${passed:-0} passed, need 10 or more and no skip or failure"
  exit 1
fi
if [ "$secs" -gt 60 ]; then
  echo "70-ascend: the MindSpeed-Ops tree's unit tests took ${secs} s, over 60 s"
  exit 1
fi
echo "70-ascend: MindSpeed-Ops tree on the skeleton: $passed unit tests passed in ${secs} s under triton-ascend's interpreter without zgate; upstream's kernel from: $up"
