"""zgate.bwd / zgate.fwd on NumPy arrays (float32, float16, bfloat16 through ml_dtypes)
against the float64 oracle, with poisoned outputs and guard regions."""
import ctypes
import os
import re
import threading

import numpy as np
import pytest

import dl_structs
import zgate
from zg_oracle import BF16, F16, F32, check, check_bwd, check_fwd, inputs

DTYPES = [F32, F16, BF16]
SHAPES = [(2, 33, 3, 17), (1, 7, 2, 64), (1, 3, 5, 1), (2, 5, 3, 80), (1, 19, 1, 3)]
ids = lambda d: d.name  # noqa: E731


def poisoned(shape, dtype, guard=7):
    """An output view with NaN everywhere and a guard region after each headdim row."""
    buf = np.full(shape[:-1] + (shape[-1] + guard,), np.nan, dtype=np.float32).astype(dtype)
    return buf, buf[..., :shape[-1]]


def guards_intact(buf, d):
    g = buf[..., d:].astype(np.float64)
    return bool(np.isnan(g).all())


@pytest.mark.parametrize("dtype", DTYPES, ids=ids)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_bwd_matches_reference(rng, dtype, shape):
    dout, z, o = inputs(rng, shape, dtype)
    dz, dos = zgate.bwd(dout, z, o)
    assert type(dz) is np.ndarray and dz.dtype == dtype and dos.dtype == dtype
    assert dz.shape == shape and dos.shape == shape
    check_bwd(dout, z, o, dz, dos)


@pytest.mark.parametrize("dtype", DTYPES, ids=ids)
def test_fwd_matches_reference(rng, dtype):
    shape = (2, 17, 3, 24)
    _, z, o = inputs(rng, shape, dtype)
    out = zgate.fwd(o, z)
    assert out.dtype == dtype and out.shape == shape
    check_fwd(o, z, out)


@pytest.mark.parametrize("dz_t", DTYPES, ids=ids)
@pytest.mark.parametrize("dos_t", DTYPES, ids=ids)
def test_given_outputs_any_dtype_with_guards(rng, dz_t, dos_t):
    shape = (2, 9, 3, 40)
    dout = inputs(rng, shape, BF16)[0]
    _, z, o = inputs(rng, shape, F16)
    z = z.astype(F32)
    bz, dz = poisoned(shape, dz_t)
    bs, dos = poisoned(shape, dos_t)
    rz, rs = zgate.bwd(dout, z, o, dz=dz, dout_scaled=dos)
    assert rz is dz and rs is dos
    check_bwd(dout, z, o, dz, dos)
    assert guards_intact(bz, shape[-1]) and guards_intact(bs, shape[-1])


def test_fwd_given_output_with_guards(rng):
    shape = (1, 11, 2, 33)
    _, z, o = inputs(rng, shape, F32)
    buf, out = poisoned(shape, BF16)
    assert zgate.fwd(o, z, out=out) is out
    check_fwd(o, z, out)
    assert guards_intact(buf, shape[-1])


def test_z_as_input_projection_view(rng):
    b, l, h, d = 2, 37, 4, 16
    d_in_proj = 3 * h * d + 24
    proj = rng.standard_normal((b, l, d_in_proj)).astype(np.float32) * 4
    z = proj[:, :, 2 * h * d:3 * h * d].reshape(b, l, h, d)
    assert np.shares_memory(z, proj), "the view must not be a copy"
    assert z.strides == (l * d_in_proj * 4, d_in_proj * 4, d * 4, 4)
    dout, _, o = inputs(rng, (b, l, h, d), F32)
    dz, dos = zgate.bwd(dout, z, o)
    check_bwd(dout, z, o, dz, dos)
    check_fwd(o, z, zgate.fwd(o, z))


