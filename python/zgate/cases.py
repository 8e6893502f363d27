"""The shared case list (check/cases.def), its seeded inputs and their judgement against the
float64 reference and a golden run, by zgate's accuracy policy (check/zgate_check.c). The
acceptance run (python -m zgate.acceptance) runs them on every backend; the tests and the
benchmarks take their shapes, inputs and judge from here.
"""
import math
import os
import re
from typing import NamedTuple, Tuple

import numpy as np

try:
    import ml_dtypes
    BF16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # bfloat16 cases then cannot run
    BF16 = None

QUANTITY = {"dz": 0, "dout_scaled": 1, "out": 2}    # zgate_check_quantity
F32_ULPS = 4            # the policy's float32 bound, in ulps of the scale (zgate_check.h)
# zgate.triton's float32 bound: plain float32 math with the platform's exp (no
# error-compensated sigmoid as in the C library). Upstream Triton's exp on NVIDIA GPUs is
# ex2.approx of x*log2(e), whose error grows with |z| (the case list's |z| reaches 200; the
# worst seen is in docs/performance.md).
TRITON_F32_ULPS = 64
GOLDEN_F32_ULPS = 8192  # 2^13 ulp of the scale: between 0.05% and 0.1% of it


class Case(NamedTuple):
    name: str
    op: str                       # "bwd" or "fwd"
    shape: Tuple[int, int, int, int]
    dtypes: Tuple[str, ...]       # bwd (dout, z, o, dz, dos); fwd (o, z, out)
    layout: str = "dense"         # a ZG_LAYOUT of cases.def: each tensor's view
    inplace: bool = False


_DT = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}


class View(NamedTuple):
    """How one tensor lies in its buffer (cases.def's ZG_VIEW)."""
    order: Tuple[int, int, int, int]    # dims in memory order, outermost first
    inner: int                          # the innermost dims that form a block (0: none)
    scale: int                          # the next dim out steps scale * block + extra
    extra: int
    offset: int                         # the first element, in blocks


def _read_case_file():
    """(shapes [(shape, set)], dtypes [(name, 5 dtypes)], layouts {name: (inplace, 5 Views)})
    of check/cases.def, installed beside this module."""
    text = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "cases.def")).read()
    shapes = [(tuple(int(v) for v in m[:4]), m[4]) for m in
              re.findall(r"^ZG_SHAPE\((\d+), (\d+), (\d+), (\d+), (\w+)\)", text, re.M)]
    dtypes = [(m[0], tuple(_DT[t] for t in m[1:])) for m in
              re.findall(r"^ZG_DTYPES\(([\w-]+), (\w+), (\w+), (\w+), (\w+), (\w+)\)", text,
                         re.M)]
    views = {m[0]: View(tuple(int(v) for v in m[1:5]), *(int(v) for v in m[5:])) for m in
             re.findall(r"^ZG_VIEW\((\w+)" + r", (\d+)" * 8 + r"\)", text, re.M)}
    layouts = {m[0]: (m[1] == "1", tuple(views[v] for v in m[2:])) for m in
               re.findall(r"^ZG_LAYOUT\((\w+), ([01])" + r", (\w+)" * 5 + r"\)", text, re.M)}
    return shapes, dtypes, layouts


def view_strides(view, shape):
    """(element strides, offset of the first element, elements of the buffer) of `view` over
    a 4-D `shape`: cases.def's rule, as zgate_case_strides in check/zgate_cases.h."""
    strides, step, block = [0] * 4, 1, 1
    for k in range(3, -1, -1):
        d = view.order[k]
        strides[d] = step
        step *= shape[d]
        if 4 - k == view.inner:
            block, step = step, view.scale * step + view.extra
    offset = view.offset * block
    return tuple(strides), offset, (offset + step if all(shape) else 0)


def layout_views(name):
    """(inplace, the five backward tensors' Views) of a cases.def layout."""
    return _read_case_file()[2][name]


def real_shapes():
    """The model-size shapes of the case list (set REAL), in its order."""
    return [shape for shape, group in _read_case_file()[0] if group == "REAL"]


