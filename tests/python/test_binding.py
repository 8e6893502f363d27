"""zgate._binding as such: torch.compile before any eager call, PyTorch tensors read through
the DLPack C exchange API, new NumPy outputs aligned, the accuracy oracle's entry, and the
package's modules without import circles."""
import ast
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import zgate
from zgate import _binding

HERE = os.path.dirname(os.path.abspath(__file__))

COMPILED_FIRST = textwrap.dedent("""
    import torch, zgate

    def new(d, z, o):
        return zgate.bwd(d, z, o)

    def given(d, z, o, dz, ds):
        return zgate.bwd(d, z, o, dz=dz, dout_scaled=ds)

    def forward(o, z):
        return zgate.fwd(o, z)

    torch.manual_seed(0)
    d, z, o = (torch.randn(2, 5, 3, 8) for _ in range(3))
    dz, ds = torch.full_like(d, float("nan")), torch.full_like(d, float("nan"))
    # each compiled and called before any eager call of zgate in this process
    got_new = torch.compile(new, fullgraph=True)(d, z, o)
    got_given = torch.compile(given, fullgraph=True)(d, z, o, dz, ds)
    got_fwd = torch.compile(forward, fullgraph=True)(o, z)
    want_dz, want_ds = zgate.reference_bwd(d.numpy(), z.numpy(), o.numpy())
    want_out = zgate.reference_fwd(o.numpy(), z.numpy())
    close = lambda a, b: bool(abs(a.double().numpy() - b).max() < 1e-5)
    assert got_given[0] is dz and got_given[1] is ds
    print("ok", close(got_new[0], want_dz), close(got_new[1], want_ds), close(dz, want_dz),
          close(ds, want_ds), close(got_fwd, want_out))
""")


def test_torch_compile_before_any_eager_call():
    pytest.importorskip("torch", reason="PyTorch is not installed")
    r = subprocess.run([sys.executable, "-c", COMPILED_FIRST], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split()[-6:] == ["ok"] + ["True"] * 5, r.stdout + r.stderr[-2000:]


def test_torch_tensors_take_the_exchange_api(rng):
    """A tensor that requires grad cannot go through __dlpack__ (PyTorch refuses it); read
    through the exchange API it is taken as it is."""
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    if not hasattr(torch.Tensor, "__dlpack_c_exchange_api__"):
        pytest.skip("this PyTorch has no DLPack C exchange API")
    o = torch.tensor(rng.standard_normal((2, 3, 4, 5)), dtype=torch.float32, requires_grad=True)
    z = torch.tensor(rng.standard_normal((2, 3, 4, 5)), dtype=torch.float32)
    from zg_oracle import check_fwd
    out = zgate.fwd(o, z)
    assert type(out) is torch.Tensor and not out.requires_grad
    check_fwd(o.detach().numpy(), z.numpy(), out.numpy())


@pytest.mark.parametrize("shape", [(1,), (3, 5), (2, 3, 4, 5), (1, 1, 1, 1, 1, 7), (0, 4)])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_new_numpy_outputs_are_aligned(rng, shape, dtype):
    a = rng.standard_normal(shape).astype(dtype)
    outs = list(zgate.bwd(a, a, a)) + [zgate.fwd(a, a), zgate.reference_fwd(a, a)]
    for x in outs:
        assert x.shape == shape and x.flags.c_contiguous and x.flags.writeable
        assert x.size == 0 or x.ctypes.data % 64 == 0


def test_check_tensor_is_the_oracle(rng):
    o, z = (rng.standard_normal((2, 3, 4, 5)).astype(np.float32) for _ in range(2))
    out = zgate.fwd(o, z)
    ref = zgate.reference_fwd(o, z)
    st = _binding.check_tensor(2, out, ref, None, z, o)   # ZGATE_CHECK_OUT
    assert st["count"] == out.size and st["failures"] == 0 and st["first_fail"] == -1
    assert 0 <= st["max_bound_ratio"] <= 1
    out.reshape(-1)[7] += 1.0
    st = _binding.check_tensor(2, out, ref, None, z, o)
    assert st["failures"] == 1 and st["first_fail"] == 7
    dout = rng.standard_normal(o.shape).astype(np.float32)
    dz, ds = zgate.bwd(dout, z, o)
    rdz, rds = zgate.reference_bwd(dout, z, o)
    assert _binding.check_tensor(0, dz, rdz, dout, z, o)["failures"] == 0
    assert _binding.check_tensor(1, ds, rds, dout, z, o)["failures"] == 0


def test_errors_import_without_the_library():
    """zgate._errors is plain Python (the Triton package uses it where libzgate is absent)."""
    tree = ast.parse(open(os.path.join(os.path.dirname(zgate.__file__), "_errors.py")).read())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
                for a in n.names}
    assert imported <= {"enum"}, imported


