"""The Ascend kernel as triton-ascend lowers it, executed on x86 against the float64 oracle.

Each case builds the IR that bishengir-compile would receive for one plan (lowering_x86.py),
runs it for fewer programs than tiles (so each program loops over tiles) and checks every
output with tests/python/zg_oracle.py (zgate's C policy, through the installed package).
Outputs start as a poison NaN and sit in buffers with a guard region after them: the kernel
must write every element (no poison left), never touch the guard or the gaps of a strided
output, and put NaN exactly where the reference has it (inputs include NaN and infinities
besides the random inputs' large |z|).

    python -m pytest tests/ascend/test_lowering.py      (in the triton-ascend environment)

Needs triton-ascend and ascendnpu-ir in the running Python, and Debian's mlir-19-tools,
llvm-19, clang-19, libclang-rt-19-dev and libmlir-19; without them every case fails with
what is missing.
ZGATE_LOWERING_CACHE=<dir> keeps the built kernels between runs.
"""
import os
import sys
import zlib

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
# the helpers beside the tests; zgate itself is the installed package (its compiled binding
# judges the outputs)
sys.path[:0] = [os.path.join(HERE, "..", "python"), os.path.join(HERE, "..", "triton"), HERE]

import lowering_x86  # noqa: E402
from special_values import big_for, special_inputs  # noqa: E402
import zg_oracle as zo  # noqa: E402
import zgate  # noqa: E402
from zgate.triton import ascend, plan  # noqa: E402

# Float32 bound, in ulps of the elementwise scale: the kernel computes in float32 with the
# platform's expf (the lowering matches numpy float32 arithmetic on glibc expf bit for bit).
# Largest error over 16.8M random elements (z uniform in +-90, normal*4, uniform in
# [-20, 0] and in +-1.5; 2026-12-03, kernel of 8c1485e, x86-64 Debian 12, glibc expf):
# dz 5.50, dout_scaled 3.86, out 3.86. dz stacks the most roundings (its bound: the next
# that is 4 times a power of two); the others keep the C library's bound (zg_oracle.F32_ULPS, 4).
F32_ULPS = {"dz": 8, "dout_scaled": zo.F32_ULPS, "out": zo.F32_ULPS}
GRID = 3
GUARD = 37                   # elements after each output buffer
SMALL_TILE = 256             # many tiles on small shapes; plan.NPU_TILE on the larger ones
POISON = {"float32": np.uint32(0x7FE5A5A5), "float16": np.uint16(0x7EA5),
          "bfloat16": np.uint16(0x7FE5)}    # quiet NaNs with a payload no input carries
BITS = {4: np.uint32, 2: np.uint16}
NAMES = {"bwd": ("dout", "z", "o", "dz", "dout_scaled"), "fwd": ("o", "z", "out")}


def _dtype(name):
    if name == "bfloat16":
        assert zo.BF16 is not None, "bfloat16 cases need ml_dtypes: pip install ml_dtypes"
        return zo.BF16
    return np.dtype(name)


# ---- layouts: each maps a compact (B, L, H, D) array to the tensor the kernel gets ----------

def _dense_view(buf, shape):
    return buf[:int(np.prod(shape))].reshape(shape)


def _permuted_view(buf, shape):
    """Stored as (B, H, L, D), seen as (B, L, H, D): no two dims merge."""
    b, l, h, d = shape
    return buf[:b * h * l * d].reshape(b, h, l, d).transpose(0, 2, 1, 3)


def _zview(a, rng):
    """`a` inside a wider projection buffer, as Z is in Mamba's in_proj output: strides
    (L*P, P, D, 1), P > H*D, starting at a column offset; the rest of the row is garbage."""
    b, l, h, d = a.shape
    off, width = 5, h * d
    p = off + width + 11
    proj = rng.standard_normal((b, l, p)).astype(a.dtype)
    proj[:, :, off:off + width] = a.reshape(b, l, width)
    z = proj[:, :, off:off + width].reshape(b, l, h, d)
    assert np.shares_memory(z, proj) and z.strides[1] == p * a.itemsize
    return z


def _input(a, how):
    if how == "permuted":
        out = _permuted_view(np.empty(a.size, a.dtype), a.shape)
        out[...] = a
        return out
    return a


class Output:
    """An output tensor poisoned with a NaN, at the front of a buffer with a guard after it;
    `view` is what the kernel gets."""

    def __init__(self, shape, dtype, how, rng):
        n = int(np.prod(shape))
        self.buf = np.empty(n + GUARD, dtype)
        bits = BITS[dtype.itemsize]
        self.buf.view(bits)[...] = rng.integers(0, np.iinfo(bits).max, self.buf.size,
                                                dtype=bits, endpoint=True)
        make = _permuted_view if how == "permuted" else _dense_view
        self.view = make(self.buf, shape)
        self.view.view(bits)[...] = POISON[dtype.name]
        self.inside = np.zeros(self.buf.size, bool)
        self.inside[make(np.arange(self.buf.size), shape).ravel()] = True
        assert np.shares_memory(self.view, self.buf)
        self.before = self.buf.copy()

    def check_untouched(self, name):
        bits = BITS[self.buf.itemsize]
        changed = (self.buf.view(bits) != self.before.view(bits)) & ~self.inside
        assert not changed.any(), "%s: %d elements outside the tensor were written, first at " \
            "buffer index %d (tensor ends at %d)" % (name, changed.sum(), np.argmax(changed),
                                                    self.inside.sum())
        left = self.view.view(bits) == POISON[self.buf.dtype.name]
        assert not left.any(), "%s: %d elements never written, first at %s" % (
            name, left.sum(), tuple(int(i) for i in np.argwhere(left)[0]))


