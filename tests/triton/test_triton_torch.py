"""zgate.triton on CPU tensors under the Triton interpreter: the shared case list against the
float64 reference (the acceptance run, precision only), guard regions, layouts that need a
copy, size 0, special values and every refusal. Run in its own process (conftest sets
TRITON_INTERPRET)."""
import json

import numpy as np
import pytest
import torch

import zgate
import zgate.triton as zt
from zgate import acceptance, cases
from zgate.acceptance.device import from_torch
from zg_oracle import check, inputs

TRITON = ["--device", "cpu", "--impl", "triton", "--quick", "--precision-only"]


def test_case_list(tmp_path):
    out, res = tmp_path / "report.md", tmp_path / "results.json"
    rc = acceptance.main(TRITON + ["--output", str(out), "--json", str(res)])
    assert rc == 0, out.read_text()
    rows = json.loads(res.read_text())["cases"]
    assert [r["case"] for r in rows] == [c.name for c in cases.cases(quick=True)]
    assert all(r["precision_ok"] and not r["error"] and "kernel" not in r for r in rows)
    assert "Triton interpreter" in out.read_text()


def test_golden_round_trip(tmp_path):
    gold = tmp_path / "gold.npz"
    args = TRITON + ["--filter", "2x5x3x80"]
    assert acceptance.main(args + ["--save-golden", str(gold)]) == 0
    assert acceptance.main(args + ["--golden", str(gold)]) == 0
    # a stored result one bfloat16 ulp off in many places must fail the comparison
    data = dict(np.load(gold))
    key = [k for k in data if " bf16 " in k and k.endswith("|0")][0]
    data[key] = data[key] + np.uint16(2)
    np.savez(gold, **data)
    assert acceptance.main(args + ["--golden", str(gold)]) == 1


def _t(a):
    return torch.from_numpy(np.ascontiguousarray(a))


def _guarded(shape, dtype, n_guard=37):
    """A NaN-poisoned output viewed at the front of a larger buffer, and the buffer."""
    n = int(np.prod(shape))
    buf = torch.full((n + n_guard,), float("nan"), dtype=dtype)
    buf[n:] = 12345.0
    return buf[:n].view(shape), buf, n


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(2, 5, 3, 80), (1, 3, 2, 3), (3, 1, 1, 1)])
def test_bwd_fwd_guards(rng, dtype, shape):
    dout, z, o = (_t(a).to(dtype) for a in inputs(rng, shape))
    dz, bz, n = _guarded(shape, dtype)
    dos, bs, _ = _guarded(shape, dtype)
    zt.bwd(dout, z, o, dz=dz, dout_scaled=dos)
    host = [from_torch(t) for t in (dout, z, o)]
    rdz, rdos = zgate.reference_bwd(*host)
    _check("dz", dz, rdz, *host)
    _check("dout_scaled", dos, rdos, *host)
    assert (bz[n:] == 12345.0).all() and (bs[n:] == 12345.0).all()
    out, bo, _ = _guarded(shape, dtype)
    zt.fwd(o, z, out=out)
    _check("out", out, zgate.reference_fwd(host[2], host[1]), None, host[1], host[2])
    assert (bo[n:] == 12345.0).all()


def _check(name, t, ref, dout, z, o):
    """The interpreter's bfloat16 outputs judged as rounded to nearest (its conversion
    truncates and loses subnormals), under the Triton kernel's float32 bound."""
    got, _ = cases.as_rounded_to_nearest(from_torch(t), ref)
    check(name, got, ref, dout, z, o, cases.TRITON_F32_ULPS)


def test_headdim_not_contiguous_is_copied(rng):
    shape = (2, 4, 3, 5)
    dout, z, o = (_t(a) for a in inputs(rng, shape))
    zs = z.transpose(2, 3).contiguous().transpose(2, 3)        # headdim stride 3
    dz = torch.full(shape[:3] + (shape[3],), float("nan")).transpose(2, 3).contiguous() \
        .transpose(2, 3)
    zt.bwd(dout, zs, o, dz=dz, dout_scaled=None)
    host = (dout.numpy(), z.numpy(), o.numpy())
    rdz, rdos = zgate.reference_bwd(*host)
    check("dz", dz.numpy(), rdz, *host, f32_ulps=cases.TRITON_F32_ULPS)
    d2 = dout.transpose(2, 3).contiguous().transpose(2, 3)     # in place through a copy
    _, dos = zt.bwd(d2, z, o, inplace=True)
    assert dos is d2
    check("dout_scaled", d2.numpy(), rdos, *host, f32_ulps=cases.TRITON_F32_ULPS)


def test_inplace_and_zview(rng):
    b, l, h, d, p = 2, 6, 3, 80, 3 * 80 + 40
    dout, z, o = (_t(a) for a in inputs(rng, (b, l, h, d)))
    proj = torch.randn(b, l, p)
    proj[:, :, 8:8 + h * d] = z.reshape(b, l, h * d)
    zv = proj[:, :, 8:8 + h * d].view(b, l, h, d)
    assert zv.stride() == (l * p, p, d, 1)
    host = (dout.numpy().copy(), z.numpy(), o.numpy())
    rdz, rdos = zgate.reference_bwd(*host)
    before = proj.clone()
    dz, dos = zt.bwd(dout, zv, o, inplace=True)
    assert dos is dout and torch.equal(proj, before)
    check("dz", dz.numpy(), rdz, *host, f32_ulps=cases.TRITON_F32_ULPS)
    check("dout_scaled", dout.numpy(), rdos, *host, f32_ulps=cases.TRITON_F32_ULPS)


