"""JAX arrays through DLPack: outputs are new JAX arrays (JAX arrays are immutable). On a GPU
they are refused: JAX cannot be told to wait for a kernel another library queued."""
import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="JAX is not installed")
import jax.numpy as jnp  # noqa: E402

import zgate  # noqa: E402
from zg_oracle import BF16, F16, F32, check, inputs, ref_bwd, ref_fwd  # noqa: E402


def _gpu_devices():
    try:
        return jax.devices("gpu")
    except RuntimeError:
        return []


def _devices():
    devs = [pytest.param(jax.devices("cpu")[0], id="cpu")]
    gpu = _gpu_devices()
    why = ("no GPU visible to JAX" if not gpu else
           "libzgate was built without CUDA" if not zgate.info()["cuda_built"] else "")
    devs.append(pytest.param(gpu[0] if gpu else None, id="gpu",
                             marks=pytest.mark.skipif(bool(why), reason=why or "gpu")))
    return devs


@pytest.mark.parametrize("device", _devices())
@pytest.mark.parametrize("dtype", [F32, F16, BF16], ids=lambda d: d.name)
def test_bwd_fwd_jax_arrays(rng, device, dtype):
    shape = (2, 21, 3, 40)
    host = inputs(rng, shape, dtype)
    dout, z, o = (jax.device_put(jnp.asarray(a), device) for a in host)
    if device.platform != "cpu":
        for call in (lambda: zgate.bwd(dout, z, o), lambda: zgate.fwd(o, z)):
            with pytest.raises(zgate.Error, match="JAX arrays on the CPU only"):
                call()
        return
    dz, dos = zgate.bwd(dout, z, o)
    assert isinstance(dz, jax.Array) and dz.dtype == dtype and dz.shape == shape
    assert dz.devices() == {device}
    r = ref_bwd(*host)
    check("dz", np.asarray(dz), r[0], r[2], r[4])
    check("dout_scaled", np.asarray(dos), r[1], r[3], r[5])
    out = zgate.fwd(o, z)
    assert isinstance(out, jax.Array) and out.dtype == dtype
    check("out", np.asarray(out), *ref_fwd(host[2], host[1]))
    # the results are ordinary JAX arrays: use them in a JAX computation
    np.testing.assert_array_equal(np.asarray(jnp.negative(dz)), -np.asarray(dz))


def test_outputs_cannot_be_given_for_jax(rng):
    dout, z, o = (jnp.asarray(a) for a in inputs(rng, (1, 2, 3, 4)))
    for kw in (dict(inplace=True), dict(dz=np.empty((1, 2, 3, 4), np.float32))):
        with pytest.raises(zgate.Error, match="immutable"):
            zgate.bwd(dout, z, o, **kw)
    with pytest.raises(zgate.Error, match="immutable"):
        zgate.fwd(o, z, out=np.empty((1, 2, 3, 4), np.float32))


def test_jax_inputs_numpy_outputs(rng):
    host = inputs(rng, (1, 5, 2, 8), F32)
    dz = np.full(host[0].shape, np.nan, np.float32)
    dos = np.full(host[0].shape, np.nan, np.float32)
    cpu = jax.devices("cpu")[0]  # numpy outputs: the JAX inputs must be on the CPU too
    zgate.bwd(np.array(host[0]), jax.device_put(host[1], cpu), jax.device_put(host[2], cpu),
              dz=dz, dout_scaled=dos)
    r = ref_bwd(*host)
    check("dz", dz, r[0], r[2], r[4])
    check("dout_scaled", dos, r[1], r[3], r[5])