def _package_imports():
    """{module: modules of the package it imports at its top level}."""
    root = os.path.dirname(zgate.__file__)
    graph = {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            if not f.endswith(".py"):
                continue
            rel = os.path.relpath(os.path.join(dirpath, f), root)[:-3].replace(os.sep, ".")
            mod = "zgate" + ("" if rel == "__init__" else "." + rel.replace(".__init__", ""))
            pkg = mod if f == "__init__.py" else mod.rpartition(".")[0]
            deps = set()
            for n in ast.parse(open(os.path.join(dirpath, f)).read()).body:
                if isinstance(n, ast.ImportFrom) and n.level:
                    base = pkg.rsplit(".", n.level - 1)[0] if n.level > 1 else pkg
                    target = base + ("." + n.module if n.module else "")
                    deps.add(target)
                    deps.update(target + "." + a.name for a in n.names)
                elif isinstance(n, ast.Import):
                    deps.update(a.name for a in n.names if a.name.startswith("zgate"))
            graph[mod] = deps
    return {m: {d for d in deps if d in graph and d != m} for m, deps in graph.items()}


def test_no_import_circles():
    graph = _package_imports()
    seen, path = set(), []

    def visit(m):
        assert m not in path, "import circle: " + " -> ".join(path[path.index(m):] + [m])
        if m in seen:
            return
        path.append(m)
        for d in graph[m]:
            if d != "zgate":   # every submodule imports its package first: not a circle
                visit(d)
        path.pop()
        seen.add(m)
    for m in graph:
        visit(m)


def _leak_rounds(calls, rounds=200):
    """Runs each call `rounds` times after a warm-up; returns the growth of the interpreter's
    allocated blocks (a leaked tuple, capsule or output shows as one block per round)."""
    for c in calls:
        c()
    before = sys.getallocatedblocks()
    for _ in range(rounds):
        for c in calls:
            c()
    return sys.getallocatedblocks() - before


def _refused(call):
    def run():
        try:
            call()
        except zgate.Error:
            return
        raise AssertionError("not refused")
    return run


@pytest.mark.parametrize("framework", ["numpy", "torch", "dlpack"])
def test_calls_keep_no_references(rng, framework):
    """Taken and refused calls leave every argument's reference count as it was and keep no
    temporaries (new outputs freed with the caller's references)."""
    a = [rng.standard_normal((2, 3, 4, 5)).astype(np.float32) for _ in range(5)]
    if framework == "torch":
        torch = pytest.importorskip("torch", reason="PyTorch is not installed")
        a = [torch.from_numpy(x) for x in a]
    elif framework == "dlpack":
        from test_numpy import _Producer
        a = a[:3] + [np.empty_like(a[0]) for _ in range(2)]
        a[1] = _Producer(a[1])
    bad = a[0][:, :, :, :2]   # another shape
    calls = [lambda: zgate.bwd(a[0], a[1], a[2]),
             lambda: zgate.bwd(a[0], a[1], a[2], dz=a[3], dout_scaled=a[4]),
             lambda: zgate.fwd(a[2], a[1]),
             lambda: zgate.fwd(a[2], a[1], out=a[3]),
             _refused(lambda: zgate.bwd(a[0], a[1], a[2], dz=bad, dout_scaled=a[4])),
             _refused(lambda: zgate.fwd(a[2], a[1], num_threads="x"))]
    counts = [sys.getrefcount(x) for x in a + [bad]]
    growth = _leak_rounds(calls)
    assert [sys.getrefcount(x) for x in a + [bad]] == counts
    assert growth < 100, growth   # 200 rounds: a leak per call would be >= 200


def test_torch_without_the_exchange_api(rng, monkeypatch):
    """A PyTorch without the exchange API: tensors go through __dlpack__ of a detached alias
    (so one that requires grad is taken too), given outputs' versions bumped."""
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    from zg_oracle import check_fwd
    from zgate import _kinds
    monkeypatch.setattr(_kinds, "_exchange_api", lambda t: None)
    _binding.configure(_kinds.classify, _kinds.reference_like)   # forget the cached kinds
    try:
        o = torch.tensor(rng.standard_normal((2, 3, 4, 5)), dtype=torch.float32,
                         requires_grad=True)
        z = torch.tensor(rng.standard_normal((2, 3, 4, 5)), dtype=torch.float32)
        check_fwd(o.detach().numpy(), z.numpy(), zgate.fwd(o, z).numpy())
        out = torch.full_like(z, float("nan"))
        v = out._version
        assert zgate.fwd(o, z, out=out) is out and out._version == v + 1
        check_fwd(o.detach().numpy(), z.numpy(), out.numpy())
    finally:
        monkeypatch.undo()
        _binding.configure(_kinds.classify, _kinds.reference_like)


def test_package_imports_without_the_binding(tmp_path):
    """A package without zgate._binding (a source tree): `import zgate` and its Error and
    Status work; a call names what is missing."""
    import shutil
    src = os.path.dirname(zgate.__file__)
    shutil.copytree(src, str(tmp_path / "zgate"),
                    ignore=lambda d, names: [n for n in names if n.startswith("_binding")
                                             or n.startswith("libzgate")])
    code = ("import zgate\nassert zgate.Status.ERR_DTYPE == 8\n"
            "try:\n    zgate.fwd(None, None)\nexcept zgate.Error as e:\n    print(e)\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       cwd=str(tmp_path), timeout=120)
    assert r.returncode == 0, r.stderr
    assert "zgate._binding is not built" in r.stdout and "pip install ." in r.stdout, r.stdout


class _Interface:
    """A producer of the CUDA Array Interface alone (no __dlpack__), over a NumPy array's
    memory, its dict changed by `changes`. Host memory: a call that gets as far as asking the
    CUDA driver where the data is is refused there (no driver, or memory it does not know)."""

    def __init__(self, a, **changes):
        self.a = a
        self.d = dict(shape=a.shape, typestr=a.dtype.str, data=(a.ctypes.data, False),
                      strides=None if a.flags.c_contiguous else a.strides, version=3, stream=1)
        self.d.update(changes)

    @property
    def __cuda_array_interface__(self):
        return self.d


class _InterfaceAndDLPack(_Interface):
    """The same, with __dlpack__ too (recording its calls)."""

    def __init__(self, a, **changes):
        super().__init__(a, **changes)
        self.exports = []

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()

    def __dlpack__(self, **kw):
        self.exports.append(kw)
        return self.a.__dlpack__(**kw)


def _sentinels(shape=(2, 3, 4, 5)):
    return [np.full(shape, 7.0, np.float32) for _ in range(5)]


@pytest.mark.parametrize("change, status, words", [
    (dict(typestr=">f4"), zgate.Status.ERR_DTYPE, "typestr '>f4' is not one zgate reads"),
    (dict(typestr="<V2"), zgate.Status.ERR_DTYPE, "bfloat16 through __dlpack__"),
    (dict(typestr="<f"), zgate.Status.ERR_DTYPE, "typestr '<f' is not one"),
    (dict(typestr=4), zgate.Status.ERR_DTYPE, "typestr 4 is not one"),
    (dict(mask=(0, False)), None, "masked array"),
    (dict(strides=(240, 80, 20, 6)), zgate.Status.ERR_MISALIGNED, "not multiples of its element"),
    (dict(strides=(60, 20, 4)), None, "as long as 'shape'"),
    (dict(shape=[2, 3, 4, 5]), None, "'shape' (a tuple)"),
    (dict(data=5), None, "(pointer, read_only)"),
    (dict(stream=0), None, "names stream 0"),
    (dict(stream="s"), None, "names stream 's'"),
    (dict(shape=(1,) * 9, strides=None), zgate.Status.ERR_NDIM, "at most 8"),
])
@pytest.mark.parametrize("position", ["input", "output"])
def test_cuda_array_interface_refused_with_reasons(change, status, words, position):
    """What the CUDA Array Interface dict cannot give zgate is refused with the reason, in
    inputs and outputs alike; nothing is written."""
    a = _sentinels()
    # the others without data, so that the CUDA driver is not asked where it is
    arrays = [_Interface(x, data=(0, False)) for x in a]
    i = 1 if position == "input" else 3
    arrays[i] = _Interface(a[i], **change)
    with pytest.raises(zgate.Error) as ei:
        zgate.bwd(arrays[0], arrays[1], arrays[2], dz=arrays[3], dout_scaled=arrays[4])
    assert ei.value.status == status and words in ei.value.message, ei.value
    assert all((x == 7.0).all() for x in a)


def test_cuda_array_interface_not_a_dict():
    class Odd(_Interface):
        __cuda_array_interface__ = property(lambda self: [self.d])
    a = _sentinels()
    with pytest.raises(zgate.Error, match="z: its __cuda_array_interface__ is not one"):
        zgate.fwd(_Interface(a[0], data=(0, False)), Odd(a[1]), out=_Interface(a[2]))


def test_cuda_array_interface_read_only_output():
    a = _sentinels()
    ro = _Interface(a[3], data=(a[3].ctypes.data, True))
    x = [_Interface(v, data=(0, False)) for v in a]   # no data: the CUDA driver is not asked
    for call in (lambda: zgate.bwd(x[0], x[1], x[2], dz=ro, dout_scaled=x[4]),
                 lambda: zgate.fwd(x[0], x[1], out=ro),
                 lambda: zgate.bwd(ro, x[1], x[2], inplace=True)):
        with pytest.raises(zgate.Error, match="read-only array .its __cuda_array_interface__"):
            call()
    assert all((x == 7.0).all() for x in a)


def test_cuda_array_interface_data_asked_of_the_cuda_driver():
    """A well-formed dict naming host memory: refused where the CUDA driver is asked where the
    data is (no driver here, or one that does not know the memory); nothing written."""
    a = _sentinels()
    with pytest.raises(zgate.Error, match="dout: its __cuda_array_interface__ names data at") as e:
        x = [_Interface(v) for v in a]
        zgate.bwd(x[0], x[1], x[2], dz=x[3], dout_scaled=x[4])
    assert "no CUDA driver" in e.value.message or "does not know" in e.value.message
    assert all((x == 7.0).all() for x in a)
    with pytest.raises(zgate.Error, match="cannot make outputs like a _Interface; pass them"):
        zgate.bwd(*[_Interface(np.empty((0, 3), np.float32), data=(0, False))] * 3)


def test_cuda_array_interface_one_stream_a_call():
    """A call runs on the stream its first array names; an array naming another is read
    through __dlpack__ (asked for the call's stream) where it has one, else refused."""
    empty = [np.empty((0, 4), np.float32) for _ in range(5)]   # no data: no driver asked
    s5 = [_Interface(x, stream=5, data=(0, False)) for x in empty]
    other = _Interface(empty[1], stream=7, data=(0, False))
    with pytest.raises(zgate.Error, match="z: .* names CUDA stream 0x7, an earlier array 0x5"):
        zgate.bwd(s5[0], other, s5[2], dz=s5[3], dout_scaled=s5[4])
    # stream None and a v2 dict (no stream) name none: the next array's stream is the call's
    none = _Interface(empty[0], stream=None, data=(0, False))
    v2 = _Interface(empty[0], data=(0, False))
    del v2.d["stream"], v2.d["version"]
    for first in (none, v2):
        with pytest.raises(zgate.Error, match="dout_scaled: .* stream 0x7, an earlier array 0x5"):
            zgate.bwd(first, s5[1], s5[2], dz=s5[3], dout_scaled=other)
    # with __dlpack__: exported on the call's stream instead (here a CPU array, so no stream
    # keyword: the library then refuses the mix of devices)
    both = _InterfaceAndDLPack(empty[1], stream=7, data=(0, False))
    with pytest.raises(zgate.Error) as e:
        zgate.bwd(s5[0], both, s5[2], dz=s5[3], dout_scaled=s5[4])
    assert both.exports == [dict(max_version=(1, 0))], both.exports
    assert e.value.status in (zgate.Status.ERR_DEVICE_MISMATCH, zgate.Status.ERR_NO_CUDA), e.value
    # and a dtype the typestr cannot name is read through __dlpack__ too
    raw = _InterfaceAndDLPack(empty[1], typestr="<V4", data=(0, False), stream=5)
    with pytest.raises(zgate.Error):
        zgate.bwd(s5[0], raw, s5[2], dz=s5[3], dout_scaled=s5[4])
    assert raw.exports == [dict(max_version=(1, 0))], raw.exports


def test_immutable_arrays_are_not_written(rng):
    """A JAX array given as an output of a call led by a NumPy array is refused, untouched
    (JAX arrays are immutable); as an input it is read."""
    jax = pytest.importorskip("jax", reason="JAX is not installed")
    a = rng.standard_normal((2, 3, 4)).astype(np.float32)
    j = jax.device_put(np.full_like(a, 7.0), jax.devices("cpu")[0])
    with pytest.raises(zgate.Error, match="dz is a .*, an immutable array: it cannot be written"):
        zgate.bwd(a, a, a, dz=j, dout_scaled=np.empty_like(a))
    with pytest.raises(zgate.Error, match="out is a .*, an immutable array"):
        zgate.fwd(a, a, out=j)
    assert (np.asarray(j) == 7.0).all()
    assert np.array_equal(zgate.fwd(a, j), zgate.fwd(a, np.asarray(j)))


def test_cuda_array_interface_refusals_keep_no_references():
    """Calls refused on the way (by the CUDA driver, a typestr, a stream) and one with an array
    read through __dlpack__ instead keep no references and no temporaries."""
    class Rerouted(_InterfaceAndDLPack):
        def __dlpack__(self, **kw):   # recording nothing: a record would grow
            return self.a.__dlpack__(**kw)
    a = _sentinels()
    empty = np.empty((0, 4), np.float32)
    s5 = [_Interface(empty, stream=5, data=(0, False)) for _ in range(5)]
    other = _Interface(empty, stream=7, data=(0, False))
    rerouted = Rerouted(empty, stream=7, data=(0, False))
    bad = _Interface(a[1], typestr=">f4")
    host = [_Interface(x) for x in a]
    calls = [_refused(lambda: zgate.bwd(host[0], host[1], host[2])),
             _refused(lambda: zgate.bwd(s5[0], bad, s5[2])),
             _refused(lambda: zgate.bwd(s5[0], s5[1], s5[2], dz=rerouted, dout_scaled=s5[4])),
             _refused(lambda: zgate.fwd(s5[0], other))]
    objs = a + s5 + [other, rerouted, bad] + host
    counts = [sys.getrefcount(x) for x in objs]
    growth = _leak_rounds(calls)
    assert [sys.getrefcount(x) for x in objs] == counts
    assert growth < 100, growth   # 200 rounds: a leak per call would be >= 200


def test_a_call_asks_for_its_stream_once(rng):
    """A call's stream, once known, is not asked again, even where it is the legacy default
    stream (0): here a producer that says it is on a CUDA device (and hands out host memory),
    of a kind whose stream function counts its calls."""
    from zgate import _kinds
    from zg_oracle import F32, check_bwd, inputs

    class SaysCuda:
        def __init__(self, a):
            self.a, self.streams = a, []

        def __dlpack_device__(self):
            return (2, 0)

        def __dlpack__(self, stream=None, max_version=None):
            self.streams.append(stream)
            return self.a.__dlpack__()
    asked = []
    classify = _kinds.classify
    mine = _kinds._kind(_kinds.DLPACK, stream=lambda device: asked.append(device) or 0)
    _binding.configure(lambda t: mine if t is SaysCuda else classify(t), _kinds.reference_like)
    try:
        host = inputs(rng, (2, 3, 4, 5), F32)
        dz, ds = (np.full(host[0].shape, np.nan, np.float32) for _ in range(2))
        arrays = [SaysCuda(x) for x in list(host) + [dz, ds]]
        zgate.bwd(*arrays[:3], dz=arrays[3], dout_scaled=arrays[4])
        assert asked == [0]
        assert [p.streams for p in arrays] == [[1]] * 5   # DLPack's number for stream 0
        check_bwd(*host, dz, ds)
    finally:
        _binding.configure(classify, _kinds.reference_like)
