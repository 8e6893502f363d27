"""The float64 oracle and numerics policy for the tests: zgate.oracle (pure NumPy, shipped
with the package so that `python -m zgate.selfcheck` judges by the same rules)."""
from zgate.oracle import (BF16, F16, F32, F32_ULPS, TINY, check, inputs, measure,  # noqa: F401
                          ref_bwd, ref_fwd, sigmoid, ulp)
