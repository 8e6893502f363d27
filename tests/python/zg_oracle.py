"""The tests' judge: zgate's accuracy policy, check/zgate_check.c through
zgate._binding.check_tensor (zgate.cases.judge), against the library's float64 reference
(zgate.reference_bwd/fwd); and the tests' random inputs (zgate.cases)."""
import numpy as np

import zgate
from zgate.cases import BF16, F32_ULPS, judge, random_inputs as inputs  # noqa: F401

F32, F16 = np.dtype(np.float32), np.dtype(np.float16)


def check(quantity, got, ref, dout, z, o, f32_ulps=F32_ULPS):
    """Assert that `got`, output `quantity` ("dz", "dout_scaled" or "out"; NumPy, any float
    dtype), meets the policy against the float64 `ref` computed from the NumPy inputs (dout
    None for "out"). f32_ulps: the float32 bound in ulps of the scale (zgate.cases.judge)."""
    got = np.asarray(got)
    st = judge(quantity, got, ref, dout, z, o, f32_ulps)
    if not st["ok"]:
        raise AssertionError(
            "%s (%s): %d of %d elements out of tolerance (%d NaN, %d inf mismatches); first "
            "at flat index %d: got %r ref %r (worst %.3g of the bound)" % (
                quantity, got.dtype, st["failures"], st["count"], st["nan_mismatches"],
                st["inf_mismatches"], st["first_fail"], st["first_got"], st["first_ref"],
                st["max_bound_ratio"]))
    return st


def check_bwd(dout, z, o, dz, dout_scaled, f32_ulps=F32_ULPS):
    """Assert that the backward's outputs meet the policy (inputs: NumPy, as they were before
    the call)."""
    rdz, rdos = zgate.reference_bwd(dout, z, o)
    return (check("dz", dz, rdz, dout, z, o, f32_ulps),
            check("dout_scaled", dout_scaled, rdos, dout, z, o, f32_ulps))


def check_fwd(o, z, out, f32_ulps=F32_ULPS):
    return check("out", out, zgate.reference_fwd(o, z), None, z, o, f32_ulps)
