"""Bad arguments raise zgate.Error in the caller's words and write nothing: keyword options
checked before any work, a refused dtype named in DLPack's words ("int32", "bool")."""

import numpy as np
import pytest

import zgate
from test_numpy import _Producer, expect_error, poisoned

SHAPE = (1, 2, 3, 4)
NOT_A_C_INT = ["x", 2.5, None, 10**12, -10**12, True, [2]]


@pytest.mark.parametrize("bad", NOT_A_C_INT, ids=repr)
def test_num_threads_must_be_a_c_int(bad):
    a = np.ones(SHAPE, np.float32)
    bz, dz = poisoned(SHAPE, np.float32)
    bs, dos = poisoned(SHAPE, np.float32)
    bo, out = poisoned(SHAPE, np.float32)
    for call, kw in ((zgate.bwd, dict(dz=dz, dout_scaled=dos)), (zgate.fwd, dict(out=out))):
        args = (a, a, a) if call is zgate.bwd else (a, a)
        e = expect_error(zgate.Status.ERR_OPTIONS, call, *args, num_threads=bad, **kw)
        assert "num_threads is %r" % (bad,) in e.message
    assert np.isnan(bz).all() and np.isnan(bs).all() and np.isnan(bo).all()


def test_num_threads_accepts_whole_numbers():
    a = np.full(SHAPE, 0.5, np.float32)
    want = zgate.bwd(a, a, a)
    for n in (0, 1, 3, np.int64(2), np.int32(2)):
        got = zgate.bwd(a, a, a, num_threads=n)
        assert all(np.array_equal(g, w) for g, w in zip(got, want))
        assert np.array_equal(zgate.fwd(a, a, num_threads=n), zgate.fwd(a, a))
    # in C range but out of the library's: the library's message
    e = expect_error(zgate.Status.ERR_OPTIONS, zgate.bwd, a, a, a, num_threads=-1)
    assert "num_threads is -1" in e.message


@pytest.mark.parametrize("bad", ["yes", None, 1, 0.0], ids=repr)
def test_inplace_must_be_a_bool(bad):
    a = np.ones(SHAPE, np.float32)
    dout = a.copy()
    e = expect_error(None, zgate.bwd, dout, a, a, inplace=bad)
    assert "inplace is %r" % (bad,) in e.message
    assert np.array_equal(dout, a)
    zgate.bwd(dout, a, a, inplace=np.False_)
    assert np.array_equal(dout, a)


NUMPY_DTYPES = [np.int32, np.bool_, np.float64, np.complex64, np.uint8]


@pytest.mark.parametrize("dtype", NUMPY_DTYPES, ids=lambda d: np.dtype(d).name)
def test_refused_numpy_dtype_is_named(dtype):
    a = np.ones(SHAPE, np.float32)
    bad = a.astype(dtype)
    name = str(bad.dtype)
    e = expect_error(zgate.Status.ERR_DTYPE, zgate.bwd, a, bad, a)
    assert "z: dtype %s is not float32, float16 or bfloat16" % name in e.message, e.message
    assert "code" not in e.message
    e = expect_error(zgate.Status.ERR_DTYPE, zgate.fwd, a, a, out=np.zeros(SHAPE, dtype))
    assert "out: dtype %s is not" % name in e.message and "code" not in e.message
    if dtype is not np.float64:   # float64 outputs are the reference's own
        e = expect_error(zgate.Status.ERR_DTYPE, zgate.reference_bwd, a, a, a,
                         dz=np.zeros(SHAPE, dtype))
        assert "dz: dtype %s is not" % name in e.message and "or float64" in e.message


def test_refused_dlpack_dtype_is_named():
    """A producer with no dtype attribute: the DLPack dtype in the usual words."""
    a = np.ones(SHAPE, np.float32)
    p = _Producer(a.astype(np.int16))
    assert not hasattr(p, "dtype")
    e = expect_error(zgate.Status.ERR_DTYPE, zgate.bwd, a, p, a)
    assert "z: dtype int16 is not" in e.message and "code" not in e.message
    # no outputs can be made like it either
    e = expect_error(zgate.Status.ERR_DTYPE, zgate.fwd, _Producer(a.astype(np.int16)), a)
    assert "dtype int16 is not" in e.message and "code" not in e.message


@pytest.mark.parametrize("dtype", ["int32", "bool", "float64", "complex64", "uint8"])
def test_refused_torch_dtype_is_named(dtype):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    a = torch.ones(SHAPE)
    bad = torch.ones(SHAPE, dtype=getattr(torch, dtype))
    e = expect_error(zgate.Status.ERR_DTYPE, zgate.bwd, a, bad, a)
    assert "z: dtype %s is not float32, float16 or bfloat16" % dtype in e.message, e.message
    assert "code" not in e.message
    e = expect_error(zgate.Status.ERR_DTYPE, zgate.fwd, bad, a)
    assert "o: dtype %s is not" % dtype in e.message
    for n in NOT_A_C_INT:
        expect_error(zgate.Status.ERR_OPTIONS, zgate.bwd, a, a, a, num_threads=n)
        expect_error(zgate.Status.ERR_OPTIONS, zgate.fwd, a, a, num_threads=n)


def test_refusal_names_tensor_and_dim_as_data():
    """What the library's refusal names comes as attributes, not text to parse; a pickled
    error keeps them."""
    import pickle
    a = np.ones(SHAPE, np.float32)
    e = expect_error(zgate.Status.ERR_NEGATIVE_STRIDE, zgate.bwd, a, a[:, ::-1], a)
    assert (e.tensor, e.dim) == ("z", 1), e
    e = expect_error(zgate.Status.ERR_SHAPE_MISMATCH, zgate.fwd, a, a[:, :, :1])
    assert (e.tensor, e.dim) == ("z", 2), e
    e = expect_error(zgate.Status.ERR_DTYPE, zgate.bwd, a, a, a.astype(np.int32))
    assert (e.tensor, e.dim) == ("o", None), e
    e2 = pickle.loads(pickle.dumps(e))
    assert (e2.status, e2.message, e2.tensor, e2.dim) == (e.status, e.message, "o", None)
    e = expect_error(zgate.Status.ERR_OPTIONS, zgate.bwd, a, a, a, num_threads=-1)
    assert (e.tensor, e.dim) == (None, None)
