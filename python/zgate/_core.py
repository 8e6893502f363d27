"""zgate.bwd / zgate.fwd: DLPack-speaking arrays in, same-kind arrays out, one C call.

Per call we describe each array as (data, device, dtype, shape, strides), pack all of them and
the options into one thread-local buffer with a single struct.pack_into, and make one ctypes
call with precomputed addresses. NumPy, PyTorch and CuPy arrays are described from their own
metadata (no capsule round trip: that is the hot path); any other array goes through
``__dlpack__`` and is released right after the call.
"""
import ctypes
import operator
import os
import struct
import sys
import threading

from . import _dlpack, _lib
from ._lib import Error, Status

NUMPY, TORCH, CUPY, JAX, DLPACK = range(1, 6)   # nonzero: `kinds.get(t) or ...`

# --- the per-thread argument block --------------------------------------------------------
# [5 DLTensor x 48 B][5 shapes x 4 int64][5 strides x 4 int64][zgate_options, 32 B]
_TENSOR_BYTES, _SHAPE_OFF, _STRIDE_OFF, _OPTS_OFF, _BLOCK_BYTES = 48, 240, 400, 560, 592
_OPTIONS_SIZE = 32  # sizeof(zgate_options) on LP64: size_t, int (+pad), char*, void*


def _make_struct(n, n_shapes=None):
    """Packs n DLTensor headers, the first n_shapes shape and stride arrays, and the options."""
    k = n if n_shapes is None else n_shapes
    fmt = "<" + "QiiiBBHQQQ" * n + "%dx" % (_SHAPE_OFF - _TENSOR_BYTES * n)
    fmt += "4q" * k + "%dx" % (160 - 32 * k) + "4q" * k + "%dx" % (160 - 32 * k) + "QiiQQ"
    s = struct.Struct(fmt)
    assert s.size == _BLOCK_BYTES
    return s


_STRUCTS = {3: _make_struct(3), 5: _make_struct(5)}


def _make_hot_struct(n, k):
    """The hot path's layout: each DLTensor header as six 64-bit words (data; device_type |
    device_id << 32; ndim | code << 32 | bits << 40 | lanes << 48; shape; strides;
    byte_offset), then k shape and k stride arrays, then the options. Fewer, wider values:
    packing costs per value."""
    fmt = "<" + "6Q" * n + "%dx" % (_SHAPE_OFF - _TENSOR_BYTES * n)
    fmt += "4q" * k + "%dx" % (160 - 32 * k) + "4q" * k + "%dx" % (160 - 32 * k) + "QiiQQ"
    s = struct.Struct(fmt)
    assert s.size == _BLOCK_BYTES
    return s


# Fresh compact outputs reuse the first input's shape array and pass NULL strides (compact
# row-major in DLPack), so only the inputs' shapes and strides are packed.
_S3_FRESH, _S5_FRESH = _make_hot_struct(3, 2), _make_hot_struct(5, 3)
_CPU_WORD = 1   # device word of kDLCPU, id 0
if sys.byteorder != "little":   # the layouts above are written little-endian
    raise ImportError("zgate: big-endian hosts are not supported")


class _Block:
    __slots__ = ("buf", "t", "consts", "opts", "fresh")

    def __init__(self):
        self.buf = ctypes.create_string_buffer(_BLOCK_BYTES)
        base = ctypes.addressof(self.buf)
        self.t = tuple(base + _TENSOR_BYTES * i for i in range(5))
        # Each tensor gets its own shape array, so the library still checks that shapes agree.
        self.consts = tuple((base + _SHAPE_OFF + 32 * i, base + _STRIDE_OFF + 32 * i, 0)
                            for i in range(5))
        self.opts = base + _OPTS_OFF
        # shape/strides/byte_offset of a fresh output: dout's shape, NULL strides
        self.fresh = (base + _SHAPE_OFF, 0, 0)


_tls = threading.local()


def _block():
    try:
        return _tls.block
    except AttributeError:
        b = _tls.block = _Block()
        return b


_tls_block = _block


def _pack(block, descs, num_threads, stream):
    args = []
    ext = args.extend
    for d, c in zip(descs, block.consts):
        ext((d[0], d[1], d[2], 4, d[3], d[4], d[5]))
        ext(c)
    for d in descs:
        ext(d[6])
    for d in descs:
        ext(d[7])
    ext((_OPTIONS_SIZE, num_threads, 0, 0, stream))
    _STRUCTS[len(descs)].pack_into(block.buf, 0, *args)


