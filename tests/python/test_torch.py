"""PyTorch: zgate.bwd/fwd on tensors, the custom ops, silu_gate autograd, compute_dzdo,
torch.compile(fullgraph=True), and (where a GPU is present) CUDA and the current stream."""
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")
if not hasattr(torch.library, "custom_op"):
    pytest.skip("PyTorch %s predates torch.library.custom_op (2.4)" % torch.__version__,
                allow_module_level=True)

import zgate  # noqa: E402
import zgate.torch as zt  # noqa: E402
from tt_util import TORCH_DTYPES, cuda_ready, np_of, tinputs  # noqa: E402
import zg_oracle  # noqa: E402
from zg_oracle import check, check_fwd  # noqa: E402

CUDA_OK, CUDA_WHY = cuda_ready()
needs_cuda = pytest.mark.skipif(not CUDA_OK, reason=CUDA_WHY or "CUDA")
DEVICES = ["cpu", pytest.param("cuda", marks=needs_cuda)]
tid = lambda d: str(d).replace("torch.", "")  # noqa: E731


def check_bwd(dout, z, o, dz, dos):
    zg_oracle.check_bwd(*(np_of(t) for t in (dout, z, o, dz, dos)))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", TORCH_DTYPES, ids=tid)
def test_bwd_fwd_tensors(rng, device, dtype):
    shape = (2, 45, 3, 80)
    dout, z, o = tinputs(rng, shape, dtype, device)
    dz, dos = zgate.bwd(dout, z, o)
    assert isinstance(dz, torch.Tensor) and dz.dtype == dtype and dz.device == dout.device
    assert dz.is_contiguous() and dos.is_contiguous() and not dz.requires_grad
    check_bwd(dout, z, o, dz, dos)
    out = zgate.fwd(o, z)
    assert out.dtype == dtype and out.device == o.device
    check_fwd(np_of(o), np_of(z), np_of(out))


@pytest.mark.parametrize("device", DEVICES)
def test_projection_view_permuted_and_given_outputs(rng, device):
    b, l, h, d = 2, 50, 4, 64
    d_in_proj = 4 * h * d + 40
    proj = torch.randn(b, l, d_in_proj, device=device, dtype=torch.bfloat16) * 4
    z = proj[:, :, h * d:2 * h * d].view(b, l, h, d)           # a view, no copy
    assert z.data_ptr() == proj.data_ptr() + h * d * 2 and not z.is_contiguous()
    dout = torch.randn(b, h, l, d, device=device, dtype=torch.bfloat16).transpose(1, 2)
    o = torch.randn(b, l, h, d, device=device, dtype=torch.float16)
    dz = torch.full((b, l, h, d + 8), float("nan"), device=device)[..., :d]
    dos = torch.full((b, l, h, d), float("nan"), device=device, dtype=torch.float16)
    rz, rs = zgate.bwd(dout, z, o, dz=dz, dout_scaled=dos)
    assert rz is dz and rs is dos
    check_bwd(dout, z, o, dz, dos)
    assert torch.isnan(dz.as_strided((b, l, h, 8), dz.stride(), dz.storage_offset() + d)).all()


@pytest.mark.parametrize("device", DEVICES)
def test_in_place_and_errors(rng, device):
    shape = (1, 33, 2, 16)
    dout, z, o = tinputs(rng, shape, torch.float32, device)
    orig = dout.clone()
    v0 = dout._version
    dz, dos = zgate.bwd(dout, z, o, inplace=True)
    assert dos is dout and dout._version > v0       # autograd sees the write
    check_bwd(orig, z, o, dz, dout)
    with pytest.raises(zgate.Error) as ei:
        zgate.bwd(dout, z[:, :5], o)
    assert ei.value.status == zgate.Status.ERR_SHAPE_MISMATCH
    with pytest.raises(zgate.Error) as ei:
        zgate.bwd(dout, z.to(torch.float64), o)
    assert ei.value.status == zgate.Status.ERR_DTYPE
    with pytest.raises(zgate.Error) as ei:
        zgate.bwd(dout, z, o.to(torch.int32))
    assert ei.value.status == zgate.Status.ERR_DTYPE
    with pytest.raises(zgate.Error):
        zgate.bwd(dout.to("meta"), z, o)
    with pytest.raises(zgate.Error) as ei:
        zt.compute_dzdo(dout[0], z[0], o[0])
    assert ei.value.status == zgate.Status.ERR_NDIM
    sparse = dout.cpu().to_sparse()
    with pytest.raises(zgate.Error, match="could not read Tensor"):
        zgate.bwd(sparse, sparse, sparse)