def cases(quick=False):
    """The shared case list (check/cases.def), as every backend runs it. Full: every QUICK and
    FULL shape with every dtype combination in every layout, backward and forward, and the
    REAL (model-size) shapes in bfloat16 (dense, zview, in place) and float32 (zview), the
    forward beside every backward that is not in place.
    quick (the Triton interpreter, CI): the QUICK shapes, each dtype combination once, the
    layouts taken in turn."""
    shapes, dtypes, layouts = _read_case_file()
    names = list(layouts)
    out = []
    for si, (shape, group) in enumerate(shapes):
        if group == "REAL":
            if quick:
                continue
            todo = [(d, lay) for d in dtypes for lay in names
                    if (d[0] == "bf16" and lay != "permuted") or (d[0] == "f32" and lay == "zview")]
        elif group == "FULL" and quick:
            continue
        elif quick:
            todo = [(d, names[(si + di) % len(names)]) for di, d in enumerate(dtypes)]
        else:
            todo = [(d, lay) for d in dtypes for lay in names]
        tag = "x".join(map(str, shape))
        for (dname, dt), lay in todo:
            inplace = layouts[lay][0]
            bdt = dt[:4] + (dt[0],) if inplace else dt
            out.append(Case("bwd %s %s %s" % (tag, dname, lay), "bwd", shape, bdt, lay, inplace))
            if not inplace:
                out.append(Case("fwd %s %s %s" % (tag, dname, lay), "fwd", shape,
                                (dt[2], dt[1], dt[3]), lay))
    return out


def np_dtype(name):
    if name == "bfloat16":
        if BF16 is None:
            raise RuntimeError("bfloat16 cases need ml_dtypes: pip install ml_dtypes")
        return BF16
    return np.dtype(name)


def random_inputs(rng, shape, dtype=np.float32):
    """Fresh random (dout, z, o) in `dtype`: z spans the interesting range of the sigmoid,
    including the root of 1 + z(1 - s) near -1.2785 and the exp overflow region."""
    n = math.prod(shape)
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


def in_view(a, view, fill=0, slack=0):
    """a's values in `view` (cases.def): an array over a buffer of its own, which is its base,
    filled with `fill` outside the view (its padding and offset) and `slack` elements longer."""
    strides, offset, n = view_strides(view, a.shape)
    buf = np.full(max(n, 1) + slack, fill, a.dtype)  # no elements: one, the view at its start
    v = np.ndarray(a.shape, a.dtype, buffer=buf, offset=offset * a.itemsize if n else 0,
                   strides=tuple(s * a.itemsize for s in strides))
    v[...] = a
    return v


def inputs(case, seed):
    """The case's inputs as NumPy arrays, each in its view of the case's layout, from a
    generator seeded by (seed, case name): the same on every machine."""
    rng = np.random.default_rng([seed] + list(case.name.encode()))
    dout, z, o = random_inputs(rng, case.shape)
    views = layout_views(case.layout)[1]
    arrays, slots = ([dout, z, o], (0, 1, 2)) if case.op == "bwd" else ([o, z], (2, 1))
    return [in_view(a.astype(np_dtype(dt)), views[k])
            for a, dt, k in zip(arrays, case.dtypes, slots)]


# --- judging: zgate_check_tensor, the one implementation of the policy -----------------------

def judge(quantity, got, ref, dout, z, o, f32_ulps=F32_ULPS):
    """zgate_check_tensor's statistics of `got` (a NumPy array) against `ref` with the inputs
    (dout None for "out"), and ok. f32_ulps: the float32 part of the bound in ulps of the
    scale, the policy's 4 times a power of two: the scale's input (dout; o for the forward) is
    handed over multiplied by f32_ulps / 4, which multiplies the scale, its ulp and the
    absolute allowance alike (exact: a power of two). "ulps": the largest error in ulps of
    the scale (float32) or of the type at the reference (16-bit). "max_scale_err",
    "past_request": the request's 0.1% figures over that scale (zgate_check.h)."""
    from . import _binding
    k = f32_ulps // F32_ULPS
    if k < 1 or k * F32_ULPS != f32_ulps or k & (k - 1):
        raise ValueError("f32_ulps %r is not 4 times a power of two" % f32_ulps)
    q = QUANTITY[quantity]
    if k > 1 and q == QUANTITY["out"]:      # an array also at rank 0 (not a NumPy scalar)
        o = np.asarray(np.asarray(o, np.float64) * k)
    elif k > 1:
        dout = np.asarray(np.asarray(dout, np.float64) * k)
    st = _binding.check_tensor(q, got, ref, dout, z, o)
    st["ulps"] = st["max_err_units"] * (k if got.dtype == np.float32 else 1)
    st["ok"] = st["failures"] == 0
    return st


