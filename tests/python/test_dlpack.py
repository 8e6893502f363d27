"""DLPack 1.x: versioned capsules asked for with max_version=(1, 0) and read, the legacy ones
where a producer offers nothing newer, the read-only flag honoured (such an output is
refused, nothing written), and versions zgate cannot read refused untouched."""
import ctypes
import sys

import numpy as np
import pytest

import dl_structs
import zgate
from test_numpy import _CapsuleProducer, check_bwd, expect_error
from zg_oracle import F32, inputs

_get_name = ctypes.pythonapi.PyCapsule_GetName
_get_name.restype = ctypes.c_char_p
_get_name.argtypes = [ctypes.py_object]
_new = ctypes.pythonapi.PyCapsule_New
_new.restype = ctypes.py_object
_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class _Forwarding:
    """A producer with no framework type, passing zgate's keywords on to a NumPy array's or
    a PyTorch tensor's own __dlpack__; records the keywords and the capsule's name."""

    def __init__(self, a):
        self.a, self.kwargs, self.names = a, [], []

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()

    def __dlpack__(self, **kw):
        self.kwargs.append(kw)
        cap = self.a.__dlpack__(**kw)
        self.names.append(_get_name(cap))
        return cap


def test_numpy_gives_a_versioned_capsule_and_it_is_read(rng):
    dout, z, o = inputs(rng, (2, 5, 3, 8), F32)
    pz, po = _Forwarding(z), _Forwarding(o)
    before = sys.getrefcount(z)
    dz, dos = zgate.bwd(dout, pz, po)
    assert pz.names == [b"dltensor_versioned"] and po.names == [b"dltensor_versioned"]
    assert pz.kwargs == [dict(max_version=(1, 0))]
    check_bwd(dout, z, o, dz, dos)
    assert sys.getrefcount(z) == before           # its deleter ran
    # an output written through a versioned capsule
    buf = np.full_like(dout, np.nan)
    zgate.fwd(o, z, out=_Forwarding(buf))
    assert np.array_equal(buf, zgate.fwd(o, z))


def test_read_only_numpy_array_refused_as_output_accepted_as_input(rng):
    dout, z, o = inputs(rng, (1, 4, 2, 8), F32)
    ro = np.full_like(dout, 7.0)
    ro.flags.writeable = False
    for out in (ro, _Forwarding(ro)):   # NumPy itself, and its DLPack 1.x read-only flag
        e = expect_error(None, zgate.bwd, dout, z, o, dz=out)
        assert "read-only" in e.message
        e = expect_error(None, zgate.fwd, o, z, out=out)
        assert "read-only" in e.message
        assert (ro == 7.0).all()
    e = expect_error(None, zgate.bwd, _Forwarding(ro), z, o, inplace=True)
    assert "read-only" in e.message and (ro == 7.0).all()
    # as an input it is fine: NumPy could not export it as a legacy capsule at all
    dz, dos = zgate.bwd(_Forwarding(ro), z, o)
    check_bwd(ro, z, o, dz, dos)


def test_legacy_producer_still_read(rng):
    dout, z, o = inputs(rng, (1, 4, 2, 8), F32)

    class Legacy(_Forwarding):
        def __dlpack__(self, stream=None):   # DLPack 0.x: no max_version
            return super().__dlpack__()

    p = Legacy(z)
    dz, dos = zgate.bwd(dout, p, o)
    assert p.names == [b"dltensor"]
    check_bwd(dout, z, o, dz, dos)


def test_torch_tensor_gives_a_versioned_capsule(rng):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    dout, z, o = inputs(rng, (2, 3, 2, 8), F32)
    tz = torch.from_numpy(z.copy())
    pz = _Forwarding(tz)
    dz, dos = zgate.bwd(dout, pz, o)
    assert pz.names == [b"dltensor_versioned"]
    check_bwd(dout, z, o, dz, dos)
    out = torch.full(tuple(o.shape), float("nan"))
    zgate.fwd(o, z, out=_Forwarding(out))
    assert np.array_equal(out.numpy(), zgate.fwd(o, z))