def test_mixed_frameworks_on_cpu(rng):
    dout, z, o = tinputs(rng, (1, 8, 2, 8), torch.float32)
    dz, dos = zgate.bwd(dout, z.numpy(), o.numpy())      # output kind follows dout
    assert isinstance(dz, torch.Tensor)
    check_bwd(dout, z, o, dz, dos)
    dz2, dos2 = zgate.bwd(dout.numpy(), z, o)
    assert isinstance(dz2, np.ndarray)
    assert np.array_equal(dz2, dz.numpy())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", TORCH_DTYPES, ids=tid)
def test_compute_dzdo_drop_in(rng, device, dtype):
    b, l, h, d = 2, 70, 3, 96
    do = tinputs(rng, (b, l, h, d), dtype, device)[0]
    proj = torch.randn(b, l, 3 * h * d, device=device, dtype=dtype) * 3
    z = proj[:, :, 2 * h * d:].view(b, l, h, d)
    o = tinputs(rng, (b, l, h, d), dtype, device)[2]
    dz, do_scaled = zt.compute_dzdo(do, z, o, chunk_size=64)
    assert dz.dtype == dtype and do_scaled.dtype == dtype and dz.shape == do.shape
    assert dz.is_contiguous() and dz.device == do.device
    check_bwd(do, z, o, dz, do_scaled)
    # same positional signature as the original
    dz2, _ = zt.compute_dzdo(do, z, o)
    assert torch.equal(dz, dz2)


def _upstream_allocation(do, z):
    """(dz, do_scaled) as upstream's compute_dzdo allocates them (state-spaces/mamba,
    mamba3_siso_bwd.py): a tensor whose last stride is not 1 made contiguous, then
    torch.empty_like(z, dtype=do.dtype) and torch.empty_like(do, dtype=do.dtype)."""
    if do.stride(-1) != 1:
        do = do.contiguous()
    if z.stride(-1) != 1:
        z = z.contiguous()
    return torch.empty_like(z, dtype=do.dtype), torch.empty_like(do, dtype=do.dtype)


def _layout(t, how):
    """t (b, l, h, d) laid out as named: its values, another memory layout."""
    b, l, h, d = t.shape
    if how == "dense":
        return t.contiguous()
    if how == "permuted":          # dense, (b, h, l, d) in memory
        return t.transpose(1, 2).contiguous().transpose(1, 2)
    if how == "view":              # z's slice of the input projection: not dense
        proj = torch.zeros(b, l, 3 * h * d, dtype=t.dtype)
        proj[:, :, 2 * h * d:] = t.reshape(b, l, h * d)
        return proj[:, :, 2 * h * d:].view(b, l, h, d)
    if how == "last_strided":      # dense, headdim not unit-stride (upstream copies it)
        return t.permute(0, 1, 3, 2).contiguous().permute(0, 1, 3, 2)
    raise ValueError(how)


LAYOUTS = ["dense", "permuted", "view", "last_strided"]


@pytest.mark.parametrize("z_layout", LAYOUTS)
@pytest.mark.parametrize("z_dtype", TORCH_DTYPES, ids=tid)
@pytest.mark.parametrize("do_dtype", TORCH_DTYPES, ids=tid)
def test_compute_dzdo_allocates_as_upstream(rng, do_dtype, z_dtype, z_layout):
    """dz and do_scaled have the dtype (do's) and strides of upstream's allocation, for every
    dtype pair and z dense, permuted, a projection's view or with a strided last dim; do's
    layouts too. The values are the formula's."""
    b, l, h, d = 2, 9, 3, 16
    do, z, o = tinputs(rng, (b, l, h, d), torch.float32)
    z = _layout(z.to(z_dtype), z_layout)
    for do_layout in ("dense", "permuted", "last_strided"):
        g = _layout(do.to(do_dtype), do_layout)
        dz, ds = zt.compute_dzdo(g, z, o)
        want_dz, want_ds = _upstream_allocation(g, z)
        assert (dz.dtype, dz.stride()) == (want_dz.dtype, want_dz.stride()), do_layout
        assert (ds.dtype, ds.stride()) == (want_ds.dtype, want_ds.stride()), do_layout
        assert dz.dtype == do_dtype and ds.dtype == do_dtype
        check_bwd(g, z, o, dz, ds)