def test_special_values():
    z = torch.tensor([0.0, -0.0, 1.0, -1.2785, 88.5, -88.5, 104.0, -104.0, 1e30, -1e30,
                      float("inf"), float("-inf"), float("nan"), 3.0, 3.0, 3.0])
    dout = torch.tensor([1.0] * 13 + [float("nan"), float("inf"), -float("inf")])
    o = torch.full_like(z, 2.0)
    z, dout, o = (t.view(1, 1, 1, 16) for t in (z, dout, o))
    dz, dos = zt.bwd(dout, z, o)
    host = (dout.numpy(), z.numpy(), o.numpy())
    rdz, rdos = zgate.reference_bwd(*host)
    check("dz", dz.numpy(), rdz, *host, f32_ulps=cases.TRITON_F32_ULPS)
    check("dout_scaled", dos.numpy(), rdos, *host, f32_ulps=cases.TRITON_F32_ULPS)
    assert torch.isfinite(dz[..., :10]).all() and torch.isfinite(dos[..., :10]).all()


def test_size_zero():
    e = torch.empty(2, 0, 3, 4)
    dz, dos = zt.bwd(e, e, e)
    assert dz.shape == e.shape and dos.shape == e.shape
    assert zt.fwd(e, e).shape == e.shape


def _err(fn, status):
    with pytest.raises(zgate.Error) as ei:
        fn()
    assert ei.value.status == status, ei.value
    return ei.value


def test_refusals_write_nothing():
    S = zgate.Status
    a = torch.randn(1, 2, 3, 4)
    b, c = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4)
    out = torch.full((1, 2, 3, 4), 7.0)
    _err(lambda: zt.bwd(a, b, torch.randn(1, 2, 3, 5), dz=out), S.ERR_SHAPE_MISMATCH)
    _err(lambda: zt.bwd(a, b, c[0], dz=out), S.ERR_SHAPE_MISMATCH)
    nine = torch.randn((1,) * 5 + (1, 2, 3, 4))
    _err(lambda: zt.bwd(nine, nine, nine), S.ERR_NDIM)
    _err(lambda: zt.fwd(nine, nine), S.ERR_NDIM)
    assert "z is a NoneType" in str(_err(lambda: zt.bwd(a, None, c, dz=out), None))
    e = _err(lambda: zt.bwd(a, b.to(torch.int32), c, dz=out), S.ERR_DTYPE)
    assert "int32" in str(e)
    _err(lambda: zt.bwd(a, b, c, dz=b), S.ERR_ALIAS)
    _err(lambda: zt.fwd(a, b, out=a), S.ERR_ALIAS)
    _err(lambda: zt.bwd(a, b, c, dz=out, dout_scaled=out), S.ERR_ALIAS)
    _err(lambda: zt.bwd(a, b, c, dz=out, dout_scaled=torch.zeros(1).expand(1, 2, 3, 4)),
         S.ERR_OUTPUT_SELF_OVERLAP)
    flat = torch.randn(24 + 1)
    shifted = flat[1:].view(1, 2, 3, 4)
    base = flat[:24].view(1, 2, 3, 4)
    # at another address inside dout: an alias (validate.c); at dout's with other strides: not
    # in place
    _err(lambda: zt.bwd(base, b, c, dz=out, dout_scaled=shifted), S.ERR_ALIAS)
    _err(lambda: zt.bwd(base, b, c, dz=out, dout_scaled=base.as_strided(base.shape,
                                                                        (24, 12, 1, 3))),
         S.ERR_INPLACE_MISMATCH)
    with pytest.raises(zgate.Error):
        zt.bwd(a, b, c, dout_scaled=out, inplace=True)
    assert (out == 7.0).all()


def test_backend_availability_messages():
    assert zt.available("cpu") is None
    why = zt.available("npu")
    assert why and ("triton-ascend" in why or "torch_npu" in why)
    assert "no backend" in zt.available("xpu")



def _view(t, inner_step):
    """t's values in a view of a larger buffer: every outer dim padded, the innermost one
    every inner_step-th element."""
    if t.dim() == 0:
        return t
    wide = torch.zeros(tuple(n + 1 for n in t.shape[:-1]) + (inner_step * t.shape[-1],))
    view = wide[tuple(slice(0, n) for n in t.shape[:-1]) + (slice(None, None, inner_step),)]
    return view.copy_(t)


@pytest.mark.parametrize("rank", [0, 1, 3, 5, 8])
@pytest.mark.parametrize("layout", ["dense", "padded", "strided"])
def test_ranks_equal_zgate_bwd(rng, rank, layout):
    """Ranks 0..8, dense, padded (up to rank 5 four dims after the C rule's collapse: in
    place; rank 8 six: through copies) and with every tensor's innermost dim strided (through
    copies): what the C library's zgate.bwd and zgate.fwd give, within the Triton kernel's
    float32 bound of the float64 reference."""
    shape = (3, 2, 1, 5, 2, 3, 1, 2)[:rank]
    dout, z, o = (torch.tensor(a.reshape(shape)) for a in inputs(rng, (int(np.prod(shape)),)))
    if layout != "dense":
        dout, z, o = (_view(t, 2 if layout == "strided" else 1) for t in (dout, z, o))
    got, want = zt.bwd(dout, z, o), zgate.bwd(dout, z, o)
    host = [from_torch(t) for t in (dout, z, o)]
    for name, g, w, ref in zip(("dz", "dout_scaled"), got, want, zgate.reference_bwd(*host)):
        assert g.shape == w.shape == shape
        check(name, g.numpy(), ref, *host, f32_ulps=cases.TRITON_F32_ULPS)
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)
    got, want = zt.fwd(o, z), zgate.fwd(o, z)
    check("out", got.numpy(), zgate.reference_fwd(host[2], host[1]), None, host[1], host[2],
          f32_ulps=cases.TRITON_F32_ULPS)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
