"""zgate.bwd / zgate.fwd: DLPack-speaking arrays in, same-kind arrays out, one C call.

The keywords are checked here, then the call is routed: PyTorch tensors on an NPU to
zgate.triton; under torch.compile, and tensor subclasses such as DTensor, to zgate.torch's
custom ops (which take no num_threads: 0, the OpenMP default); plain PyTorch tensors to the
hot path (zgate._hot, through zgate._adapters.torch); everything else to zgate._call.

A call on a type that has a hot path (_adapters._fast_bwd / _fast_fwd: zgate._hot for
torch.Tensor, once the library is loaded) tries it before anything else, unless it is being
traced (_adapters.tracing(): torch.compile cannot trace a compiled function, and a traced
call goes through the custom ops); it answers None for a call it does not take (in place,
an NPU tensor, another dtype...), which then goes the general route, where any problem is
named.
"""
from . import _adapters, _call
from ._adapters import _fast_bwd, _fast_fwd, _kinds, classify
from ._args import flag_arg, threads_arg


def bwd(dout, z, o, *, dz=None, dout_scaled=None, inplace=False, num_threads=0):
    """Backward of the gate: returns (dz, dout_scaled).

    dz = dout * o * s * (1 + z * (1 - s)), dout_scaled = dout * s * z, s = sigmoid(z), in
    float32 math. Inputs are any arrays that speak DLPack; new outputs are of dout's kind,
    device and dtype, compact. Given outputs (dz=, dout_scaled=) are written in their own
    dtype (float32, float16 or bfloat16). inplace=True writes dout_scaled into dout.
    num_threads: CPU threads (0 = the OpenMP default). CUDA work is queued on the caller's
    current stream (PyTorch's or CuPy's; the legacy default stream otherwise).
    """
    fast = _fast_bwd.get(type(dout))
    if fast is not None and not _adapters.tracing():
        r = fast(dout, z, o, dz, dout_scaled, inplace, num_threads)
        if r is not None:
            return r
    if type(num_threads) is not int or not -0x80000000 <= num_threads <= 0x7FFFFFFF:
        num_threads = threads_arg(num_threads)
    if inplace is not False and inplace is not True:
        inplace = flag_arg("inplace", inplace)
    kind = _kinds.get(type(dout)) or classify(dout)
    if kind.TORCH:
        if dout.device.type == "npu":
            from . import triton as _tr
            return _tr.bwd(dout, z, o, dz=dz, dout_scaled=dout_scaled, inplace=inplace)
        if kind.via_ops():
            from . import torch as _zt
            return _zt.bwd_via_ops(dout, z, o, dz, dout_scaled, inplace)
    return _call.bwd(kind, dout, z, o, dz, dout_scaled, inplace, num_threads)


def fwd(o, z, *, out=None, num_threads=0):
    """Forward of the gate: out = o * z * sigmoid(z) (float32 math), returned.

    A new `out` is of o's kind, device and dtype, compact; a given one is written in its own
    dtype. Streams as for bwd."""
    fast = _fast_fwd.get(type(o))
    if fast is not None and not _adapters.tracing():
        r = fast(o, z, out, num_threads)
        if r is not None:
            return r
    if type(num_threads) is not int or not -0x80000000 <= num_threads <= 0x7FFFFFFF:
        num_threads = threads_arg(num_threads)
    kind = _kinds.get(type(o)) or classify(o)
    if kind.TORCH:
        if o.device.type == "npu":
            from . import triton as _tr
            return _tr.fwd(o, z, out=out)
        if kind.via_ops():
            from . import torch as _zt
            return _zt.fwd_via_ops(o, z, out)
    return _call.fwd(kind, o, z, out, num_threads)


def reference_bwd(dout, z, o, *, dz=None, dout_scaled=None):
    """The library's float64 reference of bwd (CPU arrays only, single-threaded).

    New outputs are NumPy float64 arrays (the unrounded reference); given outputs may also
    be float32/float16/bfloat16."""
    return _call.reference_bwd(dout, z, o, dz, dout_scaled)


def reference_fwd(o, z, *, out=None):
    """The library's float64 reference of fwd (CPU arrays only); a new out is NumPy float64."""
    return _call.reference_fwd(o, z, out)