def _specials(rng, dout, z, o):
    """NaN and infinities at a few random places of each input (in place)."""
    for a, vals in ((dout, (np.nan, np.inf, -np.inf)), (z, (np.nan, np.inf, -np.inf)),
                    (o, (np.nan, -np.inf, np.inf))):
        flat = a.reshape(-1)
        for v in vals:
            flat[rng.integers(flat.size)] = v


def _strides(a):
    return [s // a.itemsize for s in a.strides]


def _make(op, dtypes, shape, how, rng, values=None):
    """(inputs as stored compactly, the arrays the kernel gets in the op's order, Outputs).
    values: float32 (dout, z, o) of `shape` instead of random ones."""
    dts = [_dtype(ascend.SHORT[d]) for d in dtypes]
    names = NAMES[op]
    n_in = 3 if op == "bwd" else 2
    if values is None:
        dout, z, o = zo.inputs(rng, shape)                   # float32, then each its dtype
        _specials(rng, dout, z, o)
    else:
        dout, z, o = values
    vals = dict(dout=dout, z=z, o=o)
    ins = [vals[n].astype(dt) for n, dt in zip(names[:n_in], dts)]
    tensors = [_input(a, how) for a in ins]
    iz = names.index("z")
    if how == "zview":
        tensors[iz] = _zview(ins[iz], rng)
    elif how == "permuted":                                  # z stays dense: strides differ
        tensors[iz] = ins[iz]
    out_how = "permuted" if how == "permuted" else "dense"
    outs = [Output(shape, dt, out_how, rng) for dt in dts[n_in:]]
    if how == "inplace":                                     # dout_scaled written over dout
        assert op == "bwd" and dts[0] == dts[4], "in place needs dout's dtype for dout_scaled"
        outs[1].view[...] = ins[0]
        outs[1].before = outs[1].buf.copy()
        tensors[0] = outs[1].view
    return ins, tensors + [x.view for x in outs], outs


def _plan(arrays, tile):
    layout = plan.collapse(arrays[0].shape, [_strides(a) for a in arrays])
    assert layout is not None
    return layout, plan.choose_tiles(layout, tile)


def _run_case(op, dtypes, shape, how, tile, rng, workdir, values=None):
    """Run one case and check every output; the largest error of each as a fraction of its
    bound (zg_oracle.check's 'max_bound_ratio')."""
    names = NAMES[op]
    n_in = 3 if op == "bwd" else 2
    ins, arrays, outs = _make(op, dtypes, shape, how, rng, values)
    layout, tiles = _plan(arrays, tile)
    assert tiles.n_tiles > GRID, "case too small to loop: %s" % (tiles,)
    so = lowering_x86.build(op, [a.dtype.name for a in arrays], layout, tiles, workdir)
    lowering_x86.run(so, op, arrays, layout, tiles, GRID)

    if op == "bwd":
        refs = dict(zip(names[n_in:], zgate.reference_bwd(*ins)))
        dout, z, o = ins
    else:
        refs = {"out": zgate.reference_fwd(*ins)}
        (o, z), dout = ins, None
    worst = {}
    for name, x in zip(names[n_in:], outs):
        x.check_untouched(name)
        worst[name] = zo.check(name, np.array(x.view), refs[name], dout, z, o,
                               F32_ULPS[name])["max_bound_ratio"]
    return worst


SHAPES = [(3, 37, 7, 1), (2, 29, 5, 3), (1, 13, 3, 64), (3, 7, 2, 80), (2, 5, 3, 96),
          (1, 11, 2, 128)]
DTYPES = {
    "bwd": [("f32",) * 5, ("f16",) * 5, ("bf16",) * 5,
            ("bf16", "bf16", "bf16", "f32", "f32"),       # half inputs, float32 outputs
            ("f32", "f32", "f32", "bf16", "bf16"),        # float32 inputs, half outputs
            ("bf16", "f32", "bf16", "bf16", "bf16"),      # z float32, the rest bfloat16
            ("f16", "bf16", "f32", "f16", "bf16")],       # every tensor its own
    "fwd": [("f32",) * 3, ("f16",) * 3, ("bf16",) * 3, ("bf16", "bf16", "f32"),
            ("f32", "f32", "bf16"), ("bf16", "f32", "bf16"), ("f16", "bf16", "f32")],
}
LAYOUTS = {"bwd": ("dense", "zview", "permuted", "inplace"),
           "fwd": ("dense", "zview", "permuted")}


def _cases():
    cases = []
    for op in ("bwd", "fwd"):
        for li, how in enumerate(LAYOUTS[op]):
            for di, dtypes in enumerate(DTYPES[op]):
                if how == "inplace" and dtypes[0] != dtypes[4]:
                    continue
                k = di + 2 * li + (op == "fwd")
                if how == "permuted" and SHAPES[k % len(SHAPES)][3] == 1:
                    k += 1        # headdim 1 permuted has no contiguous inner dim: copied
                shape = SHAPES[k % len(SHAPES)]
                cases.append((op, dtypes, shape, how, SMALL_TILE))
    big = (2, 257, 3, 64)
    cases += [("bwd", ("bf16",) * 5, big, "zview", plan.NPU_TILE),
              ("bwd", ("f32",) * 5, big, "permuted", plan.NPU_TILE),
              ("fwd", ("f16", "f16", "f16"), big, "dense", plan.NPU_TILE)]
    return cases


CASES = _cases()


def _case_id(c):
    op, dtypes, shape, how, tile = c
    return "%s-%s-%s-%s-t%d" % (op, ",".join(dtypes), "x".join(map(str, shape)), how, tile)


@pytest.fixture(scope="session")
def workdir(tmp_path_factory):
    d = os.environ.get("ZGATE_LOWERING_CACHE")
    if d:
        os.makedirs(d, exist_ok=True)
        return d
    return str(tmp_path_factory.mktemp("lowering"))


def _rng(name):
    seed = int(os.environ.get("ZGATE_TEST_SEED", "0"))
    return np.random.default_rng([seed, zlib.crc32(name.encode())])


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_lowered_kernel(case, workdir):
    _run_case(*case, _rng(_case_id(case)), workdir)


def test_case_matrix_covers_the_plan():
    """The matrix reaches all four kernel levels, tails in rows and in columns, and every
    headdim of the brief."""
    seen = set()
    for op, dtypes, shape, how, tile in CASES:
        _, arrays, _ = _make(op, dtypes, shape, how, _rng("cover"))
        layout, tiles = _plan(arrays, tile)
        n_qa, n_qb, n_rows, n_cols = layout.sizes
        seen.add("4 levels" if n_qa > 1 and n_qb > 1 and n_rows > 1 else "")
        seen.add("row tail" if n_rows % tiles.block_r else "")
        seen.add("column tail" if n_cols % tiles.block_c else "")
        seen.add("headdim %d" % shape[3])
        seen.add(how)
    for want in ["4 levels", "row tail", "column tail", "dense", "zview", "permuted",
                 "inplace"] + ["headdim %d" % d for d in (1, 3, 64, 80, 96, 128)]:
        assert want in seen, want


@pytest.mark.parametrize("op", ["bwd", "fwd"])
def test_float32_error_on_many_elements(op, workdir):
    """Float32 in and out on 2^20 elements, where the float32 error reaches its largest."""
    rng = _rng("f32-" + op)
    _run_case(op, ("f32",) * (5 if op == "bwd" else 3), (1, 1024, 4, 256), "dense",
              plan.NPU_TILE, rng, workdir)


# ---- the 16-bit recipe (every output 16-bit) at its bound ------------------------------------

SPECIAL_DTYPES = [("bf16",) * 5, ("f16",) * 5, ("f32", "f32", "f32", "bf16", "bf16"),
                  ("f32", "f32", "f32", "bf16", "f16"),
                  ("f16", "f16", "f16", "f16", "bf16"), ("f32",) * 5]


@pytest.mark.parametrize("how", ["dense", "zview"])
@pytest.mark.parametrize("dtypes", SPECIAL_DTYPES, ids=",".join)
def test_special_values_each_recipe(dtypes, how, workdir):
    """z near 0, across the root, near the exp overflow (88.7) and the float32 underflow of
    exp(-|z|) (103.9), infinities, NaN and subnormals: the 16-bit recipe (16-bit outputs) and
    the accurate one (float32)."""
    shape = (2, 7, 3, 64)
    rng = _rng("special-" + ",".join(dtypes) + how)
    vals = special_inputs(rng, shape, big_for(dtypes))
    _run_case("bwd", dtypes, shape, how, SMALL_TILE, rng, workdir, vals)
    fwd = (dtypes[2], dtypes[1], dtypes[3])
    _run_case("fwd", fwd, shape, how, SMALL_TILE, rng, workdir, vals)


@pytest.mark.parametrize("op", ["bwd", "fwd"])
@pytest.mark.parametrize("dt", ["bf16", "f16"])
def test_16bit_request_shape(op, dt, workdir):
    """The request's first shape with Z as a view, the NPU's own tile, random inputs (an
    eighth of z near the root, z up to +-30 and +-104)."""
    n = 5 if op == "bwd" else 3
    how = "zview"
    shape = (2, 2048, 24, 64)
    tile = plan.npu_tile(op, [ascend.SHORT[dt]] * n)
    worst = _run_case(op, (dt,) * n, shape, how, tile, _rng("req-%s-%s" % (op, dt)), workdir)
    assert all(w <= 1.0 for w in worst.values()), worst