# --- describing arrays ---------------------------------------------------------------------
# desc = (data, device_type, device_id, code, bits, lanes, shape4, strides4, shape)


def _to4(name, shape, strides):
    n = len(shape)
    if n == 4:
        return tuple(shape), tuple(strides)
    if n > 4:
        raise Error(Status.ERR_NDIM, "%s has %d dimensions; zgate takes (batch, seqlen, nheads, "
                    "headdim), or fewer dimensions read as trailing ones" % (name, n))
    # Missing leading dimensions have size 1; their stride is never used, but give them a
    # plausible compact value.
    lead = max(1, shape[0] * strides[0]) if n else 1
    return (1,) * (4 - n) + tuple(shape), (lead,) * (4 - n) + tuple(strides)


_np_dtypes = {}


def _np_code(dt, name):
    cb = _np_dtypes.get(dt)
    if cb is None:
        if dt.name == "bfloat16" and dt.itemsize == 2:
            cb = (_dlpack.KDL_BFLOAT, 16)
        elif not dt.isnative:
            raise Error(Status.ERR_DTYPE, "%s has byte-swapped dtype %s" % (name, dt))
        else:
            # others (objects, strings, dates) as an opaque handle: refused by the library
            code = {"f": _dlpack.KDL_FLOAT, "i": _dlpack.KDL_INT, "u": _dlpack.KDL_UINT,
                    "c": _dlpack.KDL_COMPLEX, "b": _dlpack.KDL_BOOL}.get(dt.kind, 3)
            cb = (code, (dt.itemsize * 8) & 0xFF)
        _np_dtypes[dt] = cb
    return cb


