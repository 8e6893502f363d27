"""PyTorch integration: the custom ops torch.ops.zgate.{fwd, bwd, silu_gate_backward, fwd_out,
bwd_out, bwd_inplace} (docs/api.md), a differentiable silu_gate, a drop-in compute_dzdo and
use_in_mamba_ssm(), which puts it into an installed mamba_ssm's Mamba-3 backward.

Every op has a fake (meta) implementation, so torch.compile(fullgraph=True) traces it as one
opaque node without graph breaks; the out-variants declare what they mutate, so that compiled
zgate.bwd(..., dz=, dout_scaled=), inplace=True and zgate.fwd(..., out=) write straight into
the given tensors. New outputs are compact tensors on the inputs' device; CUDA work runs on
the current stream.
"""
# The eager kernels call zgate._binding directly: given outputs there get their version
# counters bumped (a raw-pointer write that autograd must see).
from typing import Tuple

import torch

import zgate as _zgate
from . import _binding
from ._errors import Error, Status
from . import _mamba
from ._mamba import MambaPatch

__all__ = ["silu_gate", "compute_dzdo", "fwd", "bwd", "fwd_out", "bwd_out", "bwd_inplace",
           "use_in_mamba_ssm", "MambaPatch"]
Tensor = torch.Tensor


def _new_like(t):
    return torch.empty_like(t, memory_format=torch.contiguous_format)


def _bwd(dout: Tensor, z: Tensor, o: Tensor) -> Tuple[Tensor, Tensor]:
    """(dz, dout_scaled) of the gate, as new tensors with dout's dtype."""
    return _binding.bwd(dout, z, o, None, None, False, 0)


def _fwd(o: Tensor, z: Tensor) -> Tensor:
    """out = o * z * sigmoid(z), a new tensor with o's dtype."""
    return _binding.fwd(o, z, None, 0)


bwd = torch.library.custom_op("zgate::bwd", _bwd, mutates_args=())
fwd = torch.library.custom_op("zgate::fwd", _fwd, mutates_args=())


@torch.library.custom_op("zgate::silu_gate_backward", mutates_args=())
def _silu_gate_backward(grad_out: Tensor, o: Tensor, z: Tensor) -> Tuple[Tensor, Tensor]:
    """(grad_o, grad_z) of out = o * silu(z): zgate_bwd writing dout_scaled (= grad_o) in o's
    dtype and dz (= grad_z) in z's dtype directly, each rounded once."""
    grad_o, grad_z = _new_like(o), _new_like(z)
    _binding.bwd(grad_out, z, o, grad_z, grad_o, False, 0)
    return grad_o, grad_z


def _fwd_backward(ctx, grad_out):
    # d out / d o = silu(z): dL/do is dout_scaled; dL/dz is dz.
    return torch.ops.zgate.silu_gate_backward(grad_out, *ctx.saved_tensors)


fwd.register_autograd(_fwd_backward,
                      setup_context=lambda ctx, inputs, output: ctx.save_for_backward(*inputs))


def silu_gate(o, z):
    """out = o * silu(z) = o * z * sigmoid(z), differentiable in o and z.

    o and z have one shape of rank 0..8 (zgate.Error beyond, as zgate.fwd); the result has
    o's dtype. Its backward is zgate_bwd."""
    return torch.ops.zgate.fwd(o, z)


