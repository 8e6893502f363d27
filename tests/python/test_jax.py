"""JAX arrays through XLA's FFI (zgate._jax): the library as a custom call in JAX's programs,
eager and under jax.jit, on the CPU and (where JAX sees a CUDA GPU and libzgate has CUDA) on
the GPU; outputs are new JAX arrays, checked against the float64 reference."""
import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="JAX is not installed")
import jax.numpy as jnp  # noqa: E402

import zgate  # noqa: E402
from zg_oracle import BF16, F16, F32, check, check_bwd, check_fwd, inputs  # noqa: E402

DTYPES = [F32, F16, BF16]
dtype_ids = lambda d: np.dtype(d).name  # noqa: E731


def _gpu_devices():
    try:
        return jax.devices("gpu")
    except RuntimeError:
        return []


def _jax_built():
    import os
    return os.path.exists(os.path.join(os.path.dirname(zgate.__file__), "libzgate_jax.so"))


pytestmark = pytest.mark.skipif(not _jax_built(), reason="zgate was built where jax did not "
                                "import (no libzgate_jax): the JAX handlers are not built")


def _devices():
    devs = [pytest.param("cpu", id="cpu")]
    gpu = _gpu_devices()
    why = ("no GPU visible to JAX" if not gpu else
           "libzgate was built without CUDA" if not zgate.info()["cuda_built"] else "")
    devs.append(pytest.param("gpu", id="gpu",
                             marks=pytest.mark.skipif(bool(why), reason=why or "gpu")))
    return devs


def _device(name):
    return jax.devices(name)[0]


MODES = {"eager": lambda f: f, "jit": jax.jit}


def _put(host, device):
    return tuple(jax.device_put(jnp.asarray(a), device) for a in host)


def _check_bwd(host, dz, dos, dtype, device):
    for a in (dz, dos):
        assert isinstance(a, jax.Array) and a.dtype == dtype and a.shape == host[0].shape
        assert a.devices() == {device}
    check_bwd(*host, np.asarray(dz), np.asarray(dos))


def _check_fwd(host_o, host_z, out, dtype, device):
    assert isinstance(out, jax.Array) and out.dtype == dtype and out.shape == host_o.shape
    assert out.devices() == {device}
    check_fwd(host_o, host_z, np.asarray(out))


def _bwd_and_fwd(host, dev, mode, bwd_dtype, fwd_dtype):
    """zgate.bwd and zgate.fwd on the host arrays put on dev, each checked against float64."""
    dout, z, o = _put(host, dev)
    dz, dos = MODES[mode](zgate.bwd)(dout, z, o)
    _check_bwd(host, dz, dos, bwd_dtype, dev)
    _check_fwd(host[2], host[1], MODES[mode](zgate.fwd)(o, z), fwd_dtype, dev)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("device", _devices())
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_ids)
def test_bwd_fwd(rng, device, dtype, mode):
    dev = _device(device)
    host = inputs(rng, (2, 21, 3, 40), dtype)
    _bwd_and_fwd(host, dev, mode, dtype, dtype)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("device", _devices())
@pytest.mark.parametrize("dt", [(F32, BF16, F16), (BF16, F32, F32), (F16, BF16, BF16),
                                (F32, F16, BF16)], ids=lambda t: "-".join(map(dtype_ids, t)))
def test_mixed_dtypes(rng, device, dt, mode):
    # each tensor its own dtype; new outputs take dout's (bwd) or o's (fwd)
    dev = _device(device)
    host = tuple(a.astype(t) for a, t in zip(inputs(rng, (3, 7, 2, 33), F32), dt))
    _bwd_and_fwd(host, dev, mode, dt[0], dt[2])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("device", _devices())
@pytest.mark.parametrize("shape", [(), (1,), (1031,), (3, 17), (1, 13, 1), (5, 3, 1, 37),
                                   (2, 3, 1, 5, 7)], ids=str)
def test_ranks_and_odd_shapes(rng, device, shape, mode):
    dev = _device(device)
    for dtype in (F32, BF16):
        host = inputs(rng, shape, dtype)
        _bwd_and_fwd(host, dev, mode, dtype, dtype)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("device", _devices())
@pytest.mark.parametrize("shape", [(0,), (2, 0, 3), (0, 1, 1, 1, 4)], ids=str)
def test_size_zero(device, shape, mode):
    dev = _device(device)
    a = jax.device_put(jnp.zeros(shape, jnp.bfloat16), dev)
    b = jax.device_put(jnp.zeros(shape, jnp.float32), dev)
    dz, dos = MODES[mode](zgate.bwd)(a, b, b)
    out = MODES[mode](zgate.fwd)(b, a)
    for x, t in ((dz, BF16), (dos, BF16), (out, F32)):
        assert x.shape == shape and x.dtype == t and x.devices() == {dev}


