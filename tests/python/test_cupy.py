"""CuPy arrays: same kind out, CuPy's current stream used."""
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
