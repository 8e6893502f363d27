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
from ._mamba import MambaPatch, use_in_mamba_ssm

__all__ = ["silu_gate", "compute_dzdo", "fwd", "bwd", "fwd_out", "bwd_out", "bwd_inplace",
           "use_in_mamba_ssm", "MambaPatch"]
Tensor = torch.Tensor


def _new_like(t):
    return torch.empty_like(t, memory_format=torch.contiguous_format)


def _check_same_shape(names, *tensors):
    names, first = names.split(), tensors[0]
    for n, t in zip(names[1:], tensors[1:]):
        torch._check(t.shape == first.shape,
                     lambda: "zgate: %s has shape %s but %s has %s"
                     % (n, tuple(t.shape), names[0], tuple(first.shape)))


def _bwd(dout: Tensor, z: Tensor, o: Tensor) -> Tuple[Tensor, Tensor]:
    """(dz, dout_scaled) of the gate, as new tensors with dout's dtype."""
    return _binding.bwd(dout, z, o, None, None, False, 0)


def _fwd(o: Tensor, z: Tensor) -> Tensor:
    """out = o * z * sigmoid(z), a new tensor with o's dtype."""
    return _binding.fwd(o, z, None, 0)


bwd = torch.library.custom_op("zgate::bwd", _bwd, mutates_args=())
fwd = torch.library.custom_op("zgate::fwd", _fwd, mutates_args=())


@bwd.register_fake
def _bwd_fake(dout, z, o):
    _check_same_shape("dout z o", dout, z, o)
    return _new_like(dout), _new_like(dout)


@fwd.register_fake
def _fwd_fake(o, z):
    _check_same_shape("o z", o, z)
    return _new_like(o)


@torch.library.custom_op("zgate::silu_gate_backward", mutates_args=())
def _silu_gate_backward(grad_out: Tensor, o: Tensor, z: Tensor) -> Tuple[Tensor, Tensor]:
    """(grad_o, grad_z) of out = o * silu(z): zgate_bwd writing dout_scaled (= grad_o) in o's
    dtype and dz (= grad_z) in z's dtype directly, each rounded once."""
    grad_o, grad_z = _new_like(o), _new_like(z)
    _binding.bwd(grad_out, z, o, grad_z, grad_o, False, 0)
    return grad_o, grad_z


@_silu_gate_backward.register_fake
def _silu_gate_backward_fake(grad_out, o, z):
    _check_same_shape("grad_out o z", grad_out, o, z)
    return _new_like(o), _new_like(z)


def _fwd_setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _fwd_backward(ctx, grad_out):
    # d out / d o = silu(z): dL/do is dout_scaled; dL/dz is dz.
    o, z = ctx.saved_tensors
    return torch.ops.zgate.silu_gate_backward(grad_out, o, z)


fwd.register_autograd(_fwd_backward, setup_context=_fwd_setup)


def silu_gate(o, z):
    """out = o * silu(z) = o * z * sigmoid(z), differentiable in o and z.

    Any shape with up to 4 dimensions (more are flattened into the first); o and z have the
    same shape; the result has o's dtype. Its backward is zgate_bwd."""
    if o.dim() <= 4:
        return torch.ops.zgate.fwd(o, z)
    o4, z4 = (t.reshape((-1,) + tuple(t.shape[-3:])) for t in (o, z))
    return torch.ops.zgate.fwd(o4, z4).reshape(o.shape)


def compute_dzdo(do, z, o, chunk_size=64):
    """Drop-in for Mamba-3's compute_dzdo (mamba3_siso_bwd): returns (dz, do_scaled).

    dz = do * o * s * (1 + z * (1 - s)), do_scaled = do * s * z with s = sigmoid(z), tensors
    of shape (batch, seqlen, nheads, headdim). As upstream allocates it, dz is
    torch.empty_like(z): z's dtype, and z's strides when z is dense (a permuted z gives a
    permuted dz), compact otherwise (a view of a projection); do_scaled is a new compact
    tensor of do's dtype. z (and do, o) may be strided views: no copy is made. CPU and CUDA
    tensors, and DTensors (run on their shards). chunk_size is accepted for signature
    compatibility and ignored (no tiling to tune)."""
    if do.dim() != 4:
        raise Error(Status.ERR_NDIM, "compute_dzdo takes (batch, seqlen, nheads, headdim) "
                    "tensors; do has shape %s" % (tuple(do.shape),))
    # zgate.bwd: traced or on a DTensor, through bwd_out on detached tensors, as in eager
    # mode (these results carry no autograd history)
    return _zgate.bwd(do, z, o, dz=torch.empty_like(z), dout_scaled=_new_like(do))


# --- out-variants: the given tensors written in place ------------------------------------

@torch.library.custom_op("zgate::bwd_out", mutates_args=("dz", "dout_scaled"))
def bwd_out(dout: Tensor, z: Tensor, o: Tensor, dz: Tensor, dout_scaled: Tensor) -> None:
    """bwd writing into dz and dout_scaled (each in its own dtype)."""
    _binding.bwd(dout, z, o, dz, dout_scaled, False, 0)


@bwd_out.register_fake
def _bwd_out_fake(dout, z, o, dz, dout_scaled):
    _check_same_shape("dout z o dz dout_scaled", dout, z, o, dz, dout_scaled)


@torch.library.custom_op("zgate::bwd_inplace", mutates_args=("dout", "dz"))
def bwd_inplace(dout: Tensor, z: Tensor, o: Tensor, dz: Tensor) -> None:
    """bwd writing dz into dz and dout_scaled into dout."""
    _binding.bwd(dout, z, o, dz, None, True, 0)


@bwd_inplace.register_fake
def _bwd_inplace_fake(dout, z, o, dz):
    _check_same_shape("dout z o dz", dout, z, o, dz)


@torch.library.custom_op("zgate::fwd_out", mutates_args=("out",))
def fwd_out(o: Tensor, z: Tensor, out: Tensor) -> None:
    """fwd writing into out (in its own dtype)."""
    _binding.fwd(o, z, out, 0)


@fwd_out.register_fake
def _fwd_out_fake(o, z, out):
    _check_same_shape("o z out", o, z, out)


# --- DTensor: every op runs on the local shards ----------------------------------------------
# The gate is elementwise: any placement shared by all tensors of a call (Shard on any dim,
# Replicate) is kept by the outputs, and no data moves. Inputs of other placements are
# redistributed by DTensor to one of these first (Partial, for one, to Replicate).

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
for _name, _n_in, _n_out in (("bwd", 3, 2), ("fwd", 2, 1), ("silu_gate_backward", 3, 2),
                             ("bwd_out", 5, 0), ("bwd_inplace", 4, 0), ("fwd_out", 3, 0)):
    if register_sharding:
        register_sharding(getattr(torch.ops.zgate, _name).default)(_same_everywhere(_n_in, _n_out))

# torch.ops.zgate.bwd / fwd on CPU and CUDA tensors: the hot path registered for those dispatch
# keys directly. custom_op registers its kernel for CompositeExplicitAutograd behind Python
# wrappers of its own (a per-device table, dynamo's disable wrapper, an aliasing check: about
# 1.4 us a call on a 2-core CPU machine); a kernel for the device's own key is chosen before
# it, and calls the same function. Other devices (an NPU, Meta through the fake) keep
# custom_op's kernels; autograd and the fake are unchanged. The Library object is kept: the
# registrations last as long as it does.
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
