"""CuPy arrays, read through the CUDA Array Interface: same kind out, the call on the stream
the arrays name (CuPy's current one), non-contiguous views, and producers of the interface
alone."""
import numpy as np
import pytest

cupy = pytest.importorskip("cupy", reason="CuPy is not installed")

import zgate  # noqa: E402
from zg_oracle import F16, F32, check_bwd, check_fwd, inputs  # noqa: E402


def _why_not():
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "no CUDA device visible to CuPy"
    except Exception as e:  # no driver
        return "no CUDA device visible to CuPy (%s)" % type(e).__name__
    if not zgate.info()["cuda_built"]:
        return "libzgate was built without CUDA"
    return ""


pytestmark = pytest.mark.skipif(bool(_why_not()), reason=_why_not() or "cupy")


def _check_bwd(host, dz, dos):
    check_bwd(*host, cupy.asnumpy(dz), cupy.asnumpy(dos))


@pytest.mark.parametrize("dtype", [F32, F16], ids=lambda d: d.name)
def test_bwd_fwd_cupy(rng, dtype):
    shape = (2, 37, 3, 80)
    host = inputs(rng, shape, dtype)
    dout, z, o = (cupy.asarray(a) for a in host)
    dz, dos = zgate.bwd(dout, z, o)
    assert isinstance(dz, cupy.ndarray) and dz.dtype == dtype
    _check_bwd(host, dz, dos)
    out = zgate.fwd(o, z)
    assert isinstance(out, cupy.ndarray)
    check_fwd(host[2], host[1], cupy.asnumpy(out))


def test_projection_view_and_given_outputs(rng):
    b, l, h, d = 2, 40, 4, 64
    proj = cupy.asarray(rng.standard_normal((b, l, 3 * h * d)).astype(np.float32) * 4)
    z = proj[:, :, h * d:2 * h * d].reshape(b, l, h, d)
    assert z.data.ptr == proj.data.ptr + h * d * 4      # a view
    host = inputs(rng, (b, l, h, d), F32)
    dout, o = cupy.asarray(host[0]), cupy.asarray(host[2])
    dz = cupy.full((b, l, h, d), cupy.nan, dtype=cupy.float16)
    dos = cupy.full((b, l, h, d), cupy.nan, dtype=cupy.float32)
    zgate.bwd(dout, z, o, dz=dz, dout_scaled=dos)
    _check_bwd((host[0], cupy.asnumpy(z), host[2]), dz, dos)


_SPIN = r'''
extern "C" __global__ void spin(long long cycles) {
  long long t0 = clock64();
  while (clock64() - t0 < cycles) { }
}
'''


def _spin_then(stream, fn):
    """Queues a ~0.1 s spin on `stream`, then fn() (on the current stream, `stream` in a `with`):
    work queued on another stream that does not wait for `stream` would run before it."""
    with stream:
        cupy.RawKernel(_SPIN, "spin")((1,), (1,), (np.int64(200_000_000),))
    return fn()


def test_runs_on_cupy_current_stream(rng):
    shape = (4, 1024, 16, 64)
    host = inputs(rng, shape, F32)
    src, z, o = (cupy.asarray(a) for a in host)
    dout = cupy.zeros_like(src)
    cupy.cuda.Device().synchronize()
    spin = cupy.RawKernel(_SPIN, "spin")
    side = cupy.cuda.Stream(non_blocking=True)
    with side:
        spin((1,), (1,), (np.int64(200_000_000),))
        dout[...] = src                          # after the spin, on `side`
        dz, dos = zgate.bwd(dout, z, o)          # must be queued behind the copy
        assert not side.done, "zgate.bwd waited for the GPU (it must only enqueue)"
    side.synchronize()
    _check_bwd(host, dz, dos)


@pytest.mark.parametrize("given", [False, True], ids=["new", "given"])
def test_user_stream_result_read_on_that_stream(rng, given):
    """On a user's non-blocking stream, behind a spin: the inputs written there, zgate's work
    queued after them, and the result read on the same stream without a device-wide wait."""
    shape = (2, 333, 4, 64)
    host = inputs(rng, shape, F16)
    side = cupy.cuda.Stream(non_blocking=True)
    with side:
        src = [cupy.asarray(a) for a in host]
        dout, z, o = (cupy.zeros_like(a) for a in src)
        dz, dos = (cupy.full(shape, cupy.nan, dtype=cupy.float32) for _ in range(2))
        side.synchronize()

        def call():
            for dst, a in zip((dout, z, o), src):
                dst[...] = a
            if given:
                return zgate.bwd(dout, z, o, dz=dz, dout_scaled=dos)
            return zgate.bwd(dout, z, o)
        rz, rs = _spin_then(side, call)
        assert not side.done, "zgate.bwd waited for the GPU (it must only enqueue)"
        got = cupy.asnumpy(rz, stream=side), cupy.asnumpy(rs, stream=side)   # read on `side`
    _check_bwd(host, *got)
    assert (rz is dz) == given


