"""Any other array: described through the DLPack capsule protocol (``__dlpack__``), the
capsule released right after the call. New outputs of CPU arrays are NumPy arrays."""
from .. import _dlpack
from .._args import device_of, device_word, dtype_of, dtype_word, to4
from .._lib import Error, Status

MUTABLE = True
TORCH = False


def describe(x, name, output, dlstream, keep):
    """dlstream: the consumer stream for CUDA producers."""
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
