"""PyTorch tensors, described from their own metadata; CUDA work runs on PyTorch's current
stream. The hot path of plain 4-D tensors is compiled (zgate._hot, python/ext/hot.c):
zgate.bwd / zgate.fwd try it first for torch.Tensor, zgate.torch's ops through bwd_call /
fwd_call (new or given outputs, given ones' versions bumped) and bwd_into (outputs just
allocated: compute_dzdo, silu_gate's backward); what it declines takes zgate._call."""
import ctypes
import sys

import torch

from .. import _adapters, _call, _dlpack, _lib
from .._args import CPU_WORD, device_word, to4
from .._call import fail
from . import _fast_bwd, _fast_fwd, _kinds

MUTABLE = True
TORCH = True
via_ops = _is_compiling = torch.compiler.is_compiling   # traced calls: zgate.torch's ops

_codes = {torch.float32: (2, 32), torch.float16: (2, 16), torch.bfloat16: (4, 16),
          torch.float64: (2, 64)}
# dtype -> the header word ndim=4 | code << 32 | bits << 40 | lanes=1 << 48
_words = {k: 4 | c << 32 | b << 40 | 1 << 48 for k, (c, b) in _codes.items()}
_strided = torch.strided
_empty_like = torch.empty_like
_contiguous = torch.contiguous_format
_raw_stream = (getattr(torch._C, "_cuda_getCurrentRawStream", None)
               or (lambda i: torch.cuda.current_stream(i).cuda_stream))
_increment_version = getattr(torch.autograd.graph, "increment_version", None)
_Tensor = torch.Tensor


def _code(dt):
    """The DLPack (code, bits) of a PyTorch dtype, the supported ones or not (the library
    refuses those, and the error names the dtype)."""
    cb = _codes.get(dt)
    if cb is not None:
        return cb
    if dt.is_complex:
        code = _dlpack.KDL_COMPLEX
    elif dt.is_floating_point:
        code = _dlpack.KDL_FLOAT
    elif dt == torch.bool:
        code = _dlpack.KDL_BOOL
    else:
        code = _dlpack.KDL_INT if dt.is_signed else _dlpack.KDL_UINT
    return code, dt.itemsize * 8 & 0xFF


def describe(t, name, output, dlstream, keep):
    if t.layout is not _strided:
        raise _lib.Error(None, "%s has layout %s; zgate takes strided (dense) tensors"
                         % (name, t.layout))
    w = _words.get(t.dtype)
    if w is None:
        code, bits = _code(t.dtype)
        w = 4 | code << 32 | bits << 40 | 1 << 48
    if t.is_cuda:
        dev = device_word(_dlpack.KDL_CUDA, t.get_device())
    elif t.is_cpu:
        dev = CPU_WORD
    else:
        raise _lib.Error(_lib.Status.ERR_DEVICE_UNSUPPORTED, "%s is on device '%s'"
                         % (name, t.device))
    shape = t.shape
    if len(shape) == 4:
        s4, t4 = shape, t.stride()
    else:
        s4, t4 = to4(name, tuple(shape), t.stride())
    return (t.data_ptr(), dev, w, s4, t4, shape)


def empty_like(x, desc):
    return torch.empty(tuple(desc[5]), dtype=x.dtype, device=x.device)


def stream(x, desc):
    s = _raw_stream(desc[1] >> 32)
    return s, (s if s else 1)


def finish(desc, given):
    # Raw-pointer writes bypass PyTorch's version counters; tell autograd these changed.
    if given and _increment_version is not None:
        for t in given:
            _increment_version(t)


def _decline(*args):
    return None


# zgate._hot's entry points once bound (_bind): None for a call they do not take
_hot_bwd = _hot_into = _hot_fwd = _decline


def bwd_call(dout, z, o, dz, dos, num_threads):
    """bwd with new outputs (dz, dos None) or into given ones, their versions bumped: the hot
    path where it takes the call, the general path otherwise."""
    r = _hot_bwd(dout, z, o, dz, dos, False, num_threads)
    return r if r is not None else _call.bwd(_self, dout, z, o, dz, dos, False, num_threads)


def bwd_into(dout, z, o, dz, dos, num_threads):
    """bwd into given outputs (no versions bumped: for outputs just allocated): the hot path
    where it takes the call, the general path otherwise."""
    r = _hot_into(dout, z, o, dz, dos, num_threads)
    return r if r is not None else _call.bwd(_self, dout, z, o, dz, dos, False, num_threads)


def fwd_call(o, z, out, num_threads):
    """fwd with a new output (out None) or into a given one, its version bumped (the hot
    path, or the general path)."""
    r = _hot_fwd(o, z, out, num_threads)
    return r if r is not None else _call.fwd(_self, o, z, out, num_threads)


def _failure(status, names, *tensors):
    """The zgate.Error of a hot-path call the library refused (zgate._hot raises it)."""
    return fail(status, [(n, t, None) for n, t in zip(names, tensors)])


def _bind():
    """Hands zgate._hot the library's entry points and PyTorch's objects, and puts its entry
    points before zgate._core's general route for plain tensors. Done when the library loads;
    until then, and where zgate._hot is not built (zgate._lib.hot_why()), every call takes
    the general path (which loads the library, or names why it does not load)."""
    global _hot_bwd, _hot_into, _hot_fwd
    try:
        lib = _lib.load()
    except _lib.Error:
        return
    hot = _lib.hot()
    if hot is None:
        return

    def address(name):
        return ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
    hot.bind(address("zgate_bwd"), address("zgate_fwd"), _Tensor,
             (torch.float32, torch.float16, torch.bfloat16), _empty_like, _contiguous,
             _raw_stream, _failure, _increment_version)
    _hot_bwd, _hot_into, _hot_fwd = hot.bwd, hot.bwd_into, hot.fwd
    _adapters.tracing = _is_compiling
    _fast_bwd[_Tensor] = hot.bwd
    _fast_fwd[_Tensor] = hot.fwd


_self = sys.modules[__name__]

# torch.compile may see a tensor first: the type is known from here on, no lookup to trace
_kinds.setdefault(torch.Tensor, _self)
_bind()