def test_non_contiguous_views_and_guards(rng):
    """Strided inputs (a transposed view) and outputs (views into NaN-poisoned buffers with
    guard columns): each read as its strides say, nothing written outside the views."""
    b, l, h, d, guard = 2, 31, 3, 40, 5
    host = inputs(rng, (b, l, h, d), F32)
    dout = cupy.asarray(np.ascontiguousarray(host[0].transpose(0, 2, 1, 3))).transpose(0, 2, 1, 3)
    assert not dout.flags.c_contiguous
    z, o = cupy.asarray(host[1]), cupy.asarray(host[2])
    bz = cupy.full((b, l, h, d + guard), cupy.nan, dtype=cupy.float16)
    bs = cupy.full((b, l, h, d + guard), cupy.nan, dtype=cupy.float32)
    rz, rs = zgate.bwd(dout, z, o, dz=bz[..., :d], dout_scaled=bs[..., :d])
    assert rz.data.ptr == bz.data.ptr
    _check_bwd(host, rz, rs)
    assert bool(cupy.isnan(bz[..., d:]).all()) and bool(cupy.isnan(bs[..., d:]).all())
    out = cupy.full((b, h, l, d), cupy.nan, dtype=cupy.float32).transpose(0, 2, 1, 3)
    zgate.fwd(o, z, out=out)
    check_fwd(host[2], host[1], cupy.asnumpy(out))
    # new outputs of a strided first input: compact
    nz, _ = zgate.bwd(dout, z, o)
    assert nz.flags.c_contiguous
    _check_bwd(host, nz, _)


def test_empty_arrays(rng):
    a = cupy.empty((0, 4, 8), dtype=cupy.float32)
    dz, dos = zgate.bwd(a, a, a)
    assert dz.shape == (0, 4, 8) and isinstance(dz, cupy.ndarray)


class _Interface:
    """A producer of the CUDA Array Interface alone (no __dlpack__): a CuPy array's dict,
    changed by `changes` (None: the key removed)."""

    def __init__(self, a, **changes):
        self.a, self.changes = a, changes

    @property
    def __cuda_array_interface__(self):
        d = dict(self.a.__cuda_array_interface__, **self.changes)
        return {k: v for k, v in d.items() if v is not None or k not in self.changes}


def test_interface_only_producer(rng):
    """A producer with the interface alone: read as its dict says (explicit strides, v2 with
    no stream), given outputs written, new ones refused, a read-only one refused untouched."""
    shape = (2, 9, 3, 80)
    host = inputs(rng, shape, F32)
    dout, z, o = (cupy.asarray(a) for a in host)
    dz, dos = (cupy.full(shape, cupy.nan, dtype=cupy.float32) for _ in range(2))
    strided = _Interface(z, strides=z.strides)
    v2 = _Interface(o, version=2, stream=None)
    assert "stream" not in v2.__cuda_array_interface__
    zgate.bwd(_Interface(dout), strided, v2, dz=_Interface(dz), dout_scaled=_Interface(dos))
    _check_bwd(host, dz, dos)
    with pytest.raises(zgate.Error, match="cannot make outputs like a _Interface"):
        zgate.bwd(_Interface(dout), z, o)
    keep = cupy.full(shape, 3.0, dtype=cupy.float32)
    ro = _Interface(keep, data=(keep.data.ptr, True))
    with pytest.raises(zgate.Error, match="read-only"):
        zgate.bwd(dout, z, o, dz=ro, dout_scaled=dos)
    assert bool((keep == 3.0).all())
    # an array naming another stream than the call's, without __dlpack__ to ask: refused
    side = cupy.cuda.Stream(non_blocking=True)
    with pytest.raises(zgate.Error, match="one stream"):
        zgate.bwd(dout, _Interface(z, stream=side.ptr), o)


def test_pytorch_led_call_with_cupy_outputs(rng):
    """A call led by a PyTorch tensor runs on PyTorch's current stream; CuPy outputs, whose
    dicts name CuPy's (another) stream, are read through __dlpack__ on PyTorch's stream, so
    CuPy's earlier work on them (a poisoning fill behind a spin) comes first."""
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA here")
    shape = (2, 257, 4, 64)
    host = inputs(rng, shape, F32)
    tin = [torch.from_numpy(a).cuda() for a in host]
    dz = cupy.empty(shape, dtype=cupy.float32)
    dos = cupy.empty(shape, dtype=cupy.float32)
    cupy.cuda.Device().synchronize()
    ts = torch.cuda.Stream()
    with torch.cuda.stream(ts):
        _spin_then(cupy.cuda.Stream.null, lambda: (dz.fill(cupy.nan), dos.fill(cupy.nan)))
        zgate.bwd(*tin, dz=dz, dout_scaled=dos)
    ts.synchronize()
    cupy.cuda.Device().synchronize()
    _check_bwd(host, dz, dos)