@pytest.mark.parametrize("dtype", DTYPES, ids=ids)
def test_permuted_and_padded_layouts(rng, dtype):
    b, l, h, d = 2, 13, 3, 20
    dout, z, o = inputs(rng, (b, h, l, d), dtype)
    dout, z = dout.transpose(0, 2, 1, 3), z.transpose(0, 2, 1, 3)   # (b, l, h, d) views
    o = np.ascontiguousarray(o.transpose(0, 2, 1, 3))[:, :, :, ::1]
    bz, dz = poisoned((b, l, h, d), dtype, guard=3)
    full = np.full((b, h, l, d), np.nan, np.float32).astype(dtype)
    dos = full.transpose(0, 2, 1, 3)
    zgate.bwd(dout, z, o, dz=dz, dout_scaled=dos)
    check_bwd(dout, z, o, dz, dos)
    assert guards_intact(bz, d)


def test_every_other_element_stride(rng):
    shape = (1, 6, 2, 10)
    big = inputs(rng, shape[:-1] + (20,), F32)
    dout, z, o = (a[..., ::2] for a in big)
    dz, dos = zgate.bwd(dout, z, o)
    check_bwd(dout, z, o, dz, dos)


def test_broadcast_input_zero_stride(rng):
    shape = (2, 5, 3, 8)
    dout, z, o = inputs(rng, shape, F32)
    o_b = np.broadcast_to(o[:1, :1], shape)     # zero strides, read-only: fine for an input
    dz, dos = zgate.bwd(dout, z, o_b)
    check_bwd(dout, z, o_b, dz, dos)


@pytest.mark.parametrize("dtype", DTYPES, ids=ids)
def test_in_place(rng, dtype):
    shape = (2, 21, 3, 12)
    dout, z, o = inputs(rng, shape, dtype)
    original = dout.copy()
    dz, dos = zgate.bwd(dout, z, o, inplace=True)
    assert dos is dout
    check_bwd(original, z, o, dz, dout)
    # dout_scaled given as the very same array is the same thing
    d2 = original.copy()
    dz2, dos2 = zgate.bwd(d2, z, o, dout_scaled=d2)
    assert np.array_equal(d2.view(np.uint16 if d2.itemsize == 2 else np.uint32),
                          dout.view(np.uint16 if d2.itemsize == 2 else np.uint32))


@pytest.mark.parametrize("shape", [(0, 4, 2, 8), (2, 0, 3, 4), (1, 1, 1, 0), (0, 0, 0, 0)],
                         ids=str)
def test_size_zero_is_a_no_op(shape):
    a = np.zeros(shape, np.float32)
    dz, dos = zgate.bwd(a, a.copy(), a.copy())
    assert dz.shape == shape and dos.shape == shape
    assert zgate.fwd(a, a.copy()).shape == shape


def test_fewer_than_four_dims(rng):
    for shape in [(), (10,), (3, 7), (2, 3, 5)]:
        dout, z, o = inputs(rng, shape, F32)
        dz, dos = zgate.bwd(dout, z, o)
        assert dz.shape == shape
        check_bwd(dout, z, o, dz, dos)
        check_fwd(o, z, zgate.fwd(o, z))


def test_special_values():
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 1e-40, 88.0, -88.0,
                         88.8, -88.8, 104.0, -104.0, 1e30, -1e30, -1.2785, 16.0, -16.0, 3.4e38,
                         1.0, -1.0, 0.5], dtype=np.float32)
    n = len(specials)
    z = np.tile(specials, n).reshape(1, n, n, 1)
    dout = np.repeat(np.where(np.isfinite(specials) & (np.abs(specials) < 1e3), specials, 1.5)
                     .astype(np.float32), n).reshape(1, n, n, 1)
    o = np.full((1, n, n, 1), -0.75, np.float32)
    for dt in DTYPES:
        dz = np.empty(z.shape, dt)
        dos = np.empty(z.shape, dt)
        zgate.bwd(dout, z, o, dz=dz, dout_scaled=dos)
        check_bwd(dout, z, o, dz, dos)
        out = np.empty(z.shape, dt)
        zgate.fwd(o, z, out=out)
        check_fwd(o, z, out)
    # finite inputs near and far beyond the exp overflow give finite results
    big = np.array([88.7, -88.7, 104.0, -104.0, 1e30, -1e30, 3e38, -3e38], np.float32)
    zb = big.reshape(1, 1, 2, 4)
    ones = np.ones_like(zb)
    dz, dos = zgate.bwd(ones, zb, ones)
    assert np.isfinite(dz).all() and np.isfinite(dos[np.abs(zb) < 1e30]).all()


