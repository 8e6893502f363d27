"""zgate's gate as a Triton kernel: Ascend NPUs through triton-ascend, NVIDIA GPUs through
Triton, CPU tensors under TRITON_INTERPRET=1. bwd and fwd take the arguments of zgate.bwd /
zgate.fwd and give their results and errors (zgate.Error), on PyTorch tensors of one device
(docs/api.md): ranks 0..8, any non-negative strides. The call's dims are collapsed by the C
library's rule (plan.py); the kernel takes in place every call that collapses to at most four
dims with a contiguous innermost one (Z as a view into the input projection included);
otherwise each tensor that is not compact goes through a compact copy.
Nothing is tuned (plan.py), so the first call costs one compile per dtypes and tile shape.
zgate.triton.ascend compiles the kernel for an Ascend 910B target without an NPU.
"""
import contextlib
import functools
import os

from .._errors import Error, Status
from . import plan as _plan

__all__ = ["bwd", "fwd", "available"]


def _dtype(t):
    return str(t.dtype).replace("torch.", "")


def available(device_type):
    """None when the kernel can run on tensors of `device_type`, else the reason."""
    try:
        import triton
        from triton.backends import backends
    except ImportError:
        return ("Triton is not installed: pip install triton (NVIDIA GPUs) or "
                "triton-ascend (Ascend NPUs), not both in one environment")
    interp = os.environ.get("TRITON_INTERPRET") == "1"
    if device_type == "cpu":
        return None if interp else "CPU tensors run the Triton kernel only under TRITON_INTERPRET=1"
    if device_type == "npu":
        if "ascend" not in backends:
            return ("NPU tensors need triton-ascend (pip install triton-ascend), but the "
                    "installed triton %s has no ascend backend" % triton.__version__)
        try:
            import torch_npu  # noqa: F401  (registers the npu device with torch)
        except ImportError:
            return "NPU tensors need torch_npu (pip install torch-npu) and CANN"
        return None
    if device_type == "cuda":
        return None if ("nvidia" in backends or interp) else (
            "the installed triton %s has no NVIDIA backend" % triton.__version__)
    return "zgate.triton has no backend for %s tensors" % device_type


def _check(named, n_in):
    """zgate's contract on torch tensors, checked in validate.c's order: `named` is
    [(name, tensor)], the `n_in` inputs first, then the outputs (None where not given).
    Raises zgate.Error naming the tensor and the caller's dim that validate.c names; writes
    nothing. Outputs may not overlap another tensor, except dout_scaled given as dout (in
    place: its address, dtype and strides on dims of size > 1)."""
    import torch
    named = named[:n_in] + [(n, t) for n, t in named[n_in:] if t is not None]
    for n, t in named:   # what the binding refuses before the library sees the call
        if not isinstance(t, torch.Tensor):
            raise Error(None, "zgate.triton: %s is a %s, not a torch.Tensor" % (
                n, type(t).__name__))
        if t.layout != torch.strided:
            raise Error(Status.ERR_DEVICE_UNSUPPORTED, "%s is a %s tensor; zgate takes "
                        "strided tensors" % (n, t.layout), n)
    for n, t in named:
        if t.dim() > _plan.MAX_NDIM:
            raise Error(Status.ERR_NDIM, "%s: ndim is %d, outside 0..%d" % (
                n, t.dim(), _plan.MAX_NDIM), n)
        if _dtype(t) not in _plan.DTYPE_BYTES:
            raise Error(Status.ERR_DTYPE, "%s is %s, not float32, float16 or bfloat16" % (
                n, _dtype(t)), n)
    first_name, first = named[0]
    for n, t in named[1:]:
        if t.shape != first.shape:
            dim = None if t.dim() != first.dim() else next(
                d for d, (a, b) in enumerate(zip(t.shape, first.shape)) if a != b)
            raise Error(Status.ERR_SHAPE_MISMATCH, "%s has shape %s but %s has %s" % (
                n, tuple(t.shape), first_name, tuple(first.shape)), n, dim)
    for n, t in named[1:]:
        if t.device != first.device:
            raise Error(Status.ERR_DEVICE_MISMATCH, "%s is on %s but %s is on %s" % (
                n, t.device, first_name, first.device), n)
    why = available(first.device.type)
    if why:
        raise Error(Status.ERR_DEVICE_UNSUPPORTED, why, first_name)
    if first.numel() == 0:
        return
    for n, t in named:
        if t.data_ptr() % t.element_size():
            raise Error(Status.ERR_MISALIGNED, "%s: data is not aligned to its %d-byte "
                        "element" % (n, t.element_size()), n)
    for name, t in named[n_in:]:
        dim = _overlapping_dim(t)
        if dim is not None:
            raise Error(Status.ERR_OUTPUT_SELF_OVERLAP, "two elements of %s share memory "
                        "(a zero or overlapping stride on dim %d)" % (name, dim), name, dim)
    for name, t in named[n_in:]:
        for other, u in named:
            (a, b), (c, d) = _span(t), _span(u)
            if other == name or b <= c or d <= a:
                continue
            if (name, other) == ("dout_scaled", "dout") and a == c:
                if t.dtype == u.dtype and _moving_strides(t) == _moving_strides(u):
                    continue
                raise Error(Status.ERR_INPLACE_MISMATCH, "dout_scaled shares dout's memory "
                            "but not its dtype and strides", name)
            raise Error(Status.ERR_ALIAS, "%s overlaps %s" % (name, other), name)