def test_compute_dzdo_refuses_fewer_dims(rng):
    """a z of fewer dimensions than do: refused, not packed as if it were 4-D"""
    do, z, o = tinputs(rng, (2, 9, 3, 16), torch.float32)
    with pytest.raises(zgate.Error):
        zt.compute_dzdo(do, z[0], o)
    with pytest.raises(zgate.Error):
        zt.compute_dzdo(do, z[0, 0, 0, 0], o)


def test_custom_ops_pass_opcheck(rng):
    args = tinputs(rng, (2, 5, 3, 8), torch.float32)
    torch.library.opcheck(torch.ops.zgate.bwd.default, args)
    o, z = (t.clone().requires_grad_() for t in args[1:])
    torch.library.opcheck(torch.ops.zgate.fwd.default, (o, z))
    torch.library.opcheck(torch.ops.zgate.silu_gate_backward.default,
                          (args[0], args[2], args[1].to(torch.bfloat16)))
    new = lambda dtype=torch.float32: torch.empty(args[0].shape, dtype=dtype)  # noqa: E731
    torch.library.opcheck(torch.ops.zgate.bwd_out.default,
                          (*args, new(), new(torch.bfloat16)))
    torch.library.opcheck(torch.ops.zgate.bwd_inplace.default, (args[0].clone(), *args[1:], new()))
    torch.library.opcheck(torch.ops.zgate.fwd_out.default, (args[2], args[1], new()))


def _given_both(g, z, o, dz, dos):
    return zgate.bwd(g, z, o, dz=dz, dout_scaled=dos)


def _in_place(g, z, o, dz):
    return zgate.bwd(g, z, o, dz=dz, inplace=True)


def _fwd_out(o, z, out):
    return zgate.fwd(o, z, out=out)


@pytest.mark.parametrize("fn,op,n", [(_given_both, "bwd_out", 2), (_in_place, "bwd_inplace", 1),
                                     (_fwd_out, "fwd_out", 1)], ids=["dz+dout_scaled",
                                                                     "inplace", "fwd out"])
def test_compiled_outputs_are_written_in_place(rng, fn, op, n):
    """Compiled, the given outputs are mutated by the out-variant op: the generated code calls
    it on the graph's own arguments and allocates and copies nothing."""
    from torch._inductor.utils import run_and_get_code
    torch._dynamo.reset()
    shape = (2, 9, 3, 16)
    args = [t for t in tinputs(rng, shape, torch.float32)]
    args += [torch.full(shape, float("nan")) for _ in range(n)]   # the outputs
    if fn is _fwd_out:
        args = [args[2], args[1], args[3]]
    want = [t.clone() for t in args]
    fn(*want)                                   # eager: raw-pointer writes
    ptrs = [t.data_ptr() for t in args]
    res, code = run_and_get_code(torch.compile(fn, fullgraph=True, backend="inductor"), *args)
    body = "\n".join(code).split("def call(")[1].split("def get_args")[0]   # the graph's run
    assert "torch.ops.zgate.%s.default(arg" % op in body
    assert "copy_(" not in body and "empty_strided" not in body, body
    assert [t.data_ptr() for t in args] == ptrs
    for got, exp in zip(args, want):
        assert torch.equal(got, exp)
    for r in (res if isinstance(res, tuple) else (res,)):
        assert any(r is a for a in args)        # the given tensors themselves come back


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(2, 17, 3, 24), (5, 7), (40,), (2, 3, 4, 5, 6)], ids=str)
def test_silu_gate_gradients_against_float64_autograd(rng, device, shape):
    o, z, g = (t.requires_grad_(i < 2) for i, t in
               enumerate(tinputs(rng, shape, torch.float32, device)))
    y = zt.silu_gate(o, z)
    y.backward(g)
    # PyTorch autograd of the plain formula in float64 on the same values
    o64, z64 = (t.detach().double().requires_grad_() for t in (o, z))
    y64 = o64 * z64 * torch.sigmoid(z64)
    y64.backward(g.double())
    gn, zn, on = np_of(g), np_of(z), np_of(o)
    check("out", np_of(y), y64.detach().cpu().numpy(), None, zn, on)
    check("dz", np_of(z.grad), z64.grad.cpu().numpy(), gn, zn, on)             # grad z
    check("dout_scaled", np_of(o.grad), o64.grad.cpu().numpy(), gn, zn, on)    # grad o


