"""One contract on every entry: ranks 0..8 taken, rank 9 refused with zgate.Error and
ZGATE_ERR_NDIM, nothing written (NumPy, PyTorch's zgate.bwd/fwd, its custom ops and
silu_gate, zgate.triton, JAX)."""
import numpy as np
import pytest

import zgate

NINE = (1, 1, 1, 1, 1, 1, 2, 3, 4)


def _refused(fn, *args, **kw):
    with pytest.raises(zgate.Error) as ei:
        fn(*args, **kw)
    assert ei.value.status == zgate.Status.ERR_NDIM, ei.value
    return ei.value


def test_numpy():
    a = np.ones(NINE, np.float32)
    out = np.full(NINE, 7.0, np.float32)
    _refused(zgate.bwd, a, a, a, dz=out, dout_scaled=out.copy())
    _refused(zgate.fwd, a, a, out=out)
    assert (out == 7.0).all()
    eight = a.reshape(NINE[1:])
    assert zgate.fwd(eight, eight).shape == NINE[1:]


def test_torch_entries():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    import zgate.torch as zt
    import zgate.triton as ztr
    a = torch.ones(NINE)
    out = torch.full(NINE, 7.0)
    for fn, args in ((zgate.bwd, (a, a, a)), (zgate.fwd, (a, a)), (zt.silu_gate, (a, a)),
                     (torch.ops.zgate.bwd, (a, a, a)), (torch.ops.zgate.fwd, (a, a)),
                     (torch.ops.zgate.fwd_out, (a, a, out)), (ztr.bwd, (a, a, a)),
                     (ztr.fwd, (a, a))):
        _refused(fn, *args)
    assert (out == 7.0).all()
    # silu_gate at rank 8 and 0: its gradient is zgate_bwd's
    for shape in (NINE[1:], ()):
        o = torch.randn(shape, requires_grad=True)
        z = torch.randn(shape, requires_grad=True)
        zt.silu_gate(o, z).sum().backward()
        s = torch.sigmoid(z.detach())
        torch.testing.assert_close(o.grad, z.detach() * s)
        torch.testing.assert_close(z.grad, o.detach() * s * (1 + z.detach() * (1 - s)))


def test_jax():
    jax = pytest.importorskip("jax", reason="JAX is not installed")
    import os
    if not os.path.exists(os.path.join(os.path.dirname(zgate.__file__), "libzgate_jax.so")):
        pytest.skip("zgate was built where jax did not import (no libzgate_jax)")
    a = jax.numpy.ones(NINE, jax.numpy.float32)
    _refused(zgate.bwd, a, a, a)
    _refused(zgate.fwd, a, a)