@pytest.mark.parametrize("device", _devices())
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_ids)
def test_special_values(device, dtype):
    dev = _device(device)
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 1e-40, 88.0, -88.0,
                         88.8, -88.8, 104.0, -104.0, 1e30, -1e30, -1.2785, 16.0, -16.0, 3.4e38,
                         -3.4e38, 1.0, -1.0, 0.5], dtype=np.float32)
    n = len(specials)
    z = np.tile(specials, n).reshape(n, n)
    dout = np.repeat(np.where(np.isfinite(specials) & (np.abs(specials) < 1e3), specials, 1.5)
                     .astype(np.float32), n).reshape(n, n)
    o = np.full((n, n), -0.75, np.float32)
    with np.errstate(over="ignore"):   # float16: the largest magnitudes become infinities
        host = (dout.astype(dtype), z.astype(dtype), o.astype(dtype))
    for mode in MODES.values():
        dz, dos = mode(zgate.bwd)(*_put(host, dev))
        _check_bwd(host, dz, dos, dtype, dev)
        _check_fwd(host[2], host[1], mode(zgate.fwd)(*_put((host[2], host[1]), dev)), dtype, dev)


@pytest.mark.parametrize("device", _devices())
def test_subnormals_kept_on_many_threads(device):
    # XLA's CPU threads flush subnormals; the library's results keep them (z near -88 gives
    # sigmoid(z) below float32's smallest normal), also on its OpenMP threads (2^18 elements)
    dev = _device(device)
    z = np.linspace(-103.0, -80.0, 1 << 18, dtype=np.float32).reshape(64, 4096)
    host = (np.full_like(z, 1.5), z, np.full_like(z, -0.75))
    for mode in MODES.values():
        dz, dos = mode(zgate.bwd)(*_put(host, dev))
        _check_bwd(host, dz, dos, F32, dev)
        assert (np.asarray(dz) != 0).sum() > z.size // 2


@pytest.mark.parametrize("device", _devices())
def test_inside_a_jax_program(rng, device):
    # the call is one step of a jitted program: its inputs computed by XLA just before (z a
    # slice of a wider projection, copied by XLA into a compact buffer), its outputs used after
    dev = _device(device)
    dout, zx, o = (a.astype(np.float32) for a in inputs(rng, (4, 9, 2, 96), F32))

    @jax.jit
    def step(dout, zx, o):
        z = zx[..., 16:80]
        dz, dos = zgate.bwd(dout[..., :64] * 2.0, z, o[..., :64])
        return dz, dz + 1.0, jnp.sum(dos), zgate.fwd(o[..., :64], z)

    dz, dz1, total, out = step(*_put((dout, zx, o), dev))
    host = (dout[..., :64] * 2.0, zx[..., 16:80], o[..., :64])
    rdz, rdos = zgate.reference_bwd(*host)
    check("dz", np.asarray(dz), rdz, *host)
    np.testing.assert_array_equal(np.asarray(dz1), np.asarray(dz) + np.float32(1.0))
    np.testing.assert_allclose(float(total), rdos.sum(), rtol=1e-5, atol=1e-4)
    check_fwd(host[2], host[1], np.asarray(out))


@pytest.mark.parametrize("device", _devices())
def test_outputs_written_over_poison(rng, device):
    # donated NaN buffers of the outputs' shape and dtype are where XLA puts the results:
    # every element of them must have been written by the library
    dev = _device(device)
    host = inputs(rng, (3, 5, 2, 29), F16)
    args = _put(host, dev)
    poison = lambda: jax.device_put(jnp.full(host[0].shape, jnp.nan, F16), dev)  # noqa: E731
    p1, p2 = poison(), poison()
    where = {p1.unsafe_buffer_pointer(), p2.unsafe_buffer_pointer()}
    bwd = jax.jit(lambda p1, p2, *a: zgate.bwd(*a), donate_argnums=(0, 1), keep_unused=True)
    dz, dos = bwd(p1, p2, *args)
    assert {dz.unsafe_buffer_pointer(), dos.unsafe_buffer_pointer()} == where
    _check_bwd(host, dz, dos, F16, dev)
    p1 = poison()
    where = p1.unsafe_buffer_pointer()
    fwd = jax.jit(lambda p1, o, z: zgate.fwd(o, z), donate_argnums=0, keep_unused=True)
    out = fwd(p1, args[2], args[1])
    assert out.unsafe_buffer_pointer() == where
    _check_fwd(host[2], host[1], out, F16, dev)