def _desc_numpy(a, name, output):
    dt = a.dtype
    code, bits = _np_code(dt, name)
    item = dt.itemsize
    if output and not a.flags.writeable:
        raise Error(None, "%s is a read-only array" % name)
    st = a.strides
    if any(s % item for s in st):
        raise Error(Status.ERR_MISALIGNED, "%s has byte strides %s, not multiples of its "
                    "element size %d" % (name, st, item))
    shape = a.shape
    s4, t4 = _to4(name, shape, tuple(s // item for s in st))
    return (a.__array_interface__["data"][0], _dlpack.KDL_CPU, 0, code, bits, 1, s4, t4, shape)


_torch_dtypes = None
_torch_words = None   # dtype -> the header word ndim=4 | code << 32 | bits << 40 | lanes=1 << 48


_strided = None


def _torch_strided():
    global _strided
    if _strided is None:
        import torch
        _strided = torch.strided
    return _strided


def _torch_code_table():
    global _torch_dtypes, _torch_words
    import torch
    _torch_dtypes = {torch.float32: (2, 32), torch.float16: (2, 16), torch.bfloat16: (4, 16),
                     torch.float64: (2, 64)}
    _torch_words = {k: 4 | c << 32 | b << 40 | 1 << 48 for k, (c, b) in _torch_dtypes.items()}
    return _torch_dtypes


def _torch_code(dt):
    """The DLPack type code of a PyTorch dtype outside the supported table."""
    if dt.is_complex:
        return _dlpack.KDL_COMPLEX
    if dt.is_floating_point:
        return _dlpack.KDL_FLOAT
    if str(dt) == "torch.bool":
        return _dlpack.KDL_BOOL
    return _dlpack.KDL_INT if dt.is_signed else _dlpack.KDL_UINT


def _desc_torch(t, name, output):
    if t.layout is not _torch_strided():
        raise Error(None, "%s has layout %s; zgate takes strided (dense) tensors"
                    % (name, t.layout))
    cb = (_torch_dtypes or _torch_code_table()).get(t.dtype)
    if cb is None:   # described as it is: the library refuses it, and _fail names it
        cb = (_torch_code(t.dtype), t.element_size() * 8 & 0xFF)
    if t.is_cuda:
        dev, idx = _dlpack.KDL_CUDA, t.get_device()
    elif t.is_cpu:
        dev, idx = _dlpack.KDL_CPU, 0
    else:
        raise Error(Status.ERR_DEVICE_UNSUPPORTED, "%s is on device '%s'" % (name, t.device))
    shape = t.shape
    if len(shape) == 4:
        s4, t4 = shape, t.stride()
    else:
        s4, t4 = _to4(name, tuple(shape), t.stride())
    return (t.data_ptr(), dev, idx, cb[0], cb[1], 1, s4, t4, shape)


def _desc_cupy(a, name, output):
    dt = a.dtype
    code, bits = _np_code(dt, name)
    item = dt.itemsize
    st = a.strides
    if any(s % item for s in st):
        raise Error(Status.ERR_MISALIGNED, "%s has byte strides %s, not multiples of its "
                    "element size %d" % (name, st, item))
    shape = a.shape
    s4, t4 = _to4(name, shape, tuple(s // item for s in st))
    return (a.data.ptr, _dlpack.KDL_CUDA, a.device.id, code, bits, 1, s4, t4, shape)


def _desc_dlpack(x, name, dlstream, keep):
    """Through the capsule protocol. dlstream: the consumer stream for CUDA producers."""
    try:
        dev_type, _ = x.__dlpack_device__()
        if dev_type in (_dlpack.KDL_CUDA, _dlpack.KDL_CUDA_MANAGED):
            cap = x.__dlpack__(stream=dlstream)
        else:
            cap = x.__dlpack__()
        b = _dlpack.Borrowed(cap)
    except Error:
        raise
    except Exception as e:
        raise Error(None, "%s: could not take a DLPack view of %s: %s"
                    % (name, type(x).__name__, e)) from e
    keep.append(b)
    data, dt, di, code, bits, lanes, shape, strides = _dlpack.describe(b.tensor)
    s4, t4 = _to4(name, shape, strides)
    return (data, dt, di, code, bits, lanes, s4, t4, shape)


# --- kinds ---------------------------------------------------------------------------------
_kinds = {}


def _classify(x):
    t = type(x)
    k = _kinds.get(t)
    if k is not None:
        return k
    m = sys.modules
    if "numpy" in m and isinstance(x, m["numpy"].ndarray):
        k = NUMPY
    elif "torch" in m and isinstance(x, m["torch"].Tensor):
        k = TORCH
    elif "cupy" in m and isinstance(x, m["cupy"].ndarray):
        k = CUPY
    elif "jax" in m and isinstance(x, m["jax"].Array):
        k = JAX
    elif hasattr(x, "__dlpack__") and hasattr(x, "__dlpack_device__"):
        k = DLPACK
    else:
        raise Error(None, "expected an array that speaks DLPack (NumPy, PyTorch, CuPy, JAX...), "
                    "got %s" % t.__name__)
    _kinds[t] = k
    return k


def _describe(x, name, output, dlstream, keep):
    k = _classify(x)
    if k is TORCH:
        return _desc_torch(x, name, output)
    if k is NUMPY:
        return _desc_numpy(x, name, output)
    if k is CUPY:
        return _desc_cupy(x, name, output)
    return _desc_dlpack(x, name, dlstream, keep)


def _stream_of(kind, x, desc):
    """(stream handle for zgate_options, stream value for __dlpack__) on the primary's device."""
    if desc[1] != _dlpack.KDL_CUDA:
        return 0, None
    if kind is TORCH:
        s = _torch_stream(desc[2])
    elif kind is CUPY:
        import cupy
        try:
            s = cupy.cuda.get_current_stream(desc[2]).ptr
        except TypeError:  # older CuPy: current device's stream
            s = cupy.cuda.get_current_stream().ptr
    else:
        s = 0   # the legacy default stream, "1" in the DLPack stream protocol
    return s, (s if s else 1)


_torch_raw_stream = None


def _torch_stream(index):
    global _torch_raw_stream
    if _torch_raw_stream is None:
        import torch
        fast = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        _torch_raw_stream = fast or (lambda i: torch.cuda.current_stream(i).cuda_stream)
    return _torch_raw_stream(index)


def _empty_like(kind, x, desc, dtype=None):
    """A new compact array of x's kind, device and shape (dtype of x unless given)."""
    shape = tuple(desc[8])
    if kind is TORCH:
        import torch
        return torch.empty(shape, dtype=dtype or x.dtype, device=x.device)
    if kind is NUMPY:
        import numpy
        return numpy.empty(shape, dtype=dtype or x.dtype)
    if kind is CUPY:
        import cupy
        with cupy.cuda.Device(desc[2]):
            return cupy.empty(shape, dtype=dtype or x.dtype)
    if kind is JAX:
        import jax
        import jax.numpy as jnp
        dev = getattr(x, "device", None)
        if dev is None or callable(dev):
            dev = next(iter(x.devices()))
        try:
            y = jnp.empty(shape, dtype=dtype or x.dtype, device=dev)
        except TypeError:   # older JAX: no device= here
            y = jax.device_put(jnp.empty(shape, dtype=dtype or x.dtype), dev)
        # A fresh buffer nobody else holds; it must exist before we write into it.
        return y.block_until_ready()
    if desc[1] == _dlpack.KDL_CPU:
        import numpy
        return numpy.empty(shape, dtype=_numpy_dtype_of(desc))
    raise Error(None, "cannot allocate outputs like %s on device type %d; pass the outputs"
                % (type(x).__name__, desc[1]))


def _numpy_dtype_of(desc):
    import numpy
    code, bits = desc[3], desc[4]
    if code == _dlpack.KDL_FLOAT and bits in (16, 32, 64):
        return numpy.dtype("float%d" % bits)
    if code == _dlpack.KDL_BFLOAT and bits == 16:
        import ml_dtypes
        return numpy.dtype(ml_dtypes.bfloat16)
    raise Error(Status.ERR_DTYPE, "dtype %s is not float32, float16 or bfloat16 (new outputs "
                "take the input's dtype)" % _dlpack.dtype_name(code, bits, desc[5]))


_cudart = None


def _sync_legacy_stream(device_id):
    """Wait for the legacy default stream of a device (JAX outputs: JAX cannot be told to wait
    for our stream, so the result must be complete before JAX may read it)."""
    global _cudart
    if _cudart is None:
        names = ["libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0", "libcudart.so"]
        try:   # the runtime that pip-installed CUDA wheels (JAX's among them) bring
            import nvidia.cuda_runtime as _ncr
            for d in getattr(_ncr, "__path__", []):
                names += [os.path.join(d, "lib", n) for n in names[:3]]
        except ImportError:
            pass
        for n in names:
            try:
                _cudart = ctypes.CDLL(n)
                break
            except OSError:
                continue
        else:
            raise Error(Status.ERR_CUDA, "libcudart not found to synchronize a JAX output")
    cur = ctypes.c_int(0)
    _cudart.cudaGetDevice(ctypes.byref(cur))
    _cudart.cudaSetDevice(ctypes.c_int(device_id))
    rc = _cudart.cudaStreamSynchronize(ctypes.c_void_p(0))
    _cudart.cudaSetDevice(cur)
    if rc != 0:
        raise Error(Status.ERR_CUDA, "cudaStreamSynchronize failed with CUDA error %d" % rc)


_is_compiling = None


def _torch_compiling():
    global _is_compiling
    if _is_compiling is None:
        import torch
        _is_compiling = torch.compiler.is_compiling
    return _is_compiling()


_torch_fast = None   # (empty_like, contiguous_format, raw current stream) once PyTorch is seen


def _torch_fast_init():
    global _torch_fast
    import torch
    _torch_code_table()
    fast = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    stream = fast or (lambda i: torch.cuda.current_stream(i).cuda_stream)
    _torch_fast = (torch.empty_like, torch.contiguous_format, stream)
    return _torch_fast


def _bwd_torch_new(dout, z, o, num_threads):
    """bwd for three 4-D PyTorch tensors and new outputs: the hot path, kept to straight-line
    attribute reads, one pack and one call. Returns None to defer to the general path."""
    empty_like, contiguous, raw_stream = _torch_fast or _torch_fast_init()
    words = _torch_words
    sd = dout.shape
    wd, wz, wo = words.get(dout.dtype), words.get(z.dtype), words.get(o.dtype)
    if len(sd) != 4 or wd is None or wz is None or wo is None:
        return None
    if dout.is_cuda:
        i = dout.get_device()
        dd, stream = 2 | i << 32, raw_stream(i)
    elif dout.is_cpu:
        dd, stream = _CPU_WORD, 0
    else:
        return None
    if z.is_cuda:
        dz_ = 2 | z.get_device() << 32
    elif z.is_cpu:
        dz_ = _CPU_WORD
    else:
        return None
    if o.is_cuda:
        do_ = 2 | o.get_device() << 32
    elif o.is_cpu:
        do_ = _CPU_WORD
    else:
        return None
    dz = empty_like(dout, memory_format=contiguous)
    dos = empty_like(dout, memory_format=contiguous)
    b = _tls_block()
    (s0, t0, _), (s1, t1, _), (s2, t2, _) = b.consts[:3]
    f0 = b.fresh[0]
    _S5_FRESH.pack_into(
        b.buf, 0,
        dout.data_ptr(), dd, wd, s0, t0, 0,
        z.data_ptr(), dz_, wz, s1, t1, 0,
        o.data_ptr(), do_, wo, s2, t2, 0,
        dz.data_ptr(), dd, wd, f0, 0, 0,
        dos.data_ptr(), dd, wd, f0, 0, 0,
        *sd, *z.shape, *o.shape, *dout.stride(), *z.stride(), *o.stride(),
        _OPTIONS_SIZE, num_threads, 0, 0, stream)
    t = b.t
    rc = (_lib._lib or _lib.load()).zgate_bwd(t[0], t[1], t[2], t[3], t[4], b.opts)
    if rc:
        raise _fail(rc, [("dout", dout, None), ("z", z, None), ("o", o, None)])
    return dz, dos


def _fwd_torch_new(o, z, num_threads):
    """fwd for two 4-D PyTorch tensors and a new output (see _bwd_torch_new)."""
    empty_like, contiguous, raw_stream = _torch_fast or _torch_fast_init()
    words = _torch_words
    so = o.shape
    wo, wz = words.get(o.dtype), words.get(z.dtype)
    if len(so) != 4 or wo is None or wz is None:
        return None
    if o.is_cuda:
        i = o.get_device()
        do_, stream = 2 | i << 32, raw_stream(i)
    elif o.is_cpu:
        do_, stream = _CPU_WORD, 0
    else:
        return None
    if z.is_cuda:
        dz_ = 2 | z.get_device() << 32
    elif z.is_cpu:
        dz_ = _CPU_WORD
    else:
        return None
    out = empty_like(o, memory_format=contiguous)
    b = _tls_block()
    (s0, t0, _), (s1, t1, _) = b.consts[:2]
    f0 = b.fresh[0]
    _S3_FRESH.pack_into(
        b.buf, 0,
        o.data_ptr(), do_, wo, s0, t0, 0,
        z.data_ptr(), dz_, wz, s1, t1, 0,
        out.data_ptr(), do_, wo, f0, 0, 0,
        *so, *z.shape, *o.stride(), *z.stride(),
        _OPTIONS_SIZE, num_threads, 0, 0, stream)
    t = b.t
    rc = (_lib._lib or _lib.load()).zgate_fwd(t[0], t[1], t[2], b.opts)
    if rc:
        raise _fail(rc, [("o", o, None), ("z", z, None)])
    return out


def _bump_versions(kind, outs):
    # Raw-pointer writes bypass PyTorch's version counters; tell autograd these changed.
    if kind is TORCH:
        import torch
        inc = getattr(torch.autograd.graph, "increment_version", None)
        if inc is not None:
            for t in outs:
                inc(t)


def _inplace_desc(kind, dout, d0):
    """dout doubles as dout_scaled: the same description, if dout may be written."""
    if kind is NUMPY and not dout.flags.writeable:
        raise Error(None, "dout is a read-only array and cannot take dout_scaled in place")
    return d0


# --- checking the keyword arguments and naming what the library refused -------------------


def _threads_arg(n):
    """num_threads as a C int. The library checks its range; here, that it is a whole number
    (not a bool, float, string or None) and fits the C int it is passed as."""
    if isinstance(n, bool) or not hasattr(type(n), "__index__"):
        raise Error(Status.ERR_OPTIONS, "options: num_threads is %r (%s); it takes a whole "
                    "number: 0 (the OpenMP default) or a thread count" % (n, type(n).__name__))
    n = operator.index(n)
    if not -0x80000000 <= n <= 0x7FFFFFFF:
        raise Error(Status.ERR_OPTIONS, "options: num_threads is %d, beyond a C int; it takes "
                    "0 (the OpenMP default) or a thread count" % n)
    return n


def _flag_arg(name, value):
    """A True/False keyword (a NumPy bool too); anything else is refused, not read as truthy."""
    if type(value).__name__ in ("bool", "bool_"):
        return bool(value)
    raise Error(None, "%s is %r (%s); it takes True or False" % (name, value,
                                                                  type(value).__name__))


def _fail(rc, named):
    """The zgate.Error for status rc; named: (tensor name, array, description) of the call,
    so that a refused dtype is named as the caller spells it (str(array.dtype))."""
    dtypes = {}
    if rc == Status.ERR_DTYPE:
        for name, x, d in named:
            dt = getattr(x, "dtype", None)
            dtypes[name] = str(dt) if dt is not None else _dlpack.dtype_name(d[3], d[4], d[5])
    return _lib.fail(rc, dtypes)


# --- entry points --------------------------------------------------------------------------


def bwd(dout, z, o, *, dz=None, dout_scaled=None, inplace=False, num_threads=0):
    """Backward of the gate: returns (dz, dout_scaled).

    dz = dout * o * s * (1 + z * (1 - s)), dout_scaled = dout * s * z, s = sigmoid(z), in
    float32 math. Inputs are any arrays that speak DLPack; new outputs are of dout's kind,
    device and dtype, compact. Given outputs (dz=, dout_scaled=) are written in their own
    dtype (float32, float16 or bfloat16). inplace=True writes dout_scaled into dout.
    num_threads: CPU threads (0 = the OpenMP default). CUDA work is queued on the caller's
    current stream (PyTorch's or CuPy's; the legacy default stream otherwise).
    """
    if type(num_threads) is not int or not -0x80000000 <= num_threads <= 0x7FFFFFFF:
        num_threads = _threads_arg(num_threads)
    if inplace is not False and inplace is not True:
        inplace = _flag_arg("inplace", inplace)
    kind = _kinds.get(type(dout)) or _classify(dout)
    if kind is TORCH:
        if dout.device.type == "npu":
            from . import triton as _tr
            return _tr.bwd(dout, z, o, dz=dz, dout_scaled=dout_scaled, inplace=inplace)
        if _torch_compiling():
            from . import torch as _zt
            return _zt._bwd_traced(dout, z, o, dz, dout_scaled, inplace)
        if (dz is None and dout_scaled is None and not inplace
                and type(z) is type(dout) and type(o) is type(dout)):
            try:
                r = _bwd_torch_new(dout, z, o, num_threads)
            except RuntimeError:   # e.g. a sparse tensor: the general path names the problem
                r = None
            if r is not None:
                return r
    if inplace:
        if dout_scaled is not None and dout_scaled is not dout:
            raise Error(None, "inplace=True writes dout_scaled into dout; do not pass "
                        "dout_scaled as well")
        dout_scaled = dout
    if kind is JAX and (dz is not None or dout_scaled is not None):
        raise Error(None, "JAX arrays are immutable: outputs (dz=, dout_scaled=, inplace=) "
                    "cannot be given for JAX inputs")
    keep = []
    try:
        d0 = _describe(dout, "dout", False, 1, keep)
        stream, dls = _stream_of(kind, dout, d0)
        d1 = _describe(z, "z", False, dls, keep)
        d2 = _describe(o, "o", False, dls, keep)
        given = [x for x in (dz, dout_scaled) if x is not None]
        if dz is None:
            dz = _empty_like(kind, dout, d0)
        if dout_scaled is None:
            dout_scaled = _empty_like(kind, dout, d0)
        d3 = _describe(dz, "dz", True, dls, keep)
        d4 = _inplace_desc(kind, dout, d0) if dout_scaled is dout else _describe(
            dout_scaled, "dout_scaled", True, dls, keep)
        lib = _lib._lib or _lib.load()
        b = _block()
        _pack(b, (d0, d1, d2, d3, d4), num_threads, stream)
        t = b.t
        rc = lib.zgate_bwd(t[0], t[1], t[2], t[3], t[4], b.opts)
    finally:
        for k in keep:
            k.release()
    if rc:
        raise _fail(rc, [("dout", dout, d0), ("z", z, d1), ("o", o, d2), ("dz", dz, d3),
                         ("dout_scaled", dout_scaled, d4)])
    if kind is JAX and d0[1] == _dlpack.KDL_CUDA:
        _sync_legacy_stream(d0[2])
    if given:
        _bump_versions(kind, given)
    return dz, dout_scaled


def fwd(o, z, *, out=None, num_threads=0):
    """Forward of the gate: out = o * z * sigmoid(z) (float32 math), returned.

    A new `out` is of o's kind, device and dtype, compact; a given one is written in its own
    dtype. Streams as for bwd."""
    if type(num_threads) is not int or not -0x80000000 <= num_threads <= 0x7FFFFFFF:
        num_threads = _threads_arg(num_threads)
    kind = _kinds.get(type(o)) or _classify(o)
    if kind is TORCH:
        if o.device.type == "npu":
            from . import triton as _tr
            return _tr.fwd(o, z, out=out)
        if _torch_compiling():
            from . import torch as _zt
            return _zt._fwd_traced(o, z, out)
        if out is None and type(z) is type(o):
            try:
                r = _fwd_torch_new(o, z, num_threads)
            except RuntimeError:
                r = None
            if r is not None:
                return r
    if kind is JAX and out is not None:
        raise Error(None, "JAX arrays are immutable: out= cannot be given for JAX inputs")
    keep = []
    try:
        d0 = _describe(o, "o", False, 1, keep)
        stream, dls = _stream_of(kind, o, d0)
        d1 = _describe(z, "z", False, dls, keep)
        given = out is not None
        if not given:
            out = _empty_like(kind, o, d0)
        d2 = _describe(out, "out", True, dls, keep)
        lib = _lib._lib or _lib.load()
        b = _block()
        _pack(b, (d0, d1, d2), num_threads, stream)
        t = b.t
        rc = lib.zgate_fwd(t[0], t[1], t[2], b.opts)
    finally:
        for k in keep:
            k.release()
    if rc:
        raise _fail(rc, [("o", o, d0), ("z", z, d1), ("out", out, d2)])
    if kind is JAX and d0[1] == _dlpack.KDL_CUDA:
        _sync_legacy_stream(d0[2])
    if given:
        _bump_versions(kind, [out])
    return out


def _reference_outputs(x, desc, given):
    if given is not None:
        return given
    import numpy
    return numpy.empty(tuple(desc[8]), dtype=numpy.float64)


def reference_bwd(dout, z, o, *, dz=None, dout_scaled=None):
    """The library's float64 reference of bwd (CPU arrays only, single-threaded).

    New outputs are NumPy float64 arrays (the unrounded reference); given outputs may also
    be float32/float16/bfloat16."""
    keep = []
    try:
        d0 = _describe(dout, "dout", False, None, keep)
        d1 = _describe(z, "z", False, None, keep)
        d2 = _describe(o, "o", False, None, keep)
        dz = _reference_outputs(dout, d0, dz)
        dout_scaled = _reference_outputs(dout, d0, dout_scaled)
        d3 = _describe(dz, "dz", True, None, keep)
        d4 = _inplace_desc(_classify(dout), dout, d0) if dout_scaled is dout else _describe(
            dout_scaled, "dout_scaled", True, None, keep)
        lib = _lib._lib or _lib.load()
        b = _block()
        _pack(b, (d0, d1, d2, d3, d4), 0, 0)
        t = b.t
        rc = lib.zgate_bwd_reference(t[0], t[1], t[2], t[3], t[4])
    finally:
        for k in keep:
            k.release()
    if rc:
        raise _fail(rc, [("dout", dout, d0), ("z", z, d1), ("o", o, d2), ("dz", dz, d3),
                         ("dout_scaled", dout_scaled, d4)])
    return dz, dout_scaled


def reference_fwd(o, z, *, out=None):
    """The library's float64 reference of fwd (CPU arrays only); a new out is NumPy float64."""
    keep = []
    try:
        d0 = _describe(o, "o", False, None, keep)
        d1 = _describe(z, "z", False, None, keep)
        out = _reference_outputs(o, d0, out)
        d2 = _describe(out, "out", True, None, keep)
        lib = _lib._lib or _lib.load()
        b = _block()
        _pack(b, (d0, d1, d2), 0, 0)
        t = b.t
        rc = lib.zgate_fwd_reference(t[0], t[1], t[2])
    finally:
        for k in keep:
            k.release()
    if rc:
        raise _fail(rc, [("o", o, d0), ("z", z, d1), ("out", out, d2)])
    return out
