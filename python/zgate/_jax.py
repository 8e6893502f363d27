"""JAX arrays in zgate.bwd / zgate.fwd: the library runs inside JAX's programs as an XLA FFI
custom call (zgate/libzgate_jax, python/ext/jax_ffi.cc: one handler per platform for both
ops), registered with jax.ffi on the first call. One path for the CPU and CUDA GPUs, eager and
under jax.jit: XLA allocates the outputs and, on a GPU, the kernel runs on XLA's stream,
ordered with the rest of the program. The library checks the call's shapes and dtypes when
it is traced, so bad input raises zgate.Error at the call, with the library's message.
"""
import ctypes
import os

import jax
import numpy as np

from . import _binding
from ._errors import Error, Status

_LIB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "libzgate_jax.so")
_lib = None   # the handlers' library, once loaded and its targets registered


def _capsule(fn):
    """A PyCapsule of a handler's address, as jax.ffi.register_ffi_target takes it. Made with a
    private ctypes function object: jax.ffi.pycapsule retypes the process-wide
    ctypes.pythonapi.PyCapsule_New, which other ctypes code in the process may rely on."""
    new = ctypes.pythonapi["PyCapsule_New"]   # [] gives a new object; attribute access a shared one
    new.restype = ctypes.py_object
    new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    return new(ctypes.cast(fn, ctypes.c_void_p), None, None)


def _load():
    global _lib
    if _lib is not None:
        return _lib
    if not os.path.exists(_LIB):
        raise Error(None, "this zgate was built without JAX (no %s): JAX arrays need zgate "
                    "built where jax imports: pip install --no-build-isolation ." % _LIB)
    lib = ctypes.CDLL(_LIB)
    lib.zgate_last_error.restype = ctypes.c_char_p
    lib.zg_last_refusal.restype = ctypes.POINTER(_Refusal)
    for p in ["cpu"] + (["CUDA"] if hasattr(lib, "zgate_jax_cuda") else []):
        jax.ffi.register_ffi_target("zgate", _capsule(getattr(lib, "zgate_jax_" + p.lower())),
                                    platform=p)
    _lib = lib
    return lib


def _dlpack_dtype(dtype):
    """DLPack's (code, bits) of a NumPy/JAX dtype, for the library's check."""
    d = np.dtype(dtype)
    code = 4 if d.name == "bfloat16" else {"i": 0, "u": 1, "f": 2, "c": 5, "b": 6}.get(d.kind, 3)
    return code, d.itemsize * 8


def _validate(lib, arrays, num_threads):
    """The library's check of the call (shapes, dtypes, num_threads), on data-less tensors:
    bwd (dout, z, o, dz, dout_scaled) or fwd (o, z, out), each described to
    zgate_jax_validate as (ndim, DLPack code, bits, shape...)."""
    desc = [v for a in arrays for v in (len(a.shape), *_dlpack_dtype(a.dtype), *a.shape)]
    st = lib.zgate_jax_validate(int(len(arrays) == 5), (ctypes.c_int64 * len(desc))(*desc),
                                num_threads)
    if st not in (Status.OK, Status.ERR_NULL_DATA):
        r = lib.zg_last_refusal().contents    # what the refusal names (src/zgate_private.h)
        raise Error(st, lib.zgate_last_error().decode(),
                    r.tensor.decode() if r.tensor else None, r.dim if r.dim >= 0 else None)


class _Refusal(ctypes.Structure):
    _fields_ = [("tensor", ctypes.c_char_p), ("dim", ctypes.c_int), ("dtype", ctypes.c_uint32)]


def _inputs(arrays, lib):
    """JAX arrays (and tracers) as they are; anything else through NumPy. Concrete arrays on a
    platform the handlers do not serve are refused here, before XLA lowers the call."""
    cuda, out = hasattr(lib, "zgate_jax_cuda"), []   # the CUDA handler is built
    for a in arrays:
        if not isinstance(a, jax.Array):
            a = np.asarray(a)
        elif not isinstance(a, jax.core.Tracer):
            for d in a.devices():
                if d.platform != "cpu" and not (d.platform == "gpu" and cuda):
                    raise Error(Status.ERR_NO_CUDA if d.platform == "gpu" else
                                Status.ERR_DEVICE_UNSUPPORTED,
                                "a JAX array on %s, but this zgate serves JAX on the CPU%s"
                                % (d, " and CUDA GPUs" if cuda else ""))
        out.append(a)
    return out


def _call(inputs, n_out, num_threads):
    """The custom call on (dout, z, o) (n_out 2) or (o, z) (n_out 1): new arrays of the first
    input's shape and dtype."""
    lib = _load()
    num_threads = _binding.num_threads(num_threads)
    inputs = _inputs(inputs, lib)
    new = jax.ShapeDtypeStruct(inputs[0].shape, inputs[0].dtype)
    _validate(lib, inputs + [new] * n_out, num_threads)
    fn = jax.ffi.ffi_call("zgate", (new,) * n_out, vmap_method="broadcast_all")
    return fn(*inputs, num_threads=np.int32(num_threads))


def _immutable(what):
    return Error(None, "JAX arrays are immutable: outputs (%s) cannot be given for them; "
                 "use the arrays returned" % what)


def bwd(dout, z, o, dz, dout_scaled, inplace, num_threads):
    """zgate.bwd for JAX: (dz, dout_scaled), new arrays of dout's shape and dtype."""
    if inplace or dz is not None or dout_scaled is not None:
        raise _immutable("dz=, dout_scaled=, inplace=")
    return tuple(_call((dout, z, o), 2, num_threads))


def fwd(o, z, out, num_threads):
    """zgate.fwd for JAX: out, a new array of o's shape and dtype."""
    if out is not None:
        raise _immutable("out=")
    return _call((o, z), 1, num_threads)[0]