def compute_dzdo(do, z, o, chunk_size=64):
    """Drop-in for Mamba-3's compute_dzdo (mamba3_siso_bwd): returns (dz, do_scaled).

    dz = do * o * s * (1 + z * (1 - s)), do_scaled = do * s * z with s = sigmoid(z), tensors
    of shape (batch, seqlen, nheads, headdim). Both are allocated as upstream allocates them:
    dz = torch.empty_like(z, dtype=do.dtype), do_scaled = torch.empty_like(do), each of do's
    dtype, and of its source's strides where that tensor is dense (a permuted z gives a
    permuted dz), compact otherwise (a view of a projection) or where its last stride is not
    1 (upstream makes such a tensor contiguous first). z (and do, o) may be strided views: no
    copy is made. CPU and CUDA tensors, and DTensors (run on their shards). chunk_size is
    accepted for signature compatibility and ignored (no tiling to tune)."""
    if do.dim() != 4:
        raise Error(Status.ERR_NDIM, "compute_dzdo takes (batch, seqlen, nheads, headdim) "
                    "tensors; do has shape %s" % (tuple(do.shape),))
    # zgate.bwd: traced or on a DTensor, through bwd_out on detached tensors, as in eager
    # mode (these results carry no autograd history)
    return _zgate.bwd(do, z, o, dz=_upstream_like(z, do.dtype),
                      dout_scaled=_upstream_like(do, do.dtype))


def _upstream_like(t, dtype):
    """torch.empty_like(t, dtype=dtype) of t as upstream's compute_dzdo holds it: t made
    contiguous first where its last stride is not 1 (here without copying t)."""
    if t.dim() and t.stride(-1) != 1 and not t.is_contiguous():
        return torch.empty_like(t, dtype=dtype, memory_format=torch.contiguous_format)
    return torch.empty_like(t, dtype=dtype)


def use_in_mamba_ssm(module=_mamba.DEFINING_MODULE, *, skip_package_init=False, replacement=None):
    """Put `replacement` (compute_dzdo above by default) wherever an installed mamba_ssm looks
    compute_dzdo up: its definition and every module that imported it by name.

    module: the defining module, imported (a module object) or by name; skip_package_init:
    import it without running mamba_ssm/__init__.py. Returns a MambaPatch (a context manager
    too; undo() restores upstream's). Raises ImportError, naming what to install, when
    mamba_ssm or the function is missing."""
    return _mamba.install(compute_dzdo if replacement is None else replacement, module,
                          skip_package_init)


# --- out-variants: the given tensors written in place ------------------------------------

@torch.library.custom_op("zgate::bwd_out", mutates_args=("dz", "dout_scaled"))
def bwd_out(dout: Tensor, z: Tensor, o: Tensor, dz: Tensor, dout_scaled: Tensor) -> None:
    """bwd writing into dz and dout_scaled (each in its own dtype)."""
    _binding.bwd(dout, z, o, dz, dout_scaled, False, 0)


@torch.library.custom_op("zgate::bwd_inplace", mutates_args=("dout", "dz"))
def bwd_inplace(dout: Tensor, z: Tensor, o: Tensor, dz: Tensor) -> None:
    """bwd writing dz into dz and dout_scaled into dout."""
    _binding.bwd(dout, z, o, dz, None, True, 0)


@torch.library.custom_op("zgate::fwd_out", mutates_args=("out",))
def fwd_out(o: Tensor, z: Tensor, out: Tensor) -> None:
    """fwd writing into out (in its own dtype)."""
    _binding.fwd(o, z, out, 0)


# --- fakes and DTensor ------------------------------------------------------------------------
# Each op's fake checks that its tensors (named in order) share one shape and makes its new
# outputs. On DTensors every op runs on the local shards: the gate is elementwise, so any
# placement shared by all tensors of a call (Shard on any dim, Replicate) is kept by the
# outputs and no data moves; DTensor redistributes other placements to one of these first
# (Partial, for one, to Replicate).

def _fake(names, new):
    names = names.split()

    def fake(*tensors):
        for n, t in zip(names[1:], tensors[1:]):
            torch._check(t.shape == tensors[0].shape,
                         lambda: "zgate: %s has shape %s but %s has %s"
                         % (n, tuple(t.shape), names[0], tuple(tensors[0].shape)))
        return new(*tensors) if new else None
    return fake


def _same_everywhere(n_in, n_out):
    def strategies(*args):
        return [([p] * n_out or [None], [p] * n_in)
                for p in [Replicate()] + [Shard(d) for d in range(args[0].ndim)]]
    return strategies