def test_vmap_and_num_threads(rng):
    host = inputs(rng, (6, 5, 33), F32)
    dout, z, o = _put(host, _device("cpu"))
    dz, dos = jax.vmap(zgate.bwd)(dout, z, o)
    _check_bwd(host, dz, dos, F32, _device("cpu"))
    for n in (1, 3):
        dz1, dos1 = zgate.bwd(dout, z, o, num_threads=n)
        np.testing.assert_array_equal(np.asarray(dz1), np.asarray(dz))
        np.testing.assert_array_equal(np.asarray(dos1), np.asarray(dos))


def _expect_error(status, fn, *args, **kw):
    with pytest.raises(zgate.Error) as ei:
        fn(*args, **kw)
    assert ei.value.status == status, ei.value
    assert ei.value.message and ei.value.message in str(ei.value)
    return ei.value


@pytest.mark.parametrize("mode", MODES)
def test_errors_carry_the_library_message(rng, mode):
    dout, z, o = _put(inputs(rng, (2, 4, 3, 8), F32), _device("cpu"))
    e = _expect_error(zgate.Status.ERR_SHAPE_MISMATCH, MODES[mode](zgate.bwd), dout, z[:, :3], o)
    assert e.message == "z: dim 1 has size 3 but dout has 4 (shapes must be equal)"
    assert (e.tensor, e.dim) == ("z", 1)
    e = _expect_error(zgate.Status.ERR_SHAPE_MISMATCH, MODES[mode](zgate.fwd), o, z[0])
    assert e.message.startswith("z: ndim is 3 but o has 4")
    _expect_error(zgate.Status.ERR_DTYPE, MODES[mode](zgate.bwd), dout, z.astype(jnp.int32), o)
    _expect_error(zgate.Status.ERR_DTYPE, MODES[mode](zgate.fwd), o.astype(jnp.int8), z)
    deep = dout.reshape((1,) * 5 + dout.shape)   # 9 dimensions: more than ZGATE_MAX_NDIM
    _expect_error(zgate.Status.ERR_NDIM, MODES[mode](zgate.fwd), deep, deep)
    # a NumPy float64 input is refused, not narrowed to float32 by JAX
    _expect_error(zgate.Status.ERR_DTYPE, zgate.bwd, dout, np.asarray(z, np.float64), o)
    _expect_error(zgate.Status.ERR_OPTIONS, zgate.fwd, o, z, num_threads=-1)
    _expect_error(zgate.Status.ERR_OPTIONS, zgate.fwd, o, z, num_threads=1.5)


def test_outputs_cannot_be_given_for_jax(rng):
    dout, z, o = (jnp.asarray(a) for a in inputs(rng, (1, 2, 3, 4)))
    for kw in (dict(inplace=True), dict(dz=np.empty((1, 2, 3, 4), np.float32)),
               dict(dout_scaled=jnp.zeros((1, 2, 3, 4)))):
        with pytest.raises(zgate.Error, match="immutable"):
            zgate.bwd(dout, z, o, **kw)
    with pytest.raises(zgate.Error, match="immutable"):
        zgate.fwd(o, z, out=np.empty((1, 2, 3, 4), np.float32))


def test_a_build_without_the_handlers_says_so(monkeypatch):
    from zgate import _jax
    monkeypatch.setattr(_jax, "_lib", None)
    monkeypatch.setattr(_jax, "_LIB", _jax._LIB + ".absent")
    a = jnp.zeros((2, 3))
    with pytest.raises(zgate.Error, match="built without JAX.*jax imports"):
        zgate.fwd(a, a)


def test_jax_inputs_numpy_outputs(rng):
    # a call led by a NumPy array reads JAX inputs on the CPU through DLPack (zgate._binding)
    host = inputs(rng, (1, 5, 2, 8), F32)
    dz = np.full(host[0].shape, np.nan, np.float32)
    dos = np.full(host[0].shape, np.nan, np.float32)
    cpu = _device("cpu")
    zgate.bwd(np.array(host[0]), jax.device_put(host[1], cpu), jax.device_put(host[2], cpu),
              dz=dz, dout_scaled=dos)
    check_bwd(*host, dz, dos)


def test_numpy_first_with_traced_input_goes_through_xla(rng):
    # under jax.jit a NumPy dout beside a traced z is still one XLA call, with JAX outputs
    host = inputs(rng, (2, 3, 11), F32)
    dz, dos = jax.jit(lambda z, o: zgate.bwd(host[0], z, o))(*_put(host[1:], _device("cpu")))
    _check_bwd(host, dz, dos, F32, _device("cpu"))