@pytest.mark.parametrize("device", DEVICES)
def test_silu_gate_bf16_grads_keep_input_dtypes(rng, device):
    o = tinputs(rng, (1, 9, 2, 16), torch.bfloat16, device)[0].requires_grad_()
    z = tinputs(rng, (1, 9, 2, 16), torch.float32, device)[1].requires_grad_()
    g = tinputs(rng, (1, 9, 2, 16), torch.bfloat16, device)[0]
    zt.silu_gate(o, z).backward(g)
    assert o.grad.dtype == torch.bfloat16 and z.grad.dtype == torch.float32
    # each gradient rounded once, straight into its own dtype
    check_bwd(g, z, o, z.grad, o.grad)       # grad z float32, grad o bfloat16


def _model(o, z, g):
    y = zt.silu_gate(o * 2.0, z)
    dz, ds = zt.compute_dzdo(g, z, o)
    dz2, ds2 = zgate.bwd(g, z, o)
    buf = torch.empty_like(g)
    zgate.bwd(g, z, o, dz=buf)
    return (y * 3).sum() + dz.sum() + ds.sum() + dz2.sum() + buf.sum(), y


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph(rng, device, backend):
    torch._dynamo.reset()
    o, z, g = tinputs(rng, (2, 16, 2, 32), torch.float32, device)
    o1, z1 = o.clone().requires_grad_(), z.clone().requires_grad_()
    o2, z2 = o.clone().requires_grad_(), z.clone().requires_grad_()
    compiled = torch.compile(_model, fullgraph=True, backend=backend)   # graph break = error
    loss_c, y_c = compiled(o1, z1, g)
    loss_e, y_e = _model(o2, z2, g)
    loss_c.backward()
    loss_e.backward()
    torch.testing.assert_close(y_c, y_e, rtol=0, atol=0)
    torch.testing.assert_close(loss_c, loss_e, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(o1.grad, o2.grad, rtol=0, atol=0)
    torch.testing.assert_close(z1.grad, z2.grad, rtol=0, atol=0)


# ---- CUDA only --------------------------------------------------------------------------

@needs_cuda
@pytest.mark.parametrize("given_outputs", [False, True])
def test_runs_on_the_current_stream(rng, given_outputs):
    shape = (4, 1024, 16, 64)
    src, z, o = tinputs(rng, shape, torch.float32, "cuda")
    dout = torch.zeros_like(src)
    torch.cuda.synchronize()
    side = torch.cuda.Stream()      # PyTorch's pool streams do not sync with the legacy stream
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)          # ~0.1 s of GPU time on `side`
        dout.copy_(src)                         # lands after the sleep, on `side`
        if given_outputs:
            dz, dos = torch.empty_like(src), torch.empty_like(src)
            zgate.bwd(dout, z, o, dz=dz, dout_scaled=dos)
        else:
            dz, dos = zgate.bwd(dout, z, o)     # must be queued behind the copy
        assert not side.query(), "zgate.bwd waited for the GPU (it must only enqueue)"
    side.synchronize()
    check_bwd(src, z, o, dz, dos)


@needs_cuda
def test_cuda_big_realistic_shape_bf16(rng):
    # headdim 80, the shape where the original Triton kernel wrote past its rows
    shape = (2, 2048, 40, 80)
    do, z, o = tinputs(rng, shape, torch.bfloat16, "cuda")
    dz, ds = zt.compute_dzdo(do, z, o)
    check_bwd(do, z, o, dz, ds)


@needs_cuda
def test_cuda_second_device_is_taken_from_the_tensors(rng):
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    dout, z, o = tinputs(rng, (1, 64, 4, 64), torch.float32, "cuda:1")
    with torch.cuda.device(0):
        dz, dos = zgate.bwd(dout, z, o)
    assert dz.device.index == 1
    torch.cuda.synchronize(1)
    check_bwd(dout, z, o, dz, dos)