@pytest.mark.parametrize("dtype", DTYPES, ids=ids)
def test_huge_negative_z_with_overflowing_product(dtype):
    # s = sigmoid(-3.4e38) is 0, so dout * s * z is -0 in float64, although dout * z alone
    # overflows float32: the result must be -0 (finite), not NaN.
    z = np.array([-3.4e38, -3.0e38, -2.5e38, -1e38], np.float32).reshape(1, 1, 1, 4)
    dout = np.array([1.5, 2.0, 4.0, 8.0], np.float32).reshape(z.shape)
    o = np.full(z.shape, -0.75, np.float32)
    dz, dos = np.empty(z.shape, dtype), np.empty(z.shape, dtype)
    zgate.bwd(dout, z, o, dz=dz, dout_scaled=dos)
    check_bwd(dout, z, o, dz, dos)


def test_thread_count_does_not_change_bits(rng):
    shape = (4, 64, 4, 64)
    dout, z, o = inputs(rng, shape, F32)
    r1 = zgate.bwd(dout, z, o, num_threads=1)
    r2 = zgate.bwd(dout, z, o, num_threads=2)
    r0 = zgate.bwd(dout, z, o)
    for a, b, c in zip(r1, r2, r0):
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
        assert np.array_equal(a.view(np.uint32), c.view(np.uint32))


def test_python_threads_share_nothing(rng):
    cases = [inputs(rng, (1, 31, 2, 19 + i), F32) for i in range(6)]
    errors = []

    def work(case):
        try:
            for _ in range(25):
                dz, dos = zgate.bwd(*case)
                check_bwd(*case, dz, dos)
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(c,)) for c in cases]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_reference_entry_points(rng):
    shape = (1, 9, 2, 7)
    dout, z, o = inputs(rng, shape, F32)
    rdz, rdos = zgate.reference_bwd(dout, z, o)
    assert rdz.dtype == np.float64
    # float64 against the formula evaluated here in float64: a few ulp of double of the
    # elementwise scale (cancellation near the root of 1 + z(1 - s) makes plain relative
    # error meaningless there)
    d, zz, oo = (a.astype(np.float64) for a in (dout, z, o))
    s = 1.0 / (1.0 + np.exp(-zz))
    assert (np.abs(rdz - d * oo * s * (1 + zz * (1 - s)))
            <= 1e-14 * np.abs(d * oo) * s * (1 + np.abs(zz) * (1 - s))).all()
    assert (np.abs(rdos - d * zz * s) <= 1e-14 * np.abs(d * zz) * s).all()
    assert (np.abs(zgate.reference_fwd(o, z) - oo * zz * s) <= 1e-14 * np.abs(oo * zz) * s).all()
    # given outputs of the storage types get the rounded reference
    dz16 = np.empty(shape, BF16)
    zgate.reference_bwd(dout, z, o, dz=dz16, dout_scaled=np.empty(shape, F16))
    check("dz", dz16, rdz, dout, z, o)


# ---- errors: zgate.Error with the C status and message, and nothing written --------------

def expect_error(status, fn, *args, **kw):
    with pytest.raises(zgate.Error) as ei:
        fn(*args, **kw)
    e = ei.value
    assert isinstance(e, ValueError)
    if status is not None:
        assert e.status in (status if isinstance(status, tuple) else (status,)), e
        assert e.status_name == "ZGATE_" + e.status.name
        assert e.status_name in str(e)
    assert e.message and e.message in str(e)
    return e


def test_shape_mismatch_writes_nothing(rng):
    dout, z, o = inputs(rng, (2, 4, 3, 8), F32)
    bz, dz = poisoned(dout.shape, F32)
    bs, dos = poisoned(dout.shape, F32)
    e = expect_error(zgate.Status.ERR_SHAPE_MISMATCH, zgate.bwd, dout, z[:, :3], o, dz=dz,
                     dout_scaled=dos)
    assert "z" in e.message      # the library names the tensor at fault
    assert np.isnan(bz).all() and np.isnan(bs).all()


