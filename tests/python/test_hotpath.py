"""The compiled hot path of zgate.bwd / zgate.fwd on plain PyTorch tensors (zgate._hot,
python/ext/hot.c): it is built and bound, the headers and options it hands the library are
the general path's field for field, it takes the calls it should and declines the others
(which then give the general path's results and errors), it holds no references it should
not, and zgate._overhead's breakdown runs."""
import contextlib
import ctypes
import gc
import importlib.machinery
import io
import os
import shutil
import subprocess
import sys
import weakref

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")

import zgate  # noqa: E402
import zgate.torch  # noqa: E402,F401  (torch.ops.zgate)
from zgate import _adapters, _args, _call, _lib, _overhead  # noqa: E402
from zgate._adapters import torch as ad  # noqa: E402
from tt_util import cuda_ready, np_of, tinputs  # noqa: E402
from zg_oracle import check, ref_bwd, ref_fwd  # noqa: E402

SHAPE = (2, 5, 3, 8)
CUDA_OK, CUDA_WHY = cuda_ready()
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not CUDA_OK,
                                                                reason=CUDA_WHY or "CUDA"))]


def _hot():
    """zgate._hot, bound: a build without it fails here (it is part of the package)."""
    zgate.bwd(*(torch.ones(1, 1, 1, 4) for _ in range(3)))   # loads the library and adapter
    hot = _lib.hot()
    assert hot is not None, _lib.hot_why()
    assert _adapters._fast_bwd.get(torch.Tensor) is hot.bwd
    assert _adapters._fast_fwd.get(torch.Tensor) is hot.fwd
    return hot


def test_hot_path_is_built_beside_the_library():
    hot = _hot()
    assert os.path.dirname(hot.__file__) == os.path.dirname(os.path.abspath(zgate.library_path()))
    assert _lib.hot_why() == ""
    assert zgate.info()["hot_path"] == hot.__file__


_WITHOUT_HOT = """
import torch, zgate, zgate.torch
from zgate import _adapters
d, z, o = (torch.randn(2, 3, 5, 7) for _ in range(3))
want = zgate.reference_bwd(d.numpy(), z.numpy(), o.numpy())
for dz, dos in (zgate.bwd(d, z, o), torch.ops.zgate.bwd(d, z, o), zgate.torch.compute_dzdo(d, z, o)):
    assert abs(dz.numpy() - want[0]).max() < 1e-5 and abs(dos.numpy() - want[1]).max() < 1e-5
out = zgate.reference_fwd(o.numpy(), z.numpy())
for got in (zgate.fwd(o, z), torch.ops.zgate.fwd(o, z)):
    assert abs(got.numpy() - out).max() < 1e-5
assert torch.Tensor not in _adapters._fast_bwd
print(zgate.info()["hot_path"])
"""


@pytest.mark.parametrize("broken", [False, True])
def test_without_the_hot_path_calls_take_the_general_path(tmp_path, broken):
    """A library with no zgate._hot beside it (or one that does not load): every call works
    through the general path, and zgate.info() says why the hot path is absent."""
    lib = tmp_path / "libzgate.so"
    shutil.copy(os.path.abspath(zgate.library_path()), lib)
    if broken:
        (tmp_path / ("_hot" + importlib.machinery.EXTENSION_SUFFIXES[0])).write_bytes(b"not ELF")
    env = dict(os.environ, ZGATE_LIBRARY=str(lib))
    env["PYTHONPATH"] = os.pathsep.join(p for p in [os.path.dirname(os.path.dirname(
        os.path.abspath(zgate.__file__))), env.get("PYTHONPATH")] if p)
    r = subprocess.run([sys.executable, "-c", _WITHOUT_HOT], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    line = r.stdout.strip().splitlines()[-1]
    assert line.startswith("absent: ") and ("does not load" if broken else "no _hot") in line


def _mixed_inputs(rng, device="cpu"):
    """dout bfloat16 compact, z float16 a strided view (no copy), o float32 permuted."""
    dout, z, o = tinputs(rng, SHAPE, torch.float32, device)
    wide = torch.cat([z, z], dim=3).to(torch.float16)
    return (dout.to(torch.bfloat16), wide[..., :SHAPE[3]],
            o.permute(0, 2, 1, 3).contiguous().permute(0, 2, 1, 3))


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_uint64), ("device_type", ctypes.c_int32),
                ("device_id", ctypes.c_int32), ("ndim", ctypes.c_int32),
                ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16),
                ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _Options(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("num_threads", ctypes.c_int),
                ("cpu_isa", ctypes.c_char_p), ("cuda_stream", ctypes.c_void_p)]


