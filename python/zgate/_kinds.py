"""How zgate._binding reads each array type and makes new outputs like it: chosen once per
type by classify(type), which answers the tuple of _kind's arguments:

mode      how an array is read, as binding.c describes: EXCHANGE (PyTorch), BUFFER (NumPy),
          CAI (CuPy, Numba...), DLPACK (others), FALLBACK (PyTorch subclasses with their own
          dispatch: their calls go to `fallback`)
like      (fn, keywords): a new output is fn(x), or fn(x, **keywords) for a strided x; or None
written   called with a given output after the library wrote into it (PyTorch's version
          counter), or None
fallback  fallback(op, *args) for arrays on devices the library does not serve (an NPU), or
          NotImplemented where it does not take the call either
stream    stream(device_id): the framework's current CUDA stream (DLPACK mode), or None for
          the legacy default stream
alt       BUFFER: the bits of an array the buffer protocol refuses (bfloat16 as uint16);
          DLPACK: the object to export instead of the array (a detached PyTorch tensor)
mutable   whether it may be written (given as an output)
api       EXCHANGE: the type's DLPack C exchange API capsule
"""
import math
import sys

from ._binding import address
from ._errors import Error

EXCHANGE, BUFFER, CAI, DLPACK, FALLBACK = range(5)
ALIGN = 64   # bytes: new CPU outputs start on a cache line
_np = _cupy = None   # the modules, once an array of theirs is seen


def _kind(mode, like=None, written=None, fallback=None, stream=None, alt=None, mutable=True,
          api=None):
    return (mode, api, like, written, fallback, stream, alt, mutable)   # as binding.c parses it


def classify(t):
    global _np, _cupy
    np, torch, cupy, jax = (sys.modules.get(n) for n in ("numpy", "torch", "cupy", "jax"))
    if np is not None and issubclass(t, np.ndarray):
        _np = np
        return _kind(BUFFER, like=(_numpy_like, None), alt=_bfloat16_bits)
    if torch is not None and issubclass(t, torch.Tensor):
        return _torch(t, torch)
    if jax is not None and issubclass(t, jax.Array):   # it has the CUDA Array Interface on GPUs
        # immutable, and a call led by a JAX array goes to zgate._jax: no outputs made here
        return _kind(DLPACK, mutable=False)
    if (api := _exchange_api(t)) is not None:
        return _kind(EXCHANGE, api=api)
    if hasattr(t, "__cuda_array_interface__"):
        if cupy is not None and issubclass(t, cupy.ndarray):
            _cupy = cupy
            return _kind(CAI, like=(_cupy_like, None))
        return _kind(CAI)
    if hasattr(t, "__dlpack__") and hasattr(t, "__dlpack_device__"):
        return _kind(DLPACK, like=(_dlpack_like, None))
    raise Error(None, "expected an array that speaks DLPack or the CUDA Array Interface "
                "(NumPy, PyTorch, CuPy, JAX...), got %s" % t.__name__)


def _exchange_api(t):
    return getattr(t, "__dlpack_c_exchange_api__", None) or getattr(
        t, "__c_dlpack_exchange_api__", None)


def _aligned(shape, dtype, nbytes):
    """A new C-ordered NumPy array whose data starts on an ALIGN-byte boundary."""
    buf = _np.empty(nbytes + ALIGN, _np.uint8)
    return _np.ndarray(shape, dtype, buf, -address(buf) % ALIGN)


def _numpy_like(x):
    return _aligned(x.shape, x.dtype, x.nbytes)


def reference_like(shape):
    global _np
    import numpy as _np
    return _aligned(shape, _np.float64, 8 * math.prod(shape))


def _bfloat16_bits(x):
    """The bits of a bfloat16 array as uint16 in its byte order (a byte-swapped one is then
    refused by its format), else None."""
    d = x.dtype
    if d.name != "bfloat16" or d.itemsize != 2:
        return None
    return x.view(d.byteorder.replace("|", "=") + "u2")


def _dlpack_like(x):
    """A new NumPy output like another producer's CPU array."""
    if x.__dlpack_device__()[0] != 1:
        raise Error(None, "cannot make outputs like a %s on device %s; pass them"
                    % (type(x).__name__, tuple(x.__dlpack_device__())))
    global _np
    import numpy as _np
    return _numpy_like(_np.from_dlpack(x))


def _cupy_like(x):
    """CuPy allocates on the current device (from its pool for the current stream, the one
    the call runs on): a Device context only where x is on another."""
    dev = x.data.device_id
    if dev == _cupy.cuda.runtime.getDevice():
        return _cupy.ndarray(x.shape, x.dtype)
    with _cupy.cuda.Device(dev):
        return _cupy.ndarray(x.shape, x.dtype)


def _torch(t, torch):
    if (t.__torch_dispatch__ is not torch.Tensor.__torch_dispatch__   # DTensor and the like
            or t.device is not torch.Tensor.device):   # a device its DLPack view may not show
        return _kind(FALLBACK, fallback=_torch_fallback)
    api = _exchange_api(t)
    # without the exchange API (an older PyTorch): __dlpack__ of a detached alias (it refuses
    # a tensor that requires grad), on PyTorch's current stream
    return _kind(EXCHANGE if api is not None else DLPACK, api=api,
                 like=(torch.empty_like, {"memory_format": torch.contiguous_format}),
                 written=getattr(torch.autograd.graph, "increment_version", None),
                 fallback=_torch_fallback, stream=_torch_stream, alt=t.detach)


def _torch_stream(device_id):
    import torch
    return torch.cuda.current_stream(device_id).cuda_stream


def _torch_fallback(op, *args):
    from . import torch as zt
    return zt.fallback(op, *args)
