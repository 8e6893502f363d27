"""The float64 oracle and the numerics policy of docs/operator.md (section 4), for the
Python tests.

Reference: the formulas in float64 on the float64-widened stored inputs.
float32 outputs:  |got - ref| <= 4 ulp_f32(scale) + allowance
float16/bfloat16: within 1 ulp of the type at ref, or within the float32 bound + 1/2 ulp.
NaN exactly where the reference is NaN; infinities equal, sign included.
"""
import numpy as np

try:
    import ml_dtypes
    BF16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - ml_dtypes is a test requirement
    BF16 = None

F32, F16 = np.dtype(np.float32), np.dtype(np.float16)
TINY = 2.0 ** -149

# (mantissa bits, smallest normal exponent) of each output type
_FORMAT = {"float32": (23, -126), "float16": (10, -14), "bfloat16": (7, -126)}


def ulp(x, dtype):
    """Unit in the last place of `dtype` at |x| (float64 array in, float64 array out)."""
    p, emin = _FORMAT[np.dtype(dtype).name]
    ax = np.abs(np.asarray(x, dtype=np.float64))
    with np.errstate(all="ignore"):
        _, e = np.frexp(ax)          # ax = m * 2**e, m in [0.5, 1)
    e = np.maximum(e - 1, emin)
    u = np.ldexp(1.0, (e - p).astype(np.int64))
    return np.where(ax == 0, np.ldexp(1.0, emin - p), u)


def sigmoid(z):
    with np.errstate(all="ignore"):
        return 1.0 / (1.0 + np.exp(-z))


def ref_bwd(dout, z, o):
    """(dz, dout_scaled, scale_dz, scale_dos, allow_dz, allow_dos), float64."""
    dout, z, o = (np.asarray(a, dtype=np.float64) for a in (dout, z, o))
    with np.errstate(all="ignore"):
        s = sigmoid(z)
        dz = dout * o * s * (1.0 + z * (1.0 - s))
        dos = dout * s * z
        scale_dz = np.abs(dout * o) * s * (1.0 + np.abs(z) * (1.0 - s))
        scale_dos = np.abs(dout * z) * s
        allow_dz = 4 * TINY * np.abs(dout * o) * (1.0 + np.abs(z))
        allow_dos = 4 * TINY * np.abs(dout * z)
    return dz, dos, scale_dz, scale_dos, allow_dz, allow_dos


def ref_fwd(o, z):
    """(out, scale, allow), float64."""
    o, z = (np.asarray(a, dtype=np.float64) for a in (o, z))
    with np.errstate(all="ignore"):
        s = sigmoid(z)
        out = o * z * s
        scale = np.abs(o * z) * s
        allow = 4 * TINY * np.abs(o * z)
    return out, scale, allow


def check(name, got, ref, scale, allow):
    """Assert `got` (any float dtype incl. bfloat16) meets the policy against float64 `ref`."""
    got = np.asarray(got)
    dtype = got.dtype
    assert dtype.name in _FORMAT, "%s: unexpected output dtype %s" % (name, dtype)
    g = got.astype(np.float64)
    ref = np.broadcast_to(ref, g.shape)
    nan_ref, nan_got = np.isnan(ref), np.isnan(g)
    bad = nan_ref != nan_got
    assert not bad.any(), "%s: NaN mismatch at %d places, first %s: got %r ref %r" % (
        name, bad.sum(), _first(bad), g[bad][:3], ref[bad][:3])
    inf_ref = np.isinf(ref)
    bad = inf_ref & (g != ref)
    assert not bad.any(), "%s: infinity mismatch at %s: got %r ref %r" % (
        name, _first(bad), g[bad][:3], ref[bad][:3])
    with np.errstate(all="ignore"):
        rounded = ref.astype(dtype).astype(np.float64)
    # a finite reference beyond the type's range rounds to an infinity: that is the answer
    over = np.isfinite(ref) & np.isinf(rounded)
    bad = over & (g != rounded)
    assert not bad.any(), "%s: overflow mismatch at %s: got %r ref %r" % (
        name, _first(bad), g[bad][:3], ref[bad][:3])
    fin = np.isfinite(ref) & ~over
    with np.errstate(all="ignore"):
        err = np.abs(g - ref)
        bound32 = 4.0 * ulp(scale, F32) + allow
        if dtype == F32:
            ok = err <= bound32
        else:
            u = ulp(ref, dtype)
            ok = (err <= u) | (err <= bound32 + 0.5 * u)
    bad = fin & ~ok
    if bad.any():
        i = _first(bad)
        raise AssertionError("%s (%s): %d of %d elements out of tolerance; first at %s: got %r "
                             "ref %r err %.3g bound %.3g" % (
                                 name, dtype, bad.sum(), bad.size, i, g[i], ref[i], err[i],
                                 bound32[i] if dtype == F32 else max(ulp(ref[i], dtype),
                                                                     bound32[i])))


def _first(mask):
    idx = np.argwhere(mask)
    return tuple(int(v) for v in idx[0]) if len(idx) else None


def inputs(rng, shape, dtype=F32):
    """Fresh random (dout, z, o) in `dtype`: z spans the interesting range of the sigmoid,
    including the root of 1 + z(1 - s) near -1.2785 and the exp overflow region."""
    n = int(np.prod(shape)) if len(shape) else 1
    dout = rng.standard_normal(n)
    o = rng.standard_normal(n) * 2.0
    z = rng.standard_normal(n) * 4.0
    k = n // 8
    if k:
        z[:k] = rng.uniform(-30, 30, k)
        z[k:2 * k] = -1.2785 + rng.uniform(-1e-3, 1e-3, k)
    if n >= 64:
        z[-4:] = [-88.5, 88.5, -104.0, 200.0]
    rng.shuffle(z)
    return tuple(np.asarray(a.reshape(shape)).astype(dtype) for a in (dout, z, o))
