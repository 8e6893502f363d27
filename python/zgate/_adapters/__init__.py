"""One adapter per array framework: how to describe its arrays for the argument block
(zgate._args), allocate new outputs like them, and find the stream a call runs on.

Each adapter module offers
    describe(x, name, output, dlstream, keep) -> desc   (keep: capsules to release after)
    empty_like(x, desc)                       -> a new compact array of x's kind and dtype
    stream(x, desc)                           -> (stream for zgate_options, stream for __dlpack__)
    finish(desc, given)                       after the call (given: the outputs passed in)
    MUTABLE                                   whether outputs may be given
    TORCH                                     whether these are PyTorch tensors; if so
    via_ops()                                 whether the call goes through zgate.torch's ops
"""
import sys

from .._lib import Error

_kinds = {}   # type -> adapter module
# type -> hot path of zgate.bwd / zgate.fwd, tried before the general route
# unless tracing() (a compiled function, which torch.compile cannot trace):
# fn(dout, z, o, dz, dout_scaled, inplace, num_threads) / fn(o, z, out, num_threads), a
# result, or None to take that route
_fast_bwd = {}
_fast_fwd = {}


def tracing():
    """Whether the call is being traced (the PyTorch adapter puts torch.compiler.is_compiling
    here when it registers its hot path)."""
    return False


def classify(x):
    """The adapter module for x (cached per type)."""
    t = type(x)
    k = _kinds.get(t)
    if k is not None:
        return k
    m = sys.modules
    if "numpy" in m and isinstance(x, m["numpy"].ndarray):
        from . import numpy as k
    elif "torch" in m and isinstance(x, m["torch"].Tensor):
        if t.__torch_dispatch__ is m["torch"].Tensor.__torch_dispatch__:
            from . import torch as k
        else:   # DTensor and other subclasses with their own dispatch
            from . import torch_wrapped as k
    elif "cupy" in m and isinstance(x, m["cupy"].ndarray):
        from . import cupy as k
    elif "jax" in m and isinstance(x, m["jax"].Array):
        from . import jax as k
    elif hasattr(x, "__dlpack__") and hasattr(x, "__dlpack_device__"):
        from . import dlpack as k
    else:
        raise Error(None, "expected an array that speaks DLPack (NumPy, PyTorch, CuPy, JAX...), "
                    "got %s" % t.__name__)
    _kinds[t] = k
    return k


def describe(x, name, output, dlstream, keep):
    """x described by its own adapter (arrays of one call may come from several)."""
    k = _kinds.get(type(x)) or classify(x)
    return k.describe(x, name, output, dlstream, keep)
