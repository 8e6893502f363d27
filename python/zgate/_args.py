"""The argument block of one libzgate call, and the checks of the keyword options.

Per call, the arrays' DLTensor headers, their shape and stride arrays and a zgate_options
are packed into one thread-local buffer with a single struct.pack_into, and the library is
called with the buffer's precomputed addresses:

    [5 DLTensor x 48 B][5 shapes x 4 int64][5 strides x 4 int64][zgate_options, 32 B]

Each DLTensor header is written as six 64-bit words: data; device word (device_type |
device_id << 32); dtype word (ndim = 4 | code << 32 | bits << 40 | lanes << 48); shape;
strides; byte_offset = 0. Fewer, wider values: packing costs per value. A description of
an array (``desc``) is (data, device word, dtype word, shape4, strides4, shape).
"""
import ctypes
import operator
import struct
import sys
import threading

from ._lib import Error, Status

if sys.byteorder != "little":   # the layout is written little-endian
    raise ImportError("zgate: big-endian hosts are not supported")

TENSOR_BYTES, SHAPE_OFF, STRIDE_OFF, OPTS_OFF, BLOCK_BYTES = 48, 240, 400, 560, 592
OPTIONS_SIZE = 32   # sizeof(zgate_options) on LP64: size_t, int (+pad), char*, void*
CPU_WORD = 1        # device word of kDLCPU, id 0


def device_word(device_type, device_id):
    return device_type | device_id << 32


def dtype_word(code, bits, lanes=1):
    return 4 | code << 32 | bits << 40 | lanes << 48


def device_of(desc):
    """(device_type, device_id) of a description."""
    return desc[1] & 0xFFFFFFFF, desc[1] >> 32


def dtype_of(desc):
    """(code, bits, lanes) of a description."""
    w = desc[2]
    return w >> 32 & 0xFF, w >> 40 & 0xFF, w >> 48 & 0xFFFF


def layout(n, k):
    """The block for n tensors of which the first k have their own shape and stride arrays
    (the others are fresh compact outputs: the first tensor's shape array, NULL strides)."""
    fmt = "<" + "6Q" * n + "%dx" % (SHAPE_OFF - TENSOR_BYTES * n)
    fmt += "4q" * k + "%dx" % (160 - 32 * k) + "4q" * k + "%dx" % (160 - 32 * k) + "QiiQQ"
    s = struct.Struct(fmt)
    assert s.size == BLOCK_BYTES
    return s


# (n tensors, k shaped) -> layout, for every combination the calls use
LAYOUTS = {(n, k): layout(n, k) for n, k in ((3, 2), (3, 3), (5, 3), (5, 4), (5, 5))}


class Block:
    __slots__ = ("buf", "t", "arrays", "opts", "fresh", "bwd_args")

    def __init__(self):
        self.buf = ctypes.create_string_buffer(BLOCK_BYTES)
        base = ctypes.addressof(self.buf)
        self.t = tuple(base + TENSOR_BYTES * i for i in range(5))
        # Each tensor gets its own shape array, so the library still checks that shapes agree.
        self.arrays = tuple((base + SHAPE_OFF + 32 * i, base + STRIDE_OFF + 32 * i)
                            for i in range(5))
        self.opts = base + OPTS_OFF
        self.fresh = base + SHAPE_OFF   # a fresh output's shape array: the first tensor's
        # The arguments of zgate_bwd on this block as ready ctypes pointers, for a function
        # bound without argtypes (zgate._lib.raw; zgate._overhead times the library so).
        vp = ctypes.c_void_p
        self.bwd_args = tuple(vp(a) for a in self.t) + (vp(self.opts),)


_tls = threading.local()


def block():
    """The calling thread's block."""
    try:
        return _tls.block
    except AttributeError:
        b = _tls.block = Block()
        return b


def pack(b, descs, fresh, num_threads, stream):
    """Packs descs into block b. fresh: how many trailing descs are fresh compact outputs of
    the first one's shape (written with its shape array and NULL strides)."""
    n = len(descs)
    k = n - fresh
    shaped = descs[:k] if fresh else descs
    vals = []
    ext = vals.extend
    for d, (sa, ta) in zip(shaped, b.arrays):
        ext((d[0], d[1], d[2], sa, ta, 0))
    for i in range(k, n):
        d = descs[i]
        ext((d[0], d[1], d[2], b.fresh, 0, 0))
    for d in shaped:
        ext(d[3])
    for d in shaped:
        ext(d[4])
    LAYOUTS[n, k].pack_into(b.buf, 0, *vals, OPTIONS_SIZE, num_threads, 0, 0, stream)


def to4(name, shape, strides):
    """(shape4, strides4): fewer than 4 dimensions are read as the trailing ones."""
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


def threads_arg(n):
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


def flag_arg(name, value):
    """A True/False keyword (a NumPy bool too); anything else is refused, not read as truthy."""
    if type(value).__name__ in ("bool", "bool_"):
        return bool(value)
    raise Error(None, "%s is %r (%s); it takes True or False" % (name, value,
                                                                  type(value).__name__))
