"""Any other array: described through the DLPack capsule protocol (``__dlpack__``, DLPack 1.x
where the producer offers it), the capsule released right after the call. New outputs of
CPU arrays are NumPy arrays."""
from .. import _dlpack
from .._args import device_of, device_word, dtype_of, dtype_word, to4
from .._lib import Error, Status

MUTABLE = True
TORCH = False


def _capsule(x, device, dlstream):
    """A capsule of x: DLPack 1.x asked for first, on x's own device and never a copy; a
    legacy one from producers that take none of those keywords."""
    kw = {"stream": dlstream} if device[0] in (_dlpack.KDL_CUDA, _dlpack.KDL_CUDA_MANAGED) else {}
    try:
        return x.__dlpack__(max_version=(_dlpack.MAJOR, 0), dl_device=device, copy=False, **kw)
    except TypeError:   # a producer of DLPack 0.x
        return x.__dlpack__(**kw)


def describe(x, name, output, dlstream, keep):
    """dlstream: the consumer stream for CUDA producers. A versioned tensor flagged read-only
    is refused as an output, and so is one the producer copied (a write would be lost)."""
    try:
        b = _dlpack.Borrowed(_capsule(x, tuple(x.__dlpack_device__()), dlstream))
    except Error:
        raise
    except Exception as e:
        raise Error(None, "%s: could not take a DLPack view of %s: %s"
                    % (name, type(x).__name__, e)) from e
    keep.append(b)
    if output and b.flags & (_dlpack.FLAG_READ_ONLY | _dlpack.FLAG_IS_COPIED):
        why = "read-only" if b.flags & _dlpack.FLAG_READ_ONLY else "a copy"
        raise Error(None, "%s is %s (its DLPack export says so) and cannot be written"
                    % (name, why))
    data, dt, di, code, bits, lanes, shape, strides = _dlpack.describe(b.tensor)
    s4, t4 = to4(name, shape, strides)
    return (data, device_word(dt, di), dtype_word(code, bits, lanes), s4, t4, shape)


def empty_like(x, desc):
    if device_of(desc)[0] != _dlpack.KDL_CPU:
        raise Error(None, "cannot allocate outputs like %s on device type %d; pass the outputs"
                    % (type(x).__name__, device_of(desc)[0]))
    import numpy
    return numpy.empty(tuple(desc[5]), dtype=numpy_dtype(desc))


def numpy_dtype(desc):
    import numpy
    code, bits, lanes = dtype_of(desc)
    if code == _dlpack.KDL_FLOAT and bits in (16, 32, 64) and lanes == 1:
        return numpy.dtype("float%d" % bits)
    if code == _dlpack.KDL_BFLOAT and bits == 16 and lanes == 1:
        import ml_dtypes
        return numpy.dtype(ml_dtypes.bfloat16)
    raise Error(Status.ERR_DTYPE, "dtype %s is not float32, float16 or bfloat16 (new outputs "
                "take the input's dtype)" % _dlpack.dtype_name(code, bits, lanes))


def stream(x, desc):
    return 0, 1   # the legacy default stream, "1" in the DLPack stream protocol


def finish(desc, given):
    pass
