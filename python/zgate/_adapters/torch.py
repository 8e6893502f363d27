"""PyTorch tensors, described from their own metadata; CUDA work runs on PyTorch's current
stream. bwd_fast / fwd_fast hold the hot path (plain 4-D tensors and new outputs, kept to
straight-line attribute reads, one pack in the layout of zgate._args and one ctypes call per
call): zgate.bwd / zgate.fwd try it first for torch.Tensor, and the custom ops through
bwd_eager / fwd_eager."""
import sys
from struct import error as _StructError

import torch

from .. import _call, _dlpack, _lib
from .._args import (CPU_WORD, FRESH_BWD as _FRESH_BWD, FRESH_FWD as _FRESH_FWD, LAYOUTS,
                     OPTIONS_SIZE, block, device_word, tls as _tls, to4)
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
_S5 = LAYOUTS[5, 5]
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


def bwd_fast(dout, z, o, dz, dout_scaled, inplace, num_threads):
    """zgate.bwd with new outputs: the hot path for three plain 4-D CPU/CUDA tensors of
    supported dtypes and an int num_threads, and None for any other call (traced; outputs
    given or in place; another dtype, rank, type, device or layout; num_threads not an int
    or beyond a C int), which the general path then takes (and names any problem).

    Per call: the tensors' metadata read once each, two allocations (the second like the
    first, which is compact: no memory_format to parse), one pack of 50 values
    into the thread's block (zgate._args.FRESH_BWD: the fields that are always zero are
    padding), one ctypes call with the block's ready pointers (no argument conversion)."""
    if (_is_compiling()   # traced: through zgate.torch's ops (nothing else touched first)
            or dz is not None or dout_scaled is not None or inplace is not False
            or type(num_threads) is not int):
        return None
    words = _words
    wd, wz, wo = words.get(dout.dtype), words.get(z.dtype), words.get(o.dtype)
    t = type(dout)
    if wd is None or wz is None or wo is None or type(z) is not t or type(o) is not t:
        return None
    sd = dout.shape
    if len(sd) != 4:
        return None
    if dout.is_cuda:
        i = dout.get_device()
        dd, stream = 2 | i << 32, _raw_stream(i)
    elif dout.is_cpu:
        dd, stream = CPU_WORD, 0
    else:
        return None
    dz_ = 2 | z.get_device() << 32 if z.is_cuda else CPU_WORD if z.is_cpu else None
    do_ = 2 | o.get_device() << 32 if o.is_cuda else CPU_WORD if o.is_cpu else None
    if dz_ is None or do_ is None:
        return None
    try:
        b = _tls.block
    except AttributeError:
        b = block()
    s0, t0, s1, t1, s2, t2, f0 = b.fast
    try:   # a sparse tensor fails here, a num_threads beyond a C int in the pack
        dz = _empty_like(dout, memory_format=_contiguous)
        dos = _empty_like(dz)   # dz's compact strides preserved: no keyword to parse
        _FRESH_BWD.pack_into(
            b.buf, 0,
            dout.data_ptr(), dd, wd, s0, t0,
            z.data_ptr(), dz_, wz, s1, t1,
            o.data_ptr(), do_, wo, s2, t2,
            dz.data_ptr(), dd, wd, f0,
            dos.data_ptr(), dd, wd, f0,
            *sd, *z.shape, *o.shape, *dout.stride(), *z.stride(), *o.stride(),
            OPTIONS_SIZE, num_threads, stream)
    except (RuntimeError, _StructError):
        return None
    rc = _c_bwd(*b.bwd_args)
    if rc:
        raise fail(rc, [("dout", dout, None), ("z", z, None), ("o", o, None)])
    return dz, dos


def bwd_eager(dout, z, o, num_threads):
    """bwd with new outputs: the hot path where it applies, the general path otherwise."""
    r = bwd_fast(dout, z, o, None, None, False, num_threads)
    return r if r is not None else _call.bwd(_self, dout, z, o, None, None, False, num_threads)


def _dev(t):
    """The device word of a CPU or CUDA tensor, None for others."""
    return 2 | t.get_device() << 32 if t.is_cuda else CPU_WORD if t.is_cpu else None


