#!/usr/bin/env bash
# Stage: the Python package. `pip wheel .` builds libzgate through CMake (scikit-build-core,
# CUDA backend where nvcc exists) into build/wheel/, pip installs that wheel, then pytest runs
# tests/python against the installed package. NumPy/ml_dtypes tests always run; PyTorch and
# JAX (CPU) are installed best-effort from PyPI so their tests run here too; CUDA, CuPy and
# JAX-GPU tests skip with their reason on a machine without a GPU. Budget: 8 min on 2 cores.
# ZGATE_PY_EXTRAS=0 skips installing PyTorch and JAX (their tests then skip).
set -euo pipefail
cd "$(dirname "$0")/../.."
py=python3
pip=("$py" -m pip install -q --disable-pip-version-check)

have() { "$py" -c "import $1" >/dev/null 2>&1; }

need=()
for m in numpy ml_dtypes pytest scikit_build_core; do have $m || need+=("$m"); done
if [ ${#need[@]} -gt 0 ]; then "${pip[@]}" "${need[@]}"; fi

if [ "${ZGATE_PY_EXTRAS:-1}" != 0 ]; then
  # PyPI's torch wheel brings the CUDA libraries (~3 GB; about 1.5 min here). Bounded, and
  # optional: if it does not arrive in time the PyTorch tests skip with their reason.
  if ! have torch; then
    timeout 300 "${pip[@]}" torch || echo "20-python: PyTorch not installed (its tests will skip)"
    have torch || "$py" -m pip uninstall -y -q torch >/dev/null 2>&1 || true
  fi
  have jax || timeout 120 "${pip[@]}" jax || echo "20-python: JAX not installed (its tests will skip)"
fi

# Build the wheel once (no build isolation: scikit-build-core is installed above, and the
# same command works offline) and install it; 70-ascend installs the same wheel into its venv.
log=$(mktemp)
rm -rf build/wheel
if ! "$py" -m pip wheel --no-build-isolation --no-deps --disable-pip-version-check \
     -w build/wheel . >"$log" 2>&1 ||
   ! "$py" -m pip install --no-deps --force-reinstall --disable-pip-version-check \
     build/wheel/zgate-*.whl >>"$log" 2>&1; then
  tail -n 60 "$log"; rm -f "$log"
  echo "20-python: building or installing the wheel failed"; exit 1
fi
rm -f "$log"

# Test the installed package (not python/ of the tree, and not a library named by hand).
unset PYTHONPATH
rc=0
"$py" -m pytest -q -rs -p no:cacheprovider tests/python || rc=$?
if [ "$rc" -eq 5 ]; then echo "20-python: pytest collected no tests"; exit 1; fi
exit "$rc"
