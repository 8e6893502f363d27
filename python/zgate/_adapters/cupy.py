"""CuPy arrays, described from their own metadata; work runs on CuPy's current stream."""
import cupy

from .. import _dlpack
from .._args import device_of, device_word, dtype_word, to4
from .numpy import dtype_code, element_strides

MUTABLE = True
TORCH = False


def describe(a, name, output, dlstream, keep):
    dt = a.dtype
    code, bits = dtype_code(dt, name)
    shape = a.shape
    s4, t4 = to4(name, shape, element_strides(name, a.strides, dt.itemsize))
    return (a.data.ptr, device_word(_dlpack.KDL_CUDA, a.device.id), dtype_word(code, bits),
            s4, t4, shape)


def empty_like(x, desc):
    with cupy.cuda.Device(device_of(desc)[1]):
        return cupy.empty(tuple(desc[5]), dtype=x.dtype)


def stream(x, desc):
    dev = device_of(desc)[1]
    try:
        s = cupy.cuda.get_current_stream(dev).ptr
    except TypeError:  # older CuPy: current device's stream
        s = cupy.cuda.get_current_stream().ptr
    return s, (s if s else 1)


def finish(desc, given):
    pass