def bwd_into(dout, z, o, dz, dos, num_threads):
    """bwd into given outputs (no versions bumped: for outputs just allocated): the hot path
    for five plain 4-D CPU/CUDA tensors, the general path otherwise."""
    words = _words
    ws = (words.get(dout.dtype), words.get(z.dtype), words.get(o.dtype), words.get(dz.dtype),
          words.get(dos.dtype))
    ts = (dout, z, o, dz, dos)
    devs = tuple(map(_dev, ts)) if type(dout) is _Tensor else (None,)
    if (None in ws or None in devs
            or not all(type(t) is _Tensor and len(t.shape) == 4 for t in ts)):
        return _call.bwd(_self, dout, z, o, dz, dos, False, num_threads)
    stream = _raw_stream(devs[0] >> 32) if devs[0] != CPU_WORD else 0
    b = block()
    (s0, t0), (s1, t1), (s2, t2), (s3, t3), (s4, t4) = b.arrays
    try:
        _S5.pack_into(
            b.buf, 0,
            dout.data_ptr(), devs[0], ws[0], s0, t0, 0,
            z.data_ptr(), devs[1], ws[1], s1, t1, 0,
            o.data_ptr(), devs[2], ws[2], s2, t2, 0,
            dz.data_ptr(), devs[3], ws[3], s3, t3, 0,
            dos.data_ptr(), devs[4], ws[4], s4, t4, 0,
            *dout.shape, *z.shape, *o.shape, *dz.shape, *dos.shape,
            *dout.stride(), *z.stride(), *o.stride(), *dz.stride(), *dos.stride(),
            OPTIONS_SIZE, num_threads, 0, 0, stream)
    except RuntimeError:   # e.g. a sparse tensor
        return _call.bwd(_self, dout, z, o, dz, dos, False, num_threads)
    rc = (_c_bwd or _lib.raw("zgate_bwd"))(*b.bwd_args)
    if rc:
        raise fail(rc, [("dout", dout, None), ("z", z, None), ("o", o, None), ("dz", dz, None),
                        ("dout_scaled", dos, None)])
    return dz, dos


def fwd_fast(o, z, out, num_threads):
    """zgate.fwd with a new output (see bwd_fast); None where the general path takes it."""
    if _is_compiling() or out is not None or type(num_threads) is not int:
        return None
    words = _words
    wo, wz = words.get(o.dtype), words.get(z.dtype)
    if wo is None or wz is None or type(z) is not type(o):
        return None
    so = o.shape
    if len(so) != 4:
        return None
    if o.is_cuda:
        i = o.get_device()
        do_, stream = 2 | i << 32, _raw_stream(i)
    elif o.is_cpu:
        do_, stream = CPU_WORD, 0
    else:
        return None
    dz_ = 2 | z.get_device() << 32 if z.is_cuda else CPU_WORD if z.is_cpu else None
    if dz_ is None:
        return None
    try:
        b = _tls.block
    except AttributeError:
        b = block()
    s0, t0, s1, t1, _, _, f0 = b.fast
    try:
        out = _empty_like(o, memory_format=_contiguous)
        _FRESH_FWD.pack_into(
            b.buf, 0,
            o.data_ptr(), do_, wo, s0, t0,
            z.data_ptr(), dz_, wz, s1, t1,
            out.data_ptr(), do_, wo, f0,
            *so, *z.shape, *o.stride(), *z.stride(),
            OPTIONS_SIZE, num_threads, stream)
    except (RuntimeError, _StructError):
        return None
    rc = _c_fwd(*b.fwd_args)
    if rc:
        raise fail(rc, [("o", o, None), ("z", z, None)])
    return out


def fwd_eager(o, z, num_threads):
    """fwd with a new output: the hot path where it applies, the general path otherwise."""
    r = fwd_fast(o, z, None, num_threads)
    return r if r is not None else _call.fwd(_self, o, z, None, num_threads)


_c_bwd = _c_fwd = None


def _bind():
    """Binds the library's entry points for the hot paths (without argtypes: they pass the
    block's ready pointers) and puts the hot paths before zgate._core's general route for
    plain tensors. Done when the library loads; until then every call takes the general
    path (which loads it, or names why it does not load)."""
    global _c_bwd, _c_fwd
    try:
        _c_bwd, _c_fwd = _lib.raw("zgate_bwd"), _lib.raw("zgate_fwd")
    except _lib.Error:
        return
    _fast_bwd[_Tensor] = bwd_fast
    _fast_fwd[_Tensor] = fwd_fast


_self = sys.modules[__name__]

# torch.compile may see a tensor first: the type is known from here on, no lookup to trace
_kinds.setdefault(torch.Tensor, _self)
_bind()