def _span(t):
    """[first byte, one past the last byte) of a non-empty tensor."""
    last = sum((n - 1) * s for n, s in zip(t.shape, t.stride()))
    return t.data_ptr(), t.data_ptr() + (last + 1) * t.element_size()


def _moving_strides(t):
    """t's strides on dims of size > 1 (those of size-1 dims never move)."""
    return [s for n, s in zip(t.shape, t.stride()) if n > 1]


def _overlapping_dim(t):
    """The caller's dim at which two indices of t share an element, or None: with the dims of
    size > 1 by stride (stable), each stride must clear the extent of the dims inside it.
    Conservative: a layout this does not prove injective is refused."""
    extent = 0
    for s, d in sorted((s, d) for d, (n, s) in enumerate(zip(t.shape, t.stride())) if n > 1):
        if s <= extent:
            return d
        extent += (t.shape[d] - 1) * s
    return None


def _launch(op, tensors, outputs):
    """Run `op` on torch tensors in the op's order; `outputs` are their indices. A tensor
    whose headdim is not contiguous goes through one compact copy."""
    import torch
    if tensors[0].numel() == 0:
        return
    dev = tensors[0].device
    tile = _plan.npu_tile(op, [_dtype(t) for t in tensors]) if dev.type == "npu" else (
        _plan.GPU_TILE)
    copied, layout, tiles = _plan.plan_call(tuple(tensors[0].shape),
                                            tuple(t.stride() for t in tensors), tile,
                                            _plan.N_INPUTS[op])
    work = [t.contiguous() if c and i not in outputs else t
            for i, (t, c) in enumerate(zip(tensors, copied))]
    copy_back = [i for i in outputs if copied[i]]
    for i in copy_back:   # in place (dos is dout): dout's compact copy takes dos
        work[i] = work[0] if tensors[i] is tensors[0] else torch.empty_like(
            tensors[i], memory_format=torch.contiguous_format)
    from .kernel import gate_kernel
    args, consts = _plan.kernel_arguments(op, work, layout, tiles)
    # NPU: one program per vector core, each looping over tiles; GPU: one program per tile;
    # interpreter: a few programs, so the tile loop runs.
    programs = (3 if os.environ.get("TRITON_INTERPRET") == "1" else
                _npu_cores(dev.index or 0) if dev.type == "npu" else _plan.INT32_MAX)
    device = getattr(torch, dev.type).device(dev) if dev.type in ("cuda", "npu") else (
        contextlib.nullcontext())
    with device:
        gate_kernel[(max(1, min(tiles.n_tiles, programs)),)](**args, **consts)
    for i in copy_back:
        tensors[i].copy_(work[i])


@functools.lru_cache(maxsize=None)
def _npu_cores(index):
    import triton
    return int(triton.runtime.driver.active.utils.get_device_properties(index)["num_vectorcore"])


def bwd(dout, z, o, *, dz=None, dout_scaled=None, inplace=False):
    """(dz, dout_scaled); see zgate.bwd. New outputs are compact, of dout's dtype."""
    import torch
    if inplace:
        if dout_scaled is not None and dout_scaled is not dout:
            raise Error(None, "inplace=True writes dout_scaled into dout; do not pass "
                        "dout_scaled as well")
        dout_scaled = dout
    _check([("dout", dout), ("z", z), ("o", o), ("dz", dz), ("dout_scaled", dout_scaled)], 3)
    dz, dout_scaled = (torch.empty_like(dout, memory_format=torch.contiguous_format)
                       if t is None else t for t in (dz, dout_scaled))
    _launch("bwd", [dout, z, o, dz, dout_scaled], outputs=(3, 4))
    return dz, dout_scaled


def fwd(o, z, *, out=None):
    """out = o * z * sigmoid(z); see zgate.fwd. A new out is compact, of o's dtype."""
    import torch
    _check([("o", o), ("z", z), ("out", out)], 2)
    if out is None:
        out = torch.empty_like(o, memory_format=torch.contiguous_format)
    _launch("fwd", [o, z, out], outputs=(2,))
    return out