def test_bad_dtypes():
    a = np.zeros((1, 2, 3, 4), np.float32)
    expect_error(zgate.Status.ERR_DTYPE, zgate.bwd, a, a.astype(np.int32), a)
    expect_error(zgate.Status.ERR_DTYPE, zgate.bwd, a, a, a.astype(np.float64))
    expect_error(zgate.Status.ERR_DTYPE, zgate.fwd, a.astype(np.complex64), a)
    expect_error(zgate.Status.ERR_DTYPE, zgate.fwd, a, a.astype(">f4"))


def test_ndim_and_strides_and_alignment():
    a = np.zeros((1, 2, 3, 4), np.float32)
    deep = a.reshape((1,) * 5 + a.shape)   # 9 dimensions: more than ZGATE_MAX_NDIM
    expect_error(zgate.Status.ERR_NDIM, zgate.bwd, deep, deep, deep)
    expect_error(zgate.Status.ERR_NEGATIVE_STRIDE, zgate.bwd, a, a[:, ::-1], a)
    zero = np.lib.stride_tricks.as_strided(np.zeros(4, np.float32), a.shape, (0, 0, 0, 4),
                                           writeable=True)
    expect_error(zgate.Status.ERR_OUTPUT_SELF_OVERLAP, zgate.bwd, a, a, a, dz=zero)
    raw = np.zeros(a.size * 4 + 1, np.uint8)
    odd = raw[1:].view(np.float32).reshape(a.shape)
    expect_error(zgate.Status.ERR_MISALIGNED, zgate.bwd, odd, a, a)
    expect_error(zgate.Status.ERR_MISALIGNED, zgate.bwd, a, raw[:a.size * 4 + 1].view(np.uint8)
                 [: a.size * 4].view(np.float32).reshape(a.shape)[:, :, :, :], a,
                 dz=np.lib.stride_tricks.as_strided(raw[1:].view(np.float32), a.shape,
                                                    (24 * 4 + 2, 12 * 4 + 2, 4 * 4 + 2, 4)))


def test_aliasing_is_refused():
    a, b, c = (np.zeros((1, 2, 3, 4), np.float32) for _ in range(3))
    expect_error(zgate.Status.ERR_ALIAS, zgate.bwd, a, b, c, dz=b)
    expect_error(zgate.Status.ERR_ALIAS, zgate.bwd, a, b, c, dz=np.zeros_like(a),
                 dout_scaled=c)
    d = np.zeros_like(a)
    expect_error(zgate.Status.ERR_ALIAS, zgate.bwd, a, b, c, dz=d, dout_scaled=d)
    expect_error(zgate.Status.ERR_ALIAS, zgate.fwd, a, b, out=a)
    # sharing dout's memory with another dtype is not "in place"
    expect_error((zgate.Status.ERR_INPLACE_MISMATCH, zgate.Status.ERR_ALIAS), zgate.bwd, a, b,
                 c, dout_scaled=a.view(np.float16)[..., :4])
    expect_error(None, zgate.bwd, a, b, c, inplace=True, dout_scaled=d)


def test_options_and_inputs_checked_in_python():
    a = np.zeros((1, 2, 3, 4), np.float32)
    expect_error(zgate.Status.ERR_OPTIONS, zgate.bwd, a, a, a, num_threads=-1)
    ro = np.zeros_like(a)
    ro.flags.writeable = False
    expect_error(None, zgate.bwd, a, a, a, dz=ro)
    expect_error(None, zgate.bwd, ro, a, a, inplace=True)
    expect_error(None, zgate.reference_bwd, ro, a, a, dout_scaled=ro)
    expect_error(None, zgate.bwd, [[1.0]], a, a)
    other = _CapsuleProducer(a, device_type=4)     # OpenCL: a device zgate does not know
    expect_error(zgate.Status.ERR_DEVICE_MISMATCH, zgate.bwd, a, other, a)
    assert other.deleted == 1
    ocl = [_CapsuleProducer(np.zeros_like(a), device_type=4) for _ in range(5)]
    expect_error(zgate.Status.ERR_DEVICE_UNSUPPORTED, zgate.bwd, *ocl[:3], dz=ocl[3],
                 dout_scaled=ocl[4])
    assert [p.deleted for p in ocl] == [1] * 5
    expect_error(None, zgate.bwd, *ocl[:3])        # no way to allocate OpenCL outputs