def as_rounded_to_nearest(got, ref):
    """The Triton interpreter's float32 -> bfloat16 conversion truncates and flushes
    subnormals: a bfloat16 output as round-to-nearest would have stored it, so that the
    policy judges the kernel rather than the interpreter. The stored value or its neighbour
    away from zero, whichever is nearer the reference; where the reference is subnormal the
    element is not judged (it takes the reference's rounded value). (array, elements not
    judged)."""
    if got.dtype != BF16:
        return got, 0
    up = (got.view(np.uint16) + np.uint16(1)).view(BF16)
    g, u = got.astype(np.float64), up.astype(np.float64)
    with np.errstate(invalid="ignore"):
        nearer = np.isfinite(g) & np.isfinite(u) & (np.abs(u - ref) < np.abs(g - ref))
    skip = np.abs(ref) < 2.0 ** -126
    return np.where(skip, ref.astype(BF16), np.where(nearer, up, got)), int(skip.sum())


def judge_case(case, arrays, outs, f32_ulps, gold=None, interp=False):
    """Per output of the case, judge()'s figures against the float64 reference: float32
    within f32_ulps ulp of the elementwise scale (4 for the C library, far inside the
    request's 0.1% of it); float16/bfloat16 within 1 ulp of the reference (near the root of
    1 + z(1-s), the float32 bound plus half an ulp). With a golden run's outputs (a mapping
    "name|j" -> array), the same judge with the stored output in the reference's place:
    float32 within GOLDEN_F32_ULPS (under the request's 0.1%), 16-bit within 1 ulp of each
    other (near the root, four times the float32 bound plus half an ulp: two results each
    within the bound of the float64 value)."""
    import zgate
    if case.op == "bwd":
        names, (dout, z, o) = ("dz", "dout_scaled"), arrays
        refs = zgate.reference_bwd(dout, z, o)
    else:
        names, (o, z), dout = ("out",), arrays, None
        refs = (zgate.reference_fwd(o, z),)
    rows = []
    for j, (name, got, ref) in enumerate(zip(names, outs, refs)):
        skipped = 0
        if interp:      # judged, and stored in a golden file, as rounded to nearest
            got, skipped = as_rounded_to_nearest(got, ref)
            outs[j] = got
        m = judge(name, got, ref, dout, z, o, f32_ulps)
        m.update(output=name, dtype=got.dtype.name, n_skipped=skipped, n=int(got.size))
        # the request's 0.1% over the policy's own scale, not the one widened for f32_ulps
        r = m if f32_ulps == F32_ULPS else judge(name, got, ref, dout, z, o)
        m["request_max"], m["request_past"] = r["max_scale_err"], r["past_request"]
        m["request_share"] = r["past_request"] / max(m["n"], 1)
        if gold is not None:
            gv = gold["%s|%d" % (case.name, j)]
            gv = gv.view(BF16) if got.dtype == BF16 else gv
            wide = GOLDEN_F32_ULPS if got.dtype == np.float32 else 4 * f32_ulps
            g = judge(name, got, gv.astype(np.float64), dout, z, o, wide)
            m["golden_ok"], m["golden_worst"] = g["ok"], g["max_bound_ratio"]
        rows.append(m)
    return rows


def golden_entries(name, outs, ok):
    """A case's entries in a golden file: its outputs (bfloat16 as its bits: .npz has no
    bfloat16) and whether they passed the float64 policy ("name|ok")."""
    e = {"%s|%d" % (name, j): g.view(np.uint16) if g.dtype == BF16 else g
         for j, g in enumerate(outs)}
    e["%s|ok" % name] = np.array(bool(ok))
    return e


def load_golden(path, seed, names):
    """The stored outputs of a golden run, or ValueError saying why they cannot judge this
    one: another seed, a case missing, or a case whose own outputs failed the float64 policy
    (they would fail a right implementation), named."""
    try:
        gold = np.load(path)
        theirs = int(gold["__seed__"])
        maker = str(gold["__maker__"]) if "__maker__" in gold else "its maker"
    except (OSError, ValueError, KeyError) as e:
        raise ValueError("cannot read golden file %s: %s" % (path, e)) from None
    if theirs != seed:
        raise ValueError("%s was made with seed %d, this run uses %d" % (path, theirs, seed))
    missing = [n for n in names if "%s|0" % n not in gold]
    if missing:
        raise ValueError("%s has no outputs of %d cases of this run (%s)" % (
            path, len(missing), ", ".join(missing[:3])))
    if any("%s|ok" % n not in gold for n in names):
        raise ValueError("%s does not record whether its outputs passed the float64 policy "
                         "(an older zgate made it): make it again" % path)
    wrong = [n for n in names if not gold["%s|ok" % n]]
    if wrong:
        raise ValueError("%s cannot be the golden run: %s failed the float64 policy on %d of "
                         "this run's cases (%s%s); make it with an implementation right on "
                         "every case (zgate's CUDA or Triton kernel), or leave those cases out "
                         "with --filter" % (path, maker, len(wrong), ", ".join(wrong[:5]),
                                            " ..." if len(wrong) > 5 else ""))
    return gold
