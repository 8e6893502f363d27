"""NumPy arrays, described from their own metadata (no capsule round trip)."""
import numpy

from .. import _dlpack
from .._args import CPU_WORD, dtype_word, to4
from .._lib import Error, Status

MUTABLE = True
TORCH = False
_dtypes = {}   # numpy dtype -> (code, bits)
_words = {}    # numpy dtype -> dtype word


def dtype_code(dt, name):
    """(DLPack code, bits) of a NumPy dtype (CuPy's dtypes are NumPy's)."""
    cb = _dtypes.get(dt)
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
        _dtypes[dt] = cb
    return cb


def element_strides(name, strides, item):
    """Byte strides in elements; refused when not whole elements."""
    if any(s % item for s in strides):
        raise Error(Status.ERR_MISALIGNED, "%s has byte strides %s, not multiples of its "
                    "element size %d" % (name, strides, item))
    return tuple(s // item for s in strides)


def describe(a, name, output, dlstream, keep):
    dt = a.dtype
    w = _words.get(dt)
    if w is None:
        w = _words[dt] = dtype_word(*dtype_code(dt, name))
    if output and not a.flags.writeable:
        raise Error(None, "%s is a read-only array" % name)
    shape = a.shape
    s4, t4 = to4(name, shape, element_strides(name, a.strides, dt.itemsize))
    return (a.__array_interface__["data"][0], CPU_WORD, w, s4, t4, shape)


def empty_like(x, desc):
    return numpy.empty(tuple(desc[5]), dtype=x.dtype)


def stream(x, desc):
    return 0, None


def finish(desc, given):
    pass