_PyCapsule_New = ctypes.pythonapi["PyCapsule_New"]   # its own function object: restype is ours alone
_PyCapsule_New.restype = ctypes.py_object
_PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_NAME = b"dltensor"


class _CapsuleProducer:
    """A DLPack producer written here with ctypes: full control over the DLTensor it hands
    out, and a deleter that counts its calls."""

    def __init__(self, a, device_type=1):
        self.a, self.device_type, self.deleted = a, device_type, 0
        self._shape = (ctypes.c_int64 * a.ndim)(*a.shape)
        self._strides = (ctypes.c_int64 * a.ndim)(*(s // a.itemsize for s in a.strides))
        self._deleter = dl_structs.DLDeleter(self._on_delete)
        m = self._managed = dl_structs.DLManagedTensor()
        m.dl_tensor.data = a.__array_interface__["data"][0]
        m.dl_tensor.device.device_type = device_type
        m.dl_tensor.ndim = a.ndim
        m.dl_tensor.dtype.code, m.dl_tensor.dtype.bits, m.dl_tensor.dtype.lanes = 2, 32, 1
        m.dl_tensor.shape = self._shape
        m.dl_tensor.strides = self._strides
        m.deleter = self._deleter

    def _on_delete(self, ptr):
        self.deleted += 1

    def __dlpack_device__(self):
        return (self.device_type, 0)

    def __dlpack__(self, stream=None):
        return _PyCapsule_New(ctypes.addressof(self._managed), _NAME, None)


class _Producer:
    """A bare DLPack producer (no NumPy type): goes through the capsule protocol."""

    def __init__(self, a):
        self.a = a
        self.capsules = 0

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()

    def __dlpack__(self, stream=None):
        self.capsules += 1
        return self.a.__dlpack__()


def test_capsule_deleter_called_once(rng):
    dout, z, o = inputs(rng, (1, 4, 2, 8), F32)
    p = _CapsuleProducer(z)
    dz, dos = zgate.bwd(dout, p, o)
    assert p.deleted == 1
    check_bwd(dout, z, o, dz, dos)
    cap = p.__dlpack__()
    zgate.fwd(o, _Fixed(cap, p))
    assert p.deleted == 2
    # a capsule already consumed is refused, not used twice
    expect_error(None, zgate.fwd, o, _Fixed(cap, p))
    assert p.deleted == 2


class _Fixed:
    def __init__(self, cap, p):
        self.cap, self.p = cap, p

    def __dlpack_device__(self):
        return self.p.__dlpack_device__()

    def __dlpack__(self, stream=None):
        return self.cap


def test_generic_dlpack_producer_and_deleter(rng):
    import sys
    dout, z, o = inputs(rng, (2, 5, 3, 8), F32)
    pz = _Producer(z)
    before = sys.getrefcount(z)
    dz, dos = zgate.bwd(dout, pz, o)
    assert pz.capsules == 1
    check_bwd(dout, z, o, dz, dos)
    # The capsule was consumed and its deleter called: NumPy's export reference is gone.
    assert sys.getrefcount(z) == before
    out = zgate.fwd(_Producer(o), _Producer(z))
    assert type(out) is np.ndarray
    check_fwd(o, z, out)


def test_status_table_matches_header():
    header = os.path.join(os.path.dirname(__file__), "..", "..", "include", "zgate.h")
    if not os.path.exists(header):
        pytest.skip("include/zgate.h not next to the tests")
    text = open(header).read()
    found = {m.group(1): int(m.group(2))
             for m in re.finditer(r"ZGATE_((?:OK|ERR_\w+))\s*=\s*(\d+)", text)}
    assert found == {s.name: int(s) for s in zgate.Status}


def test_info_and_version():
    info = zgate.info()
    assert info["version"] == zgate.__version__
    assert "scalar" in info["cpu_isas_built"]
    assert info["cpu_isa_chosen"] in info["cpu_isas_available"]
    assert os.path.exists(zgate.library_path())
    # CUDA: the devices seen, named, or why there are none (no driver, no device, no backend)
    n = info["cuda_device_count"]
    assert isinstance(n, int) and n >= 0
    if n:
        assert info["cuda_devices"].startswith("cuda:0 ") and "cuda_unavailable" not in info
    else:
        assert info["cuda_unavailable"] and "cuda_devices" not in info
        if not info["cuda_built"]:
            assert info["cuda_unavailable"] == "libzgate was built without CUDA"


# A libcuda.so.1 that only records that it was loaded: the CUDA runtime inside libzgate finds
# it before the machine's (LD_LIBRARY_PATH), sees no driver entry points and reports none.
FAKE_DRIVER = r"""
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void loaded(void) {
  FILE *f = fopen(getenv("ZGATE_TEST_DRIVER_MARK"), "w");
  if (f) fclose(f);
}
"""
DRIVER_STEPS = r"""
import os, sys
import numpy as np
mark = os.environ["ZGATE_TEST_DRIVER_MARK"]
import zgate
zgate.library_path()
rng = np.random.default_rng(int(sys.argv[1]))
dout, z, o = (rng.standard_normal((2, 9, 3, 20), dtype=np.float32) for _ in range(3))
zgate.bwd(dout, z, o); zgate.fwd(o, z)
print("before info:", os.path.exists(mark))
zgate.info()
print("after info:", os.path.exists(mark))
"""


def test_only_info_loads_the_cuda_driver(tmp_path):
    """docs/api.md: CUDA does not survive fork(), so importing zgate, library_path() and CPU
    calls must not load the driver; info() does (it counts the devices)."""
    import shutil
    import subprocess
    import sys
    if not zgate.info()["cuda_built"]:
        pytest.skip("libzgate was built without CUDA: it never loads the driver")
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler to build the stand-in libcuda.so.1")
    (tmp_path / "fake.c").write_text(FAKE_DRIVER)
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(tmp_path / "libcuda.so.1"),
                    str(tmp_path / "fake.c")], check=True)
    path = os.pathsep.join(filter(None, (str(tmp_path), os.environ.get("LD_LIBRARY_PATH"))))
    env = dict(os.environ, LD_LIBRARY_PATH=path, ZGATE_TEST_DRIVER_MARK=str(tmp_path / "loaded"))
    seed = str(np.random.SeedSequence().entropy % 2**32)
    out = subprocess.run([sys.executable, "-c", DRIVER_STEPS, seed], env=env, check=True,
                         text=True, capture_output=True).stdout
    assert "before info: False" in out, out
    assert "after info: True" in out, out  # the stand-in was the driver looked for




