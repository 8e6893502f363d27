"""JAX arrays: described through DLPack; immutable, so outputs are always new. On CUDA the
call runs on the legacy default stream and is waited for, since JAX cannot be told to wait
for it before reading the result."""
import ctypes
import os

import jax
import jax.numpy as jnp

from .. import _dlpack
from .._args import device_of
from .._lib import Error, Status
from .dlpack import describe, stream  # noqa: F401  (JAX speaks plain DLPack)

MUTABLE = False
TORCH = False


def empty_like(x, desc):
    shape = tuple(desc[5])
    dev = getattr(x, "device", None)
    if dev is None or callable(dev):
        dev = next(iter(x.devices()))
    try:
        y = jnp.empty(shape, dtype=x.dtype, device=dev)
    except TypeError:   # older JAX: no device= here
        y = jax.device_put(jnp.empty(shape, dtype=x.dtype), dev)
    # A fresh buffer nobody else holds; it must exist before we write into it.
    return y.block_until_ready()


def finish(desc, given):
    dev_type, dev_id = device_of(desc)
    if dev_type == _dlpack.KDL_CUDA:
        _sync_legacy_stream(dev_id)


_cudart = None


def _sync_legacy_stream(device_id):
    """Wait for the legacy default stream of a device."""
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