try:
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.experimental import register_sharding
except ImportError:   # a PyTorch without torch.distributed
    register_sharding = None
for _name, _names, _n_out, _new in (
        ("bwd", "dout z o", 2, lambda dout, z, o: (_new_like(dout), _new_like(dout))),
        ("fwd", "o z", 1, lambda o, z: _new_like(o)),
        ("silu_gate_backward", "grad_out o z", 2, lambda g, o, z: (_new_like(o), _new_like(z))),
        ("bwd_out", "dout z o dz dout_scaled", 0, None),
        ("bwd_inplace", "dout z o dz", 0, None),
        ("fwd_out", "o z out", 0, None)):
    torch.library.register_fake("zgate::" + _name, _fake(_names, _new))
    if register_sharding:
        register_sharding(getattr(torch.ops.zgate, _name).default)(
            _same_everywhere(len(_names.split()), _n_out))

# torch.ops.zgate.bwd / fwd on CPU and CUDA tensors: the same functions registered for those
# dispatch keys, which are chosen before custom_op's CompositeExplicitAutograd kernel and skip
# its Python wrappers (their cost per call: docs/performance.md). Other devices, autograd and the
# fake keep custom_op's. The registrations last as long as the Library object.
_device_kernels = torch.library.Library("zgate", "IMPL")
for _key in ("CPU", "CUDA"):
    _device_kernels.impl("bwd", _bwd, _key)
    _device_kernels.impl("fwd", _fwd, _key)


# --- torch.compile paths of zgate.bwd / zgate.fwd, and tensors the binding passes on ---------
# In eager mode zgate.bwd / zgate.fwd write through raw pointers and record no autograd
# history; traced, they do the same (detached inputs) through the ops above, the given
# outputs mutated in place (no temporary, no copy). Use silu_gate for gradients.

def traced_bwd(dout, z, o, dz, dout_scaled, inplace):
    z, o = z.detach(), o.detach()
    if not inplace and dz is None and dout_scaled is None:
        return torch.ops.zgate.bwd(dout.detach(), z, o)
    dz = _new_like(dout) if dz is None else dz
    if inplace:
        if dout_scaled is not None and dout_scaled is not dout:
            raise Error(None, "inplace=True writes dout_scaled into dout; do not pass "
                        "dout_scaled as well")
        torch.ops.zgate.bwd_inplace(dout, z, o, dz)
        return dz, dout
    dout_scaled = _new_like(dout) if dout_scaled is None else dout_scaled
    torch.ops.zgate.bwd_out(dout.detach(), z, o, dz, dout_scaled)
    return dz, dout_scaled


def traced_fwd(o, z, out):
    if out is None:
        return torch.ops.zgate.fwd(o.detach(), z.detach())
    torch.ops.zgate.fwd_out(o.detach(), z.detach(), out)
    return out


def fallback(op, *args):
    """zgate.bwd / zgate.fwd (op) on tensors the binding does not read: a tensor on an NPU
    (zgate.triton), a subclass with its own dispatch or device (DTensor: through the custom
    ops); NotImplemented for a plain tensor on another device (the binding's error stands)."""
    x = args[0]
    if x.device.type == "npu":
        from . import triton as _tr
        if op == "bwd":
            return _tr.bwd(*args[:3], dz=args[3], dout_scaled=args[4], inplace=args[5])
        return _tr.fwd(*args[:2], out=args[2])
    if type(x) is not torch.Tensor and x.device.type in ("cpu", "cuda"):
        return traced_bwd(*args[:6]) if op == "bwd" else traced_fwd(*args[:3])
    if type(x) is torch.Tensor:
        return NotImplemented
    raise Error(Status.ERR_DEVICE_UNSUPPORTED, "%s is on device '%s'"
                % ("dout" if op == "bwd" else "o", x.device))