def test_bfloat16_byte_order_and_read_only(rng):
    """bfloat16 arrays are read without a format once one has been seen (binding.c's
    bf16_dtype): a byte-swapped bfloat16 array is refused, as an input or an output, before
    and after that, and a read-only one is refused as an output; nothing is written. A
    native array read either way gives the same bits."""
    shape = (1, 3, 2, 8)
    dout, z, o = inputs(rng, shape, BF16)
    swapped = np.dtype(BF16).newbyteorder(">")
    for _ in range(2):
        z_sw = z.astype(swapped)
        assert not np.array_equal(z_sw.view(np.uint16), z.view(np.uint16))
        expect_error(zgate.Status.ERR_DTYPE, zgate.bwd, dout, z_sw, o)
        out_sw = np.full(shape, np.nan, np.float32).astype(swapped)
        before = out_sw.copy()
        expect_error(zgate.Status.ERR_DTYPE, zgate.bwd, dout, z, o, dz=out_sw,
                     dout_scaled=np.empty(shape, BF16))
        assert np.array_equal(out_sw.view(np.uint16), before.view(np.uint16))
        ro = np.full(shape, np.nan, np.float32).astype(BF16)
        ro.flags.writeable = False
        expect_error(None, zgate.bwd, dout, z, o, dz=ro, dout_scaled=np.empty(shape, BF16))
        assert np.isnan(ro.astype(np.float32)).all()
        dz, dos = zgate.bwd(dout, z, o)
        check_bwd(dout, z, o, dz, dos)
        assert np.array_equal(zgate.bwd(dout, z, o)[0].view(np.uint16), dz.view(np.uint16))