class _VersionedProducer(_CapsuleProducer):
    """A DLManagedTensorVersioned written by hand: its version and flags chosen."""

    def __init__(self, a, major=1, flags=0):
        super().__init__(a)
        v = self._versioned = dl_structs.DLManagedTensorVersioned()
        v.version.major, v.version.minor, v.flags = major, 0, flags
        v.dl_tensor = self._managed.dl_tensor
        v.deleter = self._deleter

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        assert max_version == (1, 0)
        return _new(ctypes.addressof(self._versioned), b"dltensor_versioned", None)


def test_hand_made_versioned_capsules(rng):
    dout, z, o = inputs(rng, (1, 4, 2, 8), F32)
    p = _VersionedProducer(z)
    dz, dos = zgate.bwd(dout, p, o)
    assert p.deleted == 1
    check_bwd(dout, z, o, dz, dos)
    # flagged read-only: fine to read, refused as an output; its deleter runs either way
    buf = np.full_like(dout, 3.0)
    ro = _VersionedProducer(buf, flags=dl_structs.FLAG_READ_ONLY)
    e = expect_error(None, zgate.fwd, o, z, out=ro)
    assert "read-only" in e.message and (buf == 3.0).all() and ro.deleted == 1
    zgate.fwd(ro, z)
    assert ro.deleted == 3   # one more export: np.from_dlpack learns the new output's shape
    copied = _VersionedProducer(buf, flags=dl_structs.FLAG_IS_COPIED)
    expect_error(None, zgate.fwd, o, z, out=copied)
    assert (buf == 3.0).all()
    # a major version zgate cannot read: refused, and the tensor is not touched
    v2 = _VersionedProducer(z, major=2)
    e = expect_error(None, zgate.fwd, o, v2)
    assert "version 2.0" in e.message and v2.deleted == 0


def _gpu_arrays(framework, host):
    """host arrays on the first GPU of CuPy or JAX; skips where that is not possible."""
    if not zgate.info()["cuda_built"]:
        pytest.skip("libzgate was built without CUDA")
    if framework == "cupy":
        cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
        try:
            if cupy.cuda.runtime.getDeviceCount() < 1:
                raise RuntimeError
        except Exception:
            pytest.skip("no CUDA device visible to CuPy")
        return [cupy.asarray(a) for a in host], cupy.asnumpy
    jax = pytest.importorskip("jax", reason="JAX is not installed")
    try:
        dev = jax.devices("gpu")[0]
    except RuntimeError:
        pytest.skip("no GPU visible to JAX")
    return [jax.device_put(a, dev) for a in host], np.asarray


@pytest.mark.parametrize("framework", ["cupy", "jax"])
def test_gpu_producers_give_versioned_capsules(rng, framework, monkeypatch):
    """On the GPU: a CuPy or JAX array exported through DLPack is asked for as a 1.x capsule
    with zgate's stream, and read right. CuPy answers with a versioned capsule; JAX may answer
    with a legacy one, which zgate reads. (The call's other arrays are CuPy's: JAX arrays on a
    GPU are taken as inputs only, since no output can be made like them.)"""
    host = inputs(rng, (2, 9, 3, 80), F32)
    (dout, z, o), to_host = _gpu_arrays("cupy", host)
    if framework == "jax":
        z = _gpu_arrays("jax", host)[0][1]
    pz = _Forwarding(z)
    dz, dos = zgate.bwd(dout, pz, o)
    assert len(pz.kwargs) == 1, pz.kwargs      # the keywords taken: no legacy retry
    kw = pz.kwargs[0]
    assert kw["max_version"] == (1, 0) and "stream" in kw
    check_bwd(*host, to_host(dz), to_host(dos))
    if framework == "cupy":
        assert pz.names == [b"dltensor_versioned"], pz.names
    else:
        assert pz.names[0] in (b"dltensor_versioned", b"dltensor"), pz.names
