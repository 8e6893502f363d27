#!/usr/bin/env bash
# The MindSpeed-Ops tree as its maintainers would take it: `python -m zgate.mindspeed_ops`
# writes it (with upstream's original kernel when $UPSTREAM names a mamba checkout or an
# installed mamba_ssm folder), tests/mindspeed_ops_skeleton/apply.py puts it onto the skeleton
# of MindSpeed-Ops as the tree's README says, and the tree's unit tests run there with zgate
# unimportable (pytest's output in WORK/pytest.log, its junit XML in WORK/pytest.xml).
#   usage: scripts/msops-check.sh GEN_PYTHON TEST_PYTHON WORK [pytest arguments...]
# GEN_PYTHON imports zgate; TEST_PYTHON has torch and triton (TRITON_INTERPRET=1 in the
# environment for CPU tensors). Exit status: pytest's, or the generator's or apply.py's.
set -uo pipefail
cd "$(dirname "$0")/.."
gen_py=$1 test_py=$2; mkdir -p "$3"; work=$(cd "$3" && pwd); shift 3
rm -rf "$work/tree" "$work/repo"
"$gen_py" -m zgate.mindspeed_ops "$work/tree" ${UPSTREAM:+--upstream "$UPSTREAM"} >"$work/generate.log"
rc=$?
tail -n 1 "$work/generate.log"
# 3: written without upstream's kernel (no $UPSTREAM): its README row then names it missing
# and places nothing, and only CUDA runs of the unit tests need it
if [ $rc -ne 0 ] && { [ $rc -ne 3 ] || [ -n "${UPSTREAM:-}" ]; }; then exit $rc; fi
"$gen_py" tests/mindspeed_ops_skeleton/apply.py "$work/tree" "$work/repo" || exit $?
cd "$work/repo" && "$test_py" -c "
import sys
sys.modules['zgate'] = None         # the tree must not need zgate
import pytest
sys.exit(pytest.main(['-q', '-rA', '-p', 'no:cacheprovider', '-W', 'ignore::DeprecationWarning',
                      '--junitxml', '$work/pytest.xml', 'tests/unit_tests'] + sys.argv[1:]))" "$@" \
  >"$work/pytest.log" 2>&1
rc=$?
tail -n 1 "$work/pytest.log"
exit $rc
