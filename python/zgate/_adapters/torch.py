"""PyTorch tensors, described from their own metadata; CUDA work runs on PyTorch's current
stream. bwd_eager / fwd_eager hold the hot path: plain 4-D tensors and new outputs, kept to
straight-line attribute reads and one pack (in the layout of zgate._args) per call."""
import sys

import torch

from .. import _call, _dlpack, _lib
from .._args import CPU_WORD, LAYOUTS, OPTIONS_SIZE, block, device_word, to4
from .._call import fail
from . import _kinds

MUTABLE = True
TORCH = True
via_ops = torch.compiler.is_compiling   # traced calls go through zgate.torch's ops

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
_S5_FRESH, _S3_FRESH, _S5 = LAYOUTS[5, 3], LAYOUTS[3, 2], LAYOUTS[5, 5]
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


def bwd_eager(dout, z, o, num_threads):
    """bwd with new outputs: the hot path for three plain 4-D CPU/CUDA tensors of supported
    dtypes, the general path otherwise (which names any problem)."""
    words = _words
    sd = dout.shape
    wd, wz, wo = words.get(dout.dtype), words.get(z.dtype), words.get(o.dtype)
    if (len(sd) != 4 or wd is None or wz is None or wo is None or type(z) is not type(dout)
            or type(o) is not type(dout)):
        return _call.bwd(_self, dout, z, o, None, None, False, num_threads)
    if dout.is_cuda:
        i = dout.get_device()
        dd, stream = 2 | i << 32, _raw_stream(i)
    elif dout.is_cpu:
        dd, stream = CPU_WORD, 0
    else:
        dd = None
    dz_ = 2 | z.get_device() << 32 if z.is_cuda else CPU_WORD if z.is_cpu else None
    do_ = 2 | o.get_device() << 32 if o.is_cuda else CPU_WORD if o.is_cpu else None
    if dd is None or dz_ is None or do_ is None:
        return _call.bwd(_self, dout, z, o, None, None, False, num_threads)
    b = block()
    (s0, t0), (s1, t1), (s2, t2) = b.arrays[:3]
    f0 = b.fresh
    try:   # a sparse tensor, for one, fails here: the general path names the problem
        dz = _empty_like(dout, memory_format=_contiguous)
        dos = _empty_like(dout, memory_format=_contiguous)
        _S5_FRESH.pack_into(
            b.buf, 0,
            dout.data_ptr(), dd, wd, s0, t0, 0,
            z.data_ptr(), dz_, wz, s1, t1, 0,
            o.data_ptr(), do_, wo, s2, t2, 0,
            dz.data_ptr(), dd, wd, f0, 0, 0,
            dos.data_ptr(), dd, wd, f0, 0, 0,
            *sd, *z.shape, *o.shape, *dout.stride(), *z.stride(), *o.stride(),
            OPTIONS_SIZE, num_threads, 0, 0, stream)
    except RuntimeError:
        return _call.bwd(_self, dout, z, o, None, None, False, num_threads)
    t = b.t
    rc = (_lib._lib or _lib.load()).zgate_bwd(t[0], t[1], t[2], t[3], t[4], b.opts)
    if rc:
        raise fail(rc, [("dout", dout, None), ("z", z, None), ("o", o, None)])
    return dz, dos


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
    t = b.t
    rc = (_lib._lib or _lib.load()).zgate_bwd(t[0], t[1], t[2], t[3], t[4], b.opts)
    if rc:
        raise fail(rc, [("dout", dout, None), ("z", z, None), ("o", o, None), ("dz", dz, None),
                        ("dout_scaled", dos, None)])
    return dz, dos


def fwd_eager(o, z, num_threads):
    """fwd with a new output (see bwd_eager)."""
    words = _words
    so = o.shape
    wo, wz = words.get(o.dtype), words.get(z.dtype)
    if len(so) != 4 or wo is None or wz is None or type(z) is not type(o):
        return _call.fwd(_self, o, z, None, num_threads)
    if o.is_cuda:
        i = o.get_device()
        do_, stream = 2 | i << 32, _raw_stream(i)
    elif o.is_cpu:
        do_, stream = CPU_WORD, 0
    else:
        do_ = None
    dz_ = 2 | z.get_device() << 32 if z.is_cuda else CPU_WORD if z.is_cpu else None
    if do_ is None or dz_ is None:
        return _call.fwd(_self, o, z, None, num_threads)
    b = block()
    (s0, t0), (s1, t1) = b.arrays[:2]
    f0 = b.fresh
    try:
        out = _empty_like(o, memory_format=_contiguous)
        _S3_FRESH.pack_into(
            b.buf, 0,
            o.data_ptr(), do_, wo, s0, t0, 0,
            z.data_ptr(), dz_, wz, s1, t1, 0,
            out.data_ptr(), do_, wo, f0, 0, 0,
            *so, *z.shape, *o.stride(), *z.stride(),
            OPTIONS_SIZE, num_threads, 0, 0, stream)
    except RuntimeError:
        return _call.fwd(_self, o, z, None, num_threads)
    t = b.t
    rc = (_lib._lib or _lib.load()).zgate_fwd(t[0], t[1], t[2], b.opts)
    if rc:
        raise fail(rc, [("o", o, None), ("z", z, None)])
    return out


_self = sys.modules[__name__]

# torch.compile may see a tensor first: the type is known from here on, no lookup to trace
_kinds.setdefault(torch.Tensor, _self)
