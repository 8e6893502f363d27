"""The float64 reference and zgate's numerics policy, in NumPy (needs numpy; bfloat16 needs
ml_dtypes). Used by the test suites and by ``python -m zgate.selfcheck``.

Reference: the formulas in float64 on the float64-widened stored inputs.
float32 outputs:  |got - ref| <= F32_ULPS ulp_f32(scale) + allowance, where scale is the
                  elementwise magnitude |dout*o| s (1 + |z|(1-s)) (|dout*z| s for dos,
                  |o*z| s for fwd): plain relative error is meaningless near the root of
                  1 + z(1-s), z ~ -1.2785.
float16/bfloat16: within 1 ulp of the type at ref, or within the float32 bound + 1/2 ulp.
NaN exactly where the reference is NaN; infinities equal, sign included.
"""
import numpy as np

try:
    import ml_dtypes
    BF16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # bfloat16 arrays then cannot be made or checked
    BF16 = None

F32, F16 = np.dtype(np.float32), np.dtype(np.float16)
TINY = 2.0 ** -149
F32_ULPS = 4            # zgate's C library (CPU and CUDA)
REL_MIN_SCALE = 2.0 ** -100

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


def measure(got, ref, scale, allow, f32_ulps=F32_ULPS, skip=None, half_ulps=1.0):
    """How `got` meets the policy against float64 `ref`, as a dict:
    n, bad (elements outside it), first_bad (index or None), worst (largest error as a
    fraction of the bound; <= 1 passes), rel_scale (largest |got - ref| / scale: the
    request's 0.1% criterion, meaningful for float32 outputs; taken where the scale is at
    least REL_MIN_SCALE, since float32 results near its subnormal range cannot carry a
    relative precision), ulps (largest error in ulps
    of the output type at ref). half_ulps: the 16-bit bound away from the root (1).
    `skip`: a mask of elements not judged (counted in n_skipped)."""
    got = np.asarray(got)
    dtype = got.dtype
    if dtype.name not in _FORMAT:
        raise ValueError("unexpected output dtype %s" % dtype)
    g = got.astype(np.float64)
    ref = np.broadcast_to(ref, g.shape)
    scale, allow = np.broadcast_to(scale, g.shape), np.broadcast_to(allow, g.shape)
    with np.errstate(all="ignore"):
        rounded = ref.astype(dtype).astype(np.float64)
        nan_bad = np.isnan(ref) != np.isnan(g)
        inf_bad = np.isinf(ref) & (g != ref)
        # a finite reference beyond the type's range rounds to an infinity: that is the answer
        over = np.isfinite(ref) & np.isinf(rounded)
        over_bad = over & (g != rounded)
        fin = np.isfinite(ref) & ~over
        err = np.where(fin, np.abs(g - ref), 0.0)
        bound32 = f32_ulps * ulp(scale, F32) + allow
        if dtype == F32:
            bound = bound32
        else:
            u = ulp(ref, dtype)
            bound = np.maximum(half_ulps * u, bound32 + 0.5 * u)
        frac = np.where(fin, err / bound, 0.0)
        bad = nan_bad | inf_bad | over_bad | (fin & ~(frac <= 1.0))
        normal = fin & (scale >= REL_MIN_SCALE)
        rel = np.where(normal, err / np.where(normal, scale, 1.0), 0.0)
        ulps = np.where(fin, err / ulp(ref, dtype), 0.0)
    n_skipped = 0
    if skip is not None:
        skip = np.broadcast_to(skip, g.shape)
        n_skipped = int(skip.sum())
        bad, frac, rel, ulps = bad & ~skip, np.where(skip, 0, frac), np.where(skip, 0, rel), \
            np.where(skip, 0, ulps)
    idx = np.argwhere(bad)
    return {"n": int(g.size), "bad": int(bad.sum()), "n_skipped": n_skipped,
            "first_bad": tuple(int(v) for v in idx[0]) if len(idx) else None,
            "worst": float(np.nan_to_num(frac.max(), nan=np.inf)) if g.size else 0.0,
            "rel_scale": float(np.nan_to_num(rel.max(), nan=np.inf)) if g.size else 0.0,
            "ulps": float(np.nan_to_num(ulps.max(), nan=np.inf)) if g.size else 0.0}


def check(name, got, ref, scale, allow, f32_ulps=F32_ULPS, skip=None):
    """Assert `got` (any float dtype incl. bfloat16) meets the policy against float64 `ref`."""
    got = np.asarray(got)
    m = measure(got, ref, scale, allow, f32_ulps, skip)
    if m["bad"]:
        i = m["first_bad"]
        g = got.astype(np.float64)
        raise AssertionError("%s (%s): %d of %d elements out of tolerance; first at %s: got %r "
                             "ref %r (worst %.3g of the bound)" % (
                                 name, got.dtype, m["bad"], m["n"], i, g[i],
                                 np.broadcast_to(ref, g.shape)[i], m["worst"]))
    return m


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
