"""Inputs at the edges of the gate's numerics, shared by the interpreter tests (tests/triton)
and the x86 lowering tests (tests/ascend): z near 0, across the root of 1 + z(1 - s)
(z ~ -1.2785) in float32 and in 16-bit steps, near exp's overflow (88.7) and the float32
underflow of exp(-|z|) (103.9), far out, infinite, NaN and subnormal."""
import numpy as np

ROOT = -1.2784645
SPECIAL_Z = np.concatenate([
    [0.0, -0.0, 1e-45, -1e-45, 1e-40, -1e-40, 1.2e-38, -1.2e-38, 6e-8, -6e-8, 1e-6, -1e-6,
     1e-4, -1e-4, 0.01, -0.01, 1.0, -1.0, 17.0, -17.0, 80.0, 81.0, -80.0, -81.0],
    ROOT + np.arange(-48, 48) * 2.0 ** -20,                  # float32 steps across the root
    ROOT + np.arange(-8, 8) * 2.0 ** -8,                     # 16-bit steps across it
    [s * v for v in (87.3, 88.0, 88.5, 88.72, 88.73, 89.0, 95.0, 100.0, 103.0, 103.9, 103.98,
                     104.0, 104.5, 105.0, 200.0, 1e30) for s in (1.0, -1.0)],
    [np.inf, -np.inf, np.nan]]).astype(np.float32)


def special_inputs(rng, shape, big):
    """(dout, z, o) float32 of `shape`: z runs through SPECIAL_Z (repeated), dout and o are
    random, scaled by `big` on a sixteenth of the elements: with z between -88.7 and -104,
    the results are normal bfloat16 numbers only if exp(z) keeps its precision there, and
    with a subnormal z only if z multiplies last. (An infinite dout or o where float32's
    sigmoid underflows to 0 gives NaN where the float64 reference has an infinity, in
    either recipe: `big` must keep the inputs finite in their dtype.)"""
    n = int(np.prod(shape))
    z = np.resize(SPECIAL_Z, n)
    dout = rng.standard_normal(n).astype(np.float32)
    o = (rng.standard_normal(n) * 2.0).astype(np.float32)
    scaled = rng.choice(n, n // 16, replace=False)
    dout[scaled] *= np.float32(big)
    o[scaled] *= np.float32(big)
    return tuple(a.reshape(shape) for a in (dout, z, o))


def big_for(dtypes):
    """special_inputs' scale for a bwd dtype combination (short names, bwd order: dout, z,
    o, dz, dout_scaled): 1e15 where every output is bfloat16 and no input float16, else 1.
    Float16 inputs would overflow; a float16 output near the root of 1 + z(1-s) would need
    an infinity where a product of 1e30 meets a float32 cancellation to 0 (the bound there,
    6 float32 ulps of the scale, is beyond float16's range); a float32 output takes the
    accurate recipe, which rounds z*s first, so a subnormal z times 1e15 loses its result."""
    if all(d == "bf16" for d in dtypes[3:]) and "f16" not in dtypes[:3]:
        return 1e15
    return 1.0