def _fields(addr):
    """A DLTensor header at addr as plain values (arrays read out; NULL strides as None)."""
    t = _DLTensor.from_address(addr)
    return (t.data, t.device_type, t.device_id, t.ndim, t.code, t.bits, t.lanes,
            tuple(t.shape[i] for i in range(t.ndim)),
            tuple(t.strides[i] for i in range(t.ndim)) if t.strides else None, t.byte_offset)


def _options(addr):
    o = _Options.from_address(addr)
    return o.struct_size, o.num_threads, o.cpu_isa, o.cuda_stream or 0


@contextlib.contextmanager
def _recording(hot):
    """zgate._hot bound to entry points that record the headers and options they get and
    return 0 (the outputs stay as allocated); the library's entry points bound again after."""
    seen = []
    bwd_t = ctypes.CFUNCTYPE(ctypes.c_int, *[ctypes.c_void_p] * 6)
    fwd_t = ctypes.CFUNCTYPE(ctypes.c_int, *[ctypes.c_void_p] * 4)

    def record(*a):
        seen.append(([_fields(x) for x in a[:-1]], _options(a[-1])))
        return 0
    b, f = bwd_t(record), fwd_t(record)
    addr = lambda fn: ctypes.cast(fn, ctypes.c_void_p).value  # noqa: E731
    hot.bind(addr(b), addr(f), torch.Tensor, (torch.float32, torch.float16, torch.bfloat16),
             torch.empty_like, torch.contiguous_format, ad._raw_stream, ad._failure,
             ad._increment_version)
    try:
        yield seen
    finally:
        ad._bind()


def _general(descs, fresh, num_threads, stream):
    b = _args.Block()
    _args.pack(b, descs, fresh, num_threads, stream)
    return [_fields(a) for a in b.t[:len(descs)]], _options(b.opts)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("num_threads", [0, 3])
def test_hot_headers_are_the_general_paths(rng, num_threads, device):
    """Every field of the five (three) DLTensor headers and of zgate_options that the hot
    path hands the library equals what the general path packs for the same tensors (on
    CUDA: the current stream, on a stream of its own so that 0 would not pass)."""
    hot = _hot()
    dout, z, o = _mixed_inputs(rng, device)
    side = torch.cuda.Stream() if device == "cuda" else None
    with _recording(hot) as seen, (torch.cuda.stream(side) if side else contextlib.nullcontext()):
        stream = side.cuda_stream if side else 0
        assert not side or stream
        dz, dos = hot.bwd(dout, z, o, None, None, False, num_threads)
        out = hot.fwd(o, z, None, num_threads)
        given = hot.bwd_into(dout, z, o, dz, dos, num_threads)
    assert given[0] is dz and given[1] is dos
    assert len(seen) == 3

    def desc(t, n):
        return ad.describe(t, n, False, None, [])
    names = ("dout", "z", "o", "dz", "dout_scaled")
    five = [desc(t, n) for t, n in zip((dout, z, o, dz, dos), names)]
    assert seen[0] == _general(five, 2, num_threads, stream)
    three = [desc(t, n) for t, n in ((o, "o"), (z, "z"), (out, "out"))]
    assert seen[1] == _general(three, 1, num_threads, stream)
    assert seen[2] == _general(five, 0, num_threads, stream)
    assert seen[0][1] == (ctypes.sizeof(_Options), num_threads, None, stream)
    # and the real call on these tensors is right
    dz, dos = hot.bwd(dout, z, o, None, None, False, num_threads)
    out = hot.fwd(o, z, None, num_threads)
    r = ref_bwd(*(np_of(t) for t in (dout, z, o)))
    check("dz", np_of(dz), r[0], r[2], r[4])
    check("dout_scaled", np_of(dos), r[1], r[3], r[5])
    check("out", np_of(out), *ref_fwd(np_of(o), np_of(z)))


def _spied(monkeypatch, table, fn):
    """The list of whether each call routed to the hot path fn was taken by it."""
    taken = []

    def spy(*a):
        r = fn(*a)
        taken.append(r is not None)
        return r
    monkeypatch.setitem(table, torch.Tensor, spy)
    return taken


def test_zgate_bwd_takes_the_hot_path(rng, monkeypatch):
    taken = _spied(monkeypatch, _adapters._fast_bwd, _hot().bwd)
    dout, z, o = tinputs(rng, SHAPE, torch.bfloat16)
    zgate.bwd(dout, z, o)
    zgate.bwd(dout, z, o, num_threads=2)
    zgate.bwd(dout, z, o, dz=torch.empty_like(dout), dout_scaled=torch.empty_like(dout))
    zgate.bwd(dout, z, o, dz=torch.empty_like(dout))      # one output given: declined
    zgate.bwd(dout.clone(), z, o, inplace=True)            # in place: declined
    assert taken == [True, True, True, False, False]


def test_zgate_fwd_takes_the_hot_path(rng, monkeypatch):
    taken = _spied(monkeypatch, _adapters._fast_fwd, _hot().fwd)
    o, z = tinputs(rng, SHAPE, torch.bfloat16)[:2]
    out = torch.empty_like(o)
    assert zgate.fwd(o, z, out=out) is out
    zgate.fwd(o, z)
    assert taken == [True, True]


def _outcome(fn):
    try:
        r = fn()
    except zgate.Error as e:
        return "error", e.status, str(e)
    if r is None:
        return (None,)
    return "ok", tuple(np_of(t).tobytes() for t in r)


class _Sub(torch.Tensor):
    pass


# case -> (the call's arguments from (dout, z, o), whether the hot path takes it)
CASES = {
    "plain": (lambda d, z, o: (d, z, o, 0), True),
    "shape mismatch": (lambda d, z, o: (d, z[:, :2], o, 0), True),     # the library refuses
    "num_threads -1": (lambda d, z, o: (d, z, o, -1), True),           # the library refuses
    "float16 o": (lambda d, z, o: (d, z, o.half(), 0), True),
    "float64 z": (lambda d, z, o: (d, z.double(), o, 0), False),       # the general path names it
    "int32 o": (lambda d, z, o: (d, z, o.int(), 0), False),
    "3-D": (lambda d, z, o: (d[0], z[0], o[0], 0), False),
    "num_threads beyond a C int": (lambda d, z, o: (d, z, o, 2 ** 40), False),
    "num_threads a NumPy int": (lambda d, z, o: (d, z, o, np.int64(2)), False),
    "num_threads a bool": (lambda d, z, o: (d, z, o, True), False),
    "z a NumPy array": (lambda d, z, o: (d, z.numpy(), o, 0), False),
    "meta dout": (lambda d, z, o: (d.to("meta"), z, o, 0), False),
    "sparse z": (lambda d, z, o: (d, z.to_sparse(), o, 0), False),      # stride() raises
    "a subclass": (lambda d, z, o: (d.as_subclass(_Sub), z, o, 0), False),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_hot_path_agrees_with_the_general_path(rng, case):
    """Whether the hot path takes a call or not, zgate.bwd gives what the general path gives:
    the same outputs, or the same zgate.Error."""
    hot = _hot()
    args, taken = CASES[case]
    d, z, o, n = args(*tinputs(rng, SHAPE, torch.float32))
    if not taken:
        assert hot.bwd(d, z, o, None, None, False, n) is None
    else:
        assert _outcome(lambda: hot.bwd(d, z, o, None, None, False, n)) != (None,)
    got = _outcome(lambda: zgate.bwd(d, z, o, num_threads=n))

    def general():   # zgate._call with num_threads checked as zgate.bwd checks it
        return _call.bwd(ad, d, z, o, None, None, False, _args.threads_arg(n))
    want = _outcome(general)
    assert got == want
    ok = ("plain", "float16 o", "3-D", "z a NumPy array", "num_threads a NumPy int", "a subclass")
    assert got[0] == ("ok" if case in ok else "error"), got
    if case == "float64 z":
        assert "z: dtype torch.float64 is not" in got[2]


def test_fwd_takes_new_and_given_outputs_and_declines_the_rest(rng):
    hot = _hot()
    o, z = tinputs(rng, SHAPE, torch.bfloat16)[:2]
    out = torch.full(SHAPE, float("nan"), dtype=torch.float32)
    v0 = out._version
    assert hot.fwd(o, z, out, 0) is out and out._version > v0      # a given output, bumped
    check("out", np_of(out), *ref_fwd(np_of(o), np_of(z)))
    assert hot.fwd(o[0], z[0], None, 0) is None                    # 3-D
    assert hot.fwd(o, z, out.double(), 0) is None                  # float64 out
    with pytest.raises(zgate.Error, match="SHAPE_MISMATCH"):
        hot.fwd(o, z[:, :2], None, 0)
    with pytest.raises(zgate.Error, match="out:"):
        hot.fwd(o, z, out[:, :2], 0)
    assert np_of(zgate.fwd(o[0], z[0])).tobytes() == np_of(zgate.fwd(o, z)[0]).tobytes()


# case -> given outputs from (dout, z, o), and whether the hot path takes the call
GIVEN = {
    "float32 dz, bfloat16 dout_scaled": (lambda d, z, o: (torch.empty_like(d),
                                                          torch.empty_like(d).bfloat16()), True),
    "dz a strided view": (lambda d, z, o: (torch.empty(SHAPE[:3] + (16,))[..., :8],
                                           torch.empty_like(d)), True),
    "dz of another shape": (lambda d, z, o: (torch.empty_like(d)[:, :2], torch.empty_like(d)),
                            True),                                      # the library refuses
    "dz is z": (lambda d, z, o: (z, torch.empty_like(d)), True),        # the library refuses
    "dz and dout_scaled the same": (lambda d, z, o: (lambda t: (t, t))(torch.empty_like(d)),
                                    True),                              # the library refuses
    "float64 dz": (lambda d, z, o: (torch.empty_like(d).double(), torch.empty_like(d)), False),
    "dz alone": (lambda d, z, o: (torch.empty_like(d), None), False),
}


@pytest.mark.parametrize("case", sorted(GIVEN))
def test_given_outputs_agree_with_the_general_path(rng, case):
    """Given outputs through the hot path: the same bytes and versions as the general path
    gives them (each output bumped once), or the same zgate.Error."""
    hot = _hot()
    make, taken = GIVEN[case]
    d, z, o = tinputs(rng, SHAPE, torch.float32)

    dz, dos = make(d, z, o)   # both runs write these (an error names their addresses)

    def run(fn):
        zc = z.clone()
        outs = [t for t in (dz, dos) if t is not None]
        v0 = [t._version for t in outs]
        r = _outcome(lambda: fn(dz, dos))
        return r, [t._version - v for t, v in zip(outs, v0)], torch.equal(z, zc)
    if not taken:
        assert hot.bwd(d, z, o, dz, dos, False, 0) is None
    got = run(lambda dz, dos: hot.bwd(d, z, o, dz, dos, False, 0) if taken else
              zgate.bwd(d, z, o, dz=dz, dout_scaled=dos))
    want = run(lambda dz, dos: _call.bwd(ad, d, z, o, dz, dos, False, 0))
    assert got == want
    assert got[0][0] == ("ok" if case in ("float32 dz, bfloat16 dout_scaled", "dz a strided view",
                                           "dz alone") else "error"), got
    if got[0][0] == "ok":
        assert got[1] == [1] * len(got[1])


def test_no_reference_is_kept_or_lost(rng):
    """Taken, declined and refused calls leave every argument's (and PyTorch object's)
    reference count as it was, keep no temporary alive, and the outputs of a taken call are
    referenced only by the caller."""
    hot = _hot()
    d, z, o = tinputs(rng, SHAPE, torch.bfloat16)
    bad = z[:, :2]
    calls = [lambda: hot.bwd(d, z, o, None, None, False, 0),
             lambda: hot.fwd(o, z, None, 0),
             lambda: hot.bwd(d, z.double(), o, None, None, False, 0),
             lambda: hot.bwd_into(d, z, o, torch.empty_like(d), torch.empty_like(d), 0),
             lambda: hot.bwd(d, z, o, torch.empty_like(d), torch.empty_like(d), False, 0),
             lambda: hot.fwd(o, z, torch.empty_like(o), 0)]
    for fn in calls:
        fn()
    for t in (d, z, o, bad):
        t.grad   # noqa: B018  (any attribute cache PyTorch fills, filled before counting)
    counted = (d, z, o, bad, torch.bfloat16, torch.float64, torch.contiguous_format)
    gc.collect()
    before = [sys.getrefcount(t) for t in counted]
    blocks = sys.getallocatedblocks()
    for _ in range(200):
        for fn in calls:
            r = fn()
            outs = [weakref.ref(t) for t in (r if isinstance(r, tuple) else (r,))
                    if t is not None]
            del r
            assert all(w() is None for w in outs)   # freed with the caller's references
        with pytest.raises(zgate.Error):
            hot.bwd(d, bad, o, None, None, False, 0)
        with pytest.raises(zgate.Error):   # given outputs, refused
            hot.bwd(d, z, o, bad, torch.empty_like(d), False, 0)
        with pytest.raises(zgate.Error):
            hot.fwd(o, z, bad, 0)
    gc.collect()
    # a temporary (a shape, a stride tuple, an int) kept per call would add 200 or more
    assert sys.getallocatedblocks() - blocks < 100
    assert [sys.getrefcount(t) for t in counted] == before


def test_argument_count_is_checked():
    hot = _hot()
    with pytest.raises(TypeError, match="takes 7 arguments"):
        hot.bwd(1, 2, 3)
    with pytest.raises(TypeError, match="takes 4 arguments"):
        hot.fwd()


def test_breakdown_runs_and_names_every_part(capsys):
    t = [torch.ones(1, 1, 1, 8, dtype=torch.bfloat16) for _ in range(3)]
    names = [n for n, _, _ in _overhead._parts(*t)]
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        _overhead.main(["--device", "cpu", "--shape", "1,1,1,8", "--only-breakdown",
                        "--calls", "3", "--repeats", "3"])
    text = buf.getvalue()
    for n in names + ["sum of the parts", "the whole", "rest: the whole minus the parts",
                      "custom-op dispatch", "entry and routing", "zgate._hot.bwd"]:
        assert n in text, n
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    assert len(rows) >= len(names) + 7


def test_new_outputs_are_compact_whatever_douts_strides(rng):
    """A compact dout, one that is contiguous with an odd stride on a size-1 dimension, or a
    permuted one: the new outputs have the compact strides of its shape all the same."""
    hot = _hot()
    shape = (1, 4, 2, 8)
    d, z, o = tinputs(rng, shape, torch.bfloat16)
    odd = torch.empty_strided(shape, (999, 16, 8, 1), dtype=torch.bfloat16)
    odd.copy_(d)
    perm = d.permute(0, 2, 1, 3).contiguous().permute(0, 2, 1, 3)
    assert odd.is_contiguous() and not perm.is_contiguous()
    compact = torch.empty(shape).stride()
    r = ref_bwd(*(np_of(t) for t in (d, z, o)))
    for dout in (d, odd, perm):   # compact: allocated without the memory_format keyword
        taken = hot.bwd(dout, z, o, None, None, False, 0)
        assert taken is not None
        for got in (taken, zgate.bwd(dout, z, o), torch.ops.zgate.bwd(dout, z, o)):
            dz, dos = got
            assert dz.stride() == dos.stride() == compact
            assert dz.dtype == dos.dtype == torch.bfloat16 and not dos.requires_grad
            assert dz.data_ptr() != dos.data_ptr()
            check("dz", np_of(dz), r[0], r[2], r[4])
            check("dout_scaled", np_of(dos), r[1], r[3], r[5])
